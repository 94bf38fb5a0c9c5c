#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| pap_fuzz::agent::discovery(data));
