//! Writes the seed inputs made in Rust under a corpus directory:
//! `cargo run -p pap-fuzz --example seeds -- conformance/fuzz/corpus` (what `conformance/fuzz/seed-corpus.sh` runs).

fn main() -> std::io::Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: seeds OUT_DIR"))?;
    let written = pap_fuzz::seeds::write(std::path::Path::new(&out))?;
    eprintln!("{written} seeds written under {}", out.to_string_lossy());
    Ok(())
}
