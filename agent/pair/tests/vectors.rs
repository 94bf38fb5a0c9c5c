//! AIP-59 `pair/v2` against the reference implementation's known-answer vectors: the same
//! pinned keys and randomness give the same bytes on the wire and in the key schedule.
//!
//! The vectors are test data from `agentproto/ts`,
//! `packages/secrets/src/crypto/__tests__/golden-vectors.ts` (`KEYS`, `GOLDEN`, `GOLDEN_V2`),
//! with the inputs of its `golden.test.ts`: client name `golden@client`, offer secret
//! `AAAABBBBCCCCDDDDEEEEFF`, every random byte 0x5a. These keys protect nothing.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use pap_pair::PairError;
use pap_pair::derive::{epoch_of, epoch_tokens, offer_tokens, pair_root};
use pap_pair::handshake::{
    ClientHandshake, Framing, Hello, Reply, handshake_text, read_handshake, respond_with, tokens_match,
};
use pap_pair::keys::{DaemonKeys, Ed25519Public, Ed25519Secret, X25519Public, X25519Secret};
use pap_pair::offer::Offer;
use pap_pair::seal::{seal, unseal};
use zeroize::Zeroizing;

const DAEMON_X_PUB: &str = "MCowBQYDK2VuAyEA9g736kFg03Iq76wRWkotIp2nMvizVOFK8CJUNqNqSX8=";
const DAEMON_X_PRIV: &str = "MC4CAQAwBQYDK2VuBCIEINCb5jNG/nQ6EID4nZ0A8NJBunSYCntWk/BhUr41ySRb";
const DAEMON_ED_PUB: &str = "MCowBQYDK2VwAyEABT4L+Suyw4ZE23lVR/j5EEccBI/UG0umjd8vrdIMmm0=";
const DAEMON_ED_PRIV: &str = "MC4CAQAwBQYDK2VwBCIEID4BeaIrGjZ47YwkJh3I5/1/thUWK5UePjCmDy9DQHeE";
const CLIENT_EPH_PRIV: &str = "MC4CAQAwBQYDK2VuBCIEIGDTCFj+wnd0HoTOeQneR2DfPxny0lpbfx72LIG8MxR4";
const SEAL_EPH_PRIV: &str = "MC4CAQAwBQYDK2VuBCIEIAiklyl5x6NOE+ceDmQxgGpH9Rl8RnTzbYaEiXz4YXtE";
const DAEMON_EPH_PRIV: &str = "MC4CAQAwBQYDK2VuBCIEIMir0klq8owtm4aFKPyxiMptE+w8ywjrjLfQ4bDPltZq";

const FINGERPRINT: &str = "3618963fe733bf15774a717f5231f46a";
const SEALED: &str = "eyJ2IjoxLCJhbGciOiJ4MjU1MTktaGtkZi1zaGEyNTYtYWVzMjU2Z2NtIiwiZXBrIjoiTUNvd0JRWURLMlZ1QXlFQWxIS2Uzd2FXTXg4OEpTd2MwQTR0TGZseFB1RGl2RU80alg4K1d1Q3BWaFU9IiwiaXYiOiJXbHBhV2xwYVdscGFXbHBhIiwiY3QiOiJJd3Y5NXpnbHI5VWRhSmFEcXV3dnF3cWgyR289IiwidGFnIjoiRjdmRGI5MEZPR3dlL09rcXVBMzczQT09In0=";
const V1_PAIR_ROOT: &str = "KKf8y+HzsKOPnW+2t7hY0r0V5Q/d7VIxzO+lKgx8IXw=";
const V1_OFFER_URL: &str = "agentproto://pair?v=1&rv=wss%3A%2F%2Frdv.example%2Fv1&id=3618963fe733bf15&pk=MCowBQYDK2VuAyEA9g736kFg03Iq76wRWkotIp2nMvizVOFK8CJUNqNqSX8&sk=MCowBQYDK2VwAyEABT4L-Suyw4ZE23lVR_j5EEccBI_UG0umjd8vrdIMmm0&t=AAAABBBBCCCCDDDDEEEEFF&exp=1900000000";

const HELLO_WIRE: &str = "{\"v\":2,\"ePub\":\"MCowBQYDK2VuAyEAo9dEfjHKYJvYKfiEreVUWGHdjkU+vh57Gp3GWsMJKDw=\",\"ct0\":\"eyJ2IjoxLCJhbGciOiJ4MjU1MTktaGtkZi1zaGEyNTYtYWVzMjU2Z2NtIiwiZXBrIjoiTUNvd0JRWURLMlZ1QXlFQWxIS2Uzd2FXTXg4OEpTd2MwQTR0TGZseFB1RGl2RU80alg4K1d1Q3BWaFU9IiwiaXYiOiJXbHBhV2xwYVdscGFXbHBhIiwiY3QiOiJQMGJ5N3pRdTRkRWhmSjNQNUtzYW5FVTBCcWc1ZGhyMmxDSDQwVGIwNmlKeWZEWDNBbHFCMDdha3FXNmVJV05CNnpuNFlIWmJ4UXk5bHVDY3ZPdTFXK216ZlNuNGNnR2xqWTY1ZGZHUXZQVTlpd3ZBS3N5Zm1oNnVyR3E0eWc3TG1BSzNNdlRJRGlhekdOTXhZY2JyaUtkQXlaTTBXdVVoanYvQ1ZJNUhHUzBsanNOUUI2RmlOVHJHS0NrTTRmbFVydE9KMFJSeU42Z2J6ZkY5WDVrPSIsInRhZyI6IjBNQVM5bmNRNVd3cVZaSzdBb0tEb3c9PSJ9\"}";
const REPLY_WIRE: &str = "{\"v\":2,\"dePub\":\"MCowBQYDK2VuAyEAx1GZFWBLMBqdB1P+ZP2xke5jyW3rzu8PyCHqY/M4fSM=\",\"sig\":\"wcTzXaVNoViwHa9f8NobdgydUZVqC0kO3I3cDQIrhH0BxaDqxnTAywBsb6fqTg8sAi8BQZrZVNpvNOU/qyYdBA==\"}";
/// The two messages as the reference puts them on the socket (`e2e.ts`
/// `clientHandshakeOverSink`/`daemonHandshakeOverSink`: `{ t: "e2e_handshake", d:
/// base64Encode(encodePairingMessage(m)) }`, `JSON.stringify`, standard padded base64), made
/// from its `GOLDEN_V2` wires; the reply's needs padding.
const HELLO_FRAME: &str = "{\"t\":\"e2e_handshake\",\"d\":\"eyJ2IjoyLCJlUHViIjoiTUNvd0JRWURLMlZ1QXlFQW85ZEVmakhLWUp2WUtmaUVyZVZVV0dIZGprVSt2aDU3R3AzR1dzTUpLRHc9IiwiY3QwIjoiZXlKMklqb3hMQ0poYkdjaU9pSjRNalUxTVRrdGFHdGtaaTF6YUdFeU5UWXRZV1Z6TWpVMloyTnRJaXdpWlhCcklqb2lUVU52ZDBKUldVUkxNbFoxUVhsRlFXeElTMlV6ZDJGWFRYZzRPRXBUZDJNd1FUUjBUR1pzZUZCMVJHbDJSVTgwYWxnNEsxZDFRM0JXYUZVOUlpd2lhWFlpT2lKWGJIQmhWMnh3WVZkc2NHRlhiSEJoSWl3aVkzUWlPaUpRTUdKNU4zcFJkVFJrUldobVNqTlFOVXR6WVc1RlZUQkNjV2MxWkdoeU1teERTRFF3VkdJd05tbEtlV1pFV0ROQmJIRkNNRGRoYTNGWE5tVkpWMDVDTm5wdU5GbElXbUo0VVhrNWJIVkRZM1pQZFRGWEsyMTZabE51TkdOblIyeHFXVFkxWkdaSFVYWlFWVGxwZDNaQlMzTjVabTFvTm5WeVIzRTBlV2MzVEcxQlN6Tk5kbFJKUkdsaGVrZE9UWGhaWTJKeWFVdGtRWGxhVFRCWGRWVm9hbll2UTFaSk5VaEhVekJzYW5OT1VVSTJSbWxPVkhKSFMwTnJUVFJtYkZWeWRFOUtNRkpTZVU0MloySjZaa1k1V0RWclBTSXNJblJoWnlJNklqQk5RVk01Ym1OUk5WZDNjVlphU3pkQmIwdEViM2M5UFNKOSJ9\"}";
const REPLY_FRAME: &str = "{\"t\":\"e2e_handshake\",\"d\":\"eyJ2IjoyLCJkZVB1YiI6Ik1Db3dCUVlESzJWdUF5RUF4MUdaRldCTE1CcWRCMVArWlAyeGtlNWp5VzNyenU4UHlDSHFZL000ZlNNPSIsInNpZyI6IndjVHpYYVZOb1Zpd0hhOWY4Tm9iZGd5ZFVaVnFDMGtPM0kzY0RRSXJoSDBCeGFEcXhuVEF5d0JzYjZmcVRnOHNBaThCUVpyWlZOcHZOT1UvcXlZZEJBPT0ifQ==\"}";
const CLIENT_SEND_KEY: &str = "b72b45a1057f1d25b4a57e91c340d5c9dd7c566c9c372dfbe0fa6ad9dc62837f";
const CLIENT_RECV_KEY: &str = "57183bc876818760b9f27280a568f884e2248fca53bc5d9a99d3fab22f2c24f2";
const TRANSCRIPT: &str = "9e3225b75f1a34817ee1ee255a9b3c209169a4f752e1f1918b6237dbd191e502";
const PAIR_ROOT: &str = "bYFP4u3plI2gyB8GmVs6UBXRAyun1Rb24bclG2dNi1k=";
const OFFER_SECRET: &str = "AAAABBBBCCCCDDDDEEEEFF";
const OFFER_ROUTE: &str = "G8SO5JOFLKZDqugteQRpFw";
const OFFER_AUTH: &str = "UOMhljizs5DtoS-V-DYVQjA16RFxSEjLIvoWrBTw7ZI";
const EPOCH_ROUTE_20000: &str = "_qxhZWUGUgTzFsNsbv1Alw";
const EPOCH_AUTH_20000: &str = "uXAlKAr1zp4L0hDl1VzXDdc9QsOh0rIYK4ijWsZaocQ";
const OFFER_URL: &str = "agentproto://pair?v=2&rv=wss%3A%2F%2Frdv.example%2Fv1&id=3618963fe733bf15774a717f5231f46a&pk=MCowBQYDK2VuAyEA9g736kFg03Iq76wRWkotIp2nMvizVOFK8CJUNqNqSX8&sk=MCowBQYDK2VwAyEABT4L-Suyw4ZE23lVR_j5EEccBI_UG0umjd8vrdIMmm0&s=AAAABBBBCCCCDDDDEEEEFF&exp=1900000000";

fn b64(text: &str) -> Vec<u8> {
    STANDARD.decode(text).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn x_secret(pkcs8: &str) -> X25519Secret {
    X25519Secret::from_pkcs8(&b64(pkcs8)).unwrap()
}

fn daemon() -> DaemonKeys {
    DaemonKeys {
        x25519: x_secret(DAEMON_X_PRIV),
        ed25519: Ed25519Secret::from_pkcs8(&b64(DAEMON_ED_PRIV)).unwrap(),
    }
}

fn daemon_public() -> (X25519Public, Ed25519Public) {
    (
        X25519Public::from_spki(&b64(DAEMON_X_PUB)).unwrap(),
        Ed25519Public::from_spki(&b64(DAEMON_ED_PUB)).unwrap(),
    )
}

fn client() -> ClientHandshake {
    let (x, ed) = daemon_public();
    let ephemeral = [x_secret(CLIENT_EPH_PRIV), x_secret(SEAL_EPH_PRIV)];
    ClientHandshake::start_with(x, ed, OFFER_AUTH, "golden@client", ephemeral, [0x5a; 12]).unwrap()
}

#[test]
fn keys_read_and_write_their_der_and_the_fingerprint_is_128_bits_of_the_spki_hash() {
    let keys = daemon();
    let (x, ed) = daemon_public();
    assert_eq!(keys.x25519.public().unwrap(), x);
    assert_eq!(keys.ed25519.public().unwrap(), ed);
    assert_eq!(STANDARD.encode(x.to_spki()), DAEMON_X_PUB);
    assert_eq!(STANDARD.encode(keys.x25519.to_pkcs8().as_slice()), DAEMON_X_PRIV);
    assert_eq!(STANDARD.encode(keys.ed25519.to_pkcs8().as_slice()), DAEMON_ED_PRIV);
    assert_eq!(keys.fingerprint().unwrap(), FINGERPRINT);
    // An Ed25519 key is no X25519 key, and the reverse.
    assert_eq!(X25519Public::from_spki(&b64(DAEMON_ED_PUB)), Err(PairError::InvalidKey));
    assert_eq!(Ed25519Public::from_spki(&b64(DAEMON_X_PUB)), Err(PairError::InvalidKey));
}

#[test]
fn route_and_auth_tokens_are_the_references() {
    let offer = offer_tokens(OFFER_SECRET).unwrap();
    assert_eq!(offer.route, OFFER_ROUTE);
    assert_eq!(offer.auth.as_str(), OFFER_AUTH);
    let root: [u8; 32] = b64(V1_PAIR_ROOT).try_into().unwrap();
    let epoch = epoch_tokens(&root, 20_000).unwrap();
    assert_eq!(epoch.route, EPOCH_ROUTE_20000);
    assert_eq!(epoch.auth.as_str(), EPOCH_AUTH_20000);
    // The epoch is the UTC day number.
    assert_eq!(epoch_of(20_000 * 86_400_000), 20_000);
    assert_eq!(epoch_of(20_001 * 86_400_000 - 1), 20_000);
    assert!(
        !format!("{offer:?}").contains(OFFER_AUTH),
        "an auth token is never printed"
    );
}

#[test]
fn the_seal_is_the_references_and_opens_only_untampered_with_its_key() {
    let (x, _) = daemon_public();
    let sealed = seal(
        "golden plaintext ✓".as_bytes(),
        &x,
        &x_secret(SEAL_EPH_PRIV),
        [0x5a; 12],
    )
    .unwrap();
    assert_eq!(sealed, SEALED);
    let opened = unseal(SEALED, &daemon().x25519).unwrap();
    assert_eq!(opened.as_slice(), "golden plaintext ✓".as_bytes());
    // Another key, or one changed byte of the envelope, opens nothing.
    assert_eq!(
        unseal(SEALED, &x_secret(CLIENT_EPH_PRIV)).err(),
        Some(PairError::Unseal)
    );
    let mut envelope = String::from_utf8(b64(SEALED)).unwrap();
    envelope = envelope.replacen("\"ct\":\"I", "\"ct\":\"J", 1);
    assert_eq!(
        unseal(&STANDARD.encode(envelope), &daemon().x25519).err(),
        Some(PairError::Unseal)
    );
}

#[test]
fn the_hello_the_reply_the_session_keys_and_the_pair_root_are_the_references() {
    let client = client();
    assert_eq!(serde_json::to_string(client.hello()).unwrap(), HELLO_WIRE);
    let keys = daemon();
    let mut presented = None;
    let (reply, daemon_session) = respond_with(
        client.hello(),
        &keys,
        |auth| {
            presented = Some(auth.to_owned());
            tokens_match(auth, OFFER_AUTH)
        },
        &x_secret(DAEMON_EPH_PRIV),
    )
    .unwrap();
    assert_eq!(presented.as_deref(), Some(OFFER_AUTH));
    assert_eq!(daemon_session.client_name, "golden@client");
    assert_eq!(serde_json::to_string(&reply).unwrap(), REPLY_WIRE);
    let session = client.complete(&reply).unwrap();
    assert_eq!(hex(session.send_key.as_slice()), CLIENT_SEND_KEY);
    assert_eq!(hex(session.recv_key.as_slice()), CLIENT_RECV_KEY);
    assert_eq!(hex(daemon_session.send_key.as_slice()), CLIENT_RECV_KEY);
    assert_eq!(hex(daemon_session.recv_key.as_slice()), CLIENT_SEND_KEY);
    assert_eq!(hex(&session.transcript), TRANSCRIPT);
    let client_root = pair_root(&session.send_key, &session.recv_key, &session.transcript).unwrap();
    let daemon_root = pair_root(
        &daemon_session.send_key,
        &daemon_session.recv_key,
        &daemon_session.transcript,
    )
    .unwrap();
    assert_eq!(STANDARD.encode(client_root.as_slice()), PAIR_ROOT);
    assert_eq!(client_root, daemon_root);
}

#[test]
fn a_hello_with_the_wrong_auth_or_a_swapped_key_is_refused_before_anything_is_signed() {
    let keys = daemon();
    let refused = respond_with(
        client().hello(),
        &keys,
        |auth| tokens_match(auth, EPOCH_AUTH_20000),
        &x_secret(DAEMON_EPH_PRIV),
    );
    assert_eq!(refused.err(), Some(PairError::AuthRejected));
    // The broker swaps the hello's ephemeral key for one of its own: the seal still names the
    // client's.
    let swapped = Hello {
        e_pub: STANDARD.encode(x_secret(DAEMON_EPH_PRIV).public().unwrap().to_spki()),
        ..client().hello().clone()
    };
    let refused = respond_with(&swapped, &keys, |_| true, &x_secret(DAEMON_EPH_PRIV));
    assert_eq!(refused.err(), Some(PairError::EphemeralMismatch));
    // A v1 hello is outdated (§7).
    let v1 = Hello {
        v: 1,
        ..client().hello().clone()
    };
    let refused = respond_with(&v1, &keys, |_| true, &x_secret(DAEMON_EPH_PRIV));
    assert_eq!(refused.err(), Some(PairError::Outdated));
}

#[test]
fn a_reply_not_signed_by_the_pinned_key_is_refused() {
    let reply: Reply = serde_json::from_str(REPLY_WIRE).unwrap();
    let mut sig = b64(&reply.sig);
    sig[0] ^= 1;
    let forged = Reply {
        sig: STANDARD.encode(&sig),
        ..reply.clone()
    };
    assert_eq!(client().complete(&forged).err(), Some(PairError::BadSignature));
    // A reply from another daemon ephemeral key breaks the transcript the signature covers.
    let moved = Reply {
        de_pub: STANDARD.encode(x_secret(SEAL_EPH_PRIV).public().unwrap().to_spki()),
        ..reply
    };
    assert_eq!(client().complete(&moved).err(), Some(PairError::BadSignature));
}

fn golden_offer() -> Offer {
    let (x, ed) = daemon_public();
    Offer {
        rendezvous: "wss://rdv.example/v1".to_owned(),
        fingerprint: FINGERPRINT.to_owned(),
        daemon_x25519: x,
        daemon_ed25519: ed,
        secret: Zeroizing::new(OFFER_SECRET.to_owned()),
        exp: 1_900_000_000,
    }
}

#[test]
fn the_offer_url_is_the_references_in_both_forms() {
    let offer = golden_offer();
    assert_eq!(offer.to_url().as_str(), OFFER_URL);
    assert_eq!(Offer::parse(OFFER_URL, 1_800_000_000).unwrap(), offer);
    let web = offer.to_web_url("https://{fp}.pair.example/pair").unwrap();
    assert_eq!(
        web.as_str(),
        format!(
            "https://{FINGERPRINT}.pair.example/pair#{}",
            OFFER_URL.strip_prefix("agentproto://pair?").unwrap()
        )
    );
    assert_eq!(Offer::parse(&web, 1_800_000_000).unwrap(), offer);
    assert!(offer.to_web_url("http://pair.example/pair").is_err(), "https only");
    assert!(
        offer.to_web_url("http://127.0.0.1:8790/pair").is_ok(),
        "or http on loopback"
    );
    assert!(offer.to_web_url("http://127.0.0.1.pair.example/pair").is_err());
    // A host's own origin on this machine (§5.8): browsers resolve *.localhost to loopback.
    assert!(
        offer
            .to_web_url("http://{fp}.localhost:8790/pair")
            .unwrap()
            .starts_with(&format!("http://{FINGERPRINT}.localhost:8790/pair#"))
    );
    assert!(offer.to_web_url("http://localhost.pair.example/pair").is_err());
    assert!(
        offer.to_web_url("https://pair.example/pair#x").is_err(),
        "no fragment of its own"
    );
    assert!(
        !format!("{offer:?}").contains(OFFER_SECRET),
        "the secret is never printed"
    );
}

#[test]
fn an_offer_is_refused_before_any_socket_when_it_breaks_a_rule() {
    let now = 1_800_000_000;
    let refused = |url: &str| Offer::parse(url, now).err();
    assert_eq!(refused(V1_OFFER_URL), Some(PairError::Outdated));
    assert_eq!(
        Offer::parse(OFFER_URL, 1_900_000_000).err(),
        Some(PairError::OfferExpired)
    );
    let swap = |from: &str, to: &str| OFFER_URL.replacen(from, to, 1);
    for (url, why) in [
        (swap("v=2", "v=3"), "v"),
        (swap("wss%3A", "https%3A"), "rv"),
        // Plain WebSocket off loopback: every route in the clear (review S4).
        (swap("wss%3A", "ws%3A"), "rv"),
        (swap("&s=AAAABBBBCCCCDDDDEEEEFF", "&s="), "s"),
        (swap("&s=AAAABBBBCCCCDDDDEEEEFF", "&s=AAAA%2BBBB"), "s"),
        (swap("id=3", "id=4"), "id is not the fingerprint of pk"),
        (swap("id=3618963fe733bf15774a717f5231f46a", "id=3618963fe733bf15"), "id"),
        (swap("&exp=1900000000", "&exp=soon"), "exp"),
        (swap("&exp=1900000000", ""), "exp"),
        (format!("{OFFER_URL}&v=2"), "a parameter given twice"),
        // pk and sk exchanged: each is a key of the other kind.
        (
            swap(
                "pk=MCowBQYDK2VuAyEA9g736kFg03Iq76wRWkotIp2nMvizVOFK8CJUNqNqSX8",
                "pk=MCowBQYDK2VwAyEABT4L-Suyw4ZE23lVR_j5EEccBI_UG0umjd8vrdIMmm0",
            ),
            "pk",
        ),
    ] {
        assert_eq!(refused(&url), Some(PairError::MalformedOffer(why)), "{url}");
    }
    assert_eq!(
        refused("https://pair.example/pair"),
        Some(PairError::MalformedOffer("no offer in the fragment"))
    );
}

#[test]
fn a_broker_is_wss_anywhere_and_ws_only_on_loopback() {
    use pap_pair::offer::rendezvous_allowed;
    for allowed in [
        "wss://rdv.example/v1",
        "wss://192.0.2.7:8443/",
        "ws://127.0.0.1:8788/",
        "ws://127.3.4.5/",
        "ws://[::1]:8788/",
        "ws://localhost:8788/",
        "ws://LOCALHOST/",
    ] {
        assert!(rendezvous_allowed(allowed), "{allowed}");
    }
    for refused in [
        "ws://rdv.example/v1",
        "ws://192.0.2.7:8788/",
        "ws://[::ffff:127.0.0.1]/",
        "ws://localhost.rdv.example/",
        "ws://0.0.0.0:8788/",
        "https://rdv.example/",
        "wss://",
        "not a url",
    ] {
        assert!(!rendezvous_allowed(refused), "{refused}");
    }
    // The offer of the reference's vectors, its broker moved to a plain loopback socket, is fine.
    let local = OFFER_URL.replacen("wss%3A%2F%2Frdv.example", "ws%3A%2F%2F127.0.0.1%3A8788", 1);
    assert_eq!(
        Offer::parse(&local, 1_800_000_000).unwrap().rendezvous,
        "ws://127.0.0.1:8788/v1"
    );
}

/// §3.5: frames sealed with the golden session's client send key open with the daemon's
/// receive key in counter order; the nonce is four zero bytes and `u64be(n)`, the AAD
/// `u64be(n)` (checked against AES-256-GCM directly); replays, reordering, tampering and
/// plaintext frames end the channel.
#[test]
fn the_e2e_channel_takes_exactly_the_next_frame_and_ends_on_anything_else() {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    use pap_pair::channel::{ChannelError, Receiver, Sender};

    let send_key: [u8; 32] = (0..32)
        .map(|i| u8::from_str_radix(&CLIENT_SEND_KEY[i * 2..i * 2 + 2], 16).unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let mut sender = Sender::new(&send_key).unwrap();
    let first = sender.seal(br#"{"t":"hello"}"#).unwrap();
    let second = sender.seal(br#"{"t":"http_request"}"#).unwrap();
    assert_eq!((first.t.as_str(), first.n, second.n), ("e2e", 0, 1));
    // The layout, by hand: nonce 0,0,0,0 ‖ u64be(1), AAD u64be(1).
    let mut by_hand = b64(&second.d);
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &send_key).unwrap());
    let mut nonce = [0_u8; 12];
    nonce[4..].copy_from_slice(&1_u64.to_be_bytes());
    let opened = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(1_u64.to_be_bytes()),
            &mut by_hand,
        )
        .unwrap();
    assert_eq!(opened, br#"{"t":"http_request"}"#);

    let wire = |e: &pap_pair::channel::Envelope| serde_json::to_string(e).unwrap();
    let receiver = || Receiver::new(&send_key).unwrap();
    let mut daemon = receiver();
    assert_eq!(daemon.open(&wire(&first)).unwrap().as_slice(), br#"{"t":"hello"}"#);
    assert_eq!(daemon.open(&wire(&first)).err(), Some(ChannelError::Replay));
    assert_eq!(
        daemon.open(&wire(&second)).err(),
        Some(ChannelError::Closed),
        "closed for good"
    );
    assert_eq!(receiver().open(&wire(&second)).err(), Some(ChannelError::Reorder));
    assert_eq!(receiver().open(r#"{"t":"hello"}"#).err(), Some(ChannelError::NotE2e));
    let mut tampered = b64(&first.d);
    tampered[0] ^= 1;
    let tampered = pap_pair::channel::Envelope {
        d: STANDARD.encode(&tampered),
        ..first.clone()
    };
    assert_eq!(receiver().open(&wire(&tampered)).err(), Some(ChannelError::Auth));
    // The counter is bound: the same ciphertext under another n does not verify.
    let renumbered = pap_pair::channel::Envelope { n: 1, ..first.clone() };
    let mut after_first = receiver();
    after_first.open(&wire(&first)).unwrap();
    assert_eq!(after_first.open(&wire(&renumbered)).err(), Some(ChannelError::Auth));
}

#[test]
fn both_framings_carry_the_references_bytes_and_a_reference_framed_hello_pairs() {
    // The client says hello in the reference's frame, byte for byte.
    let client = client();
    assert_eq!(handshake_text(client.hello(), Framing::Frame).unwrap(), HELLO_FRAME);
    assert_eq!(handshake_text(client.hello(), Framing::Bare).unwrap(), HELLO_WIRE);
    // A daemon reads either framing as the same hello and learns which it was.
    let (framed, framing): (Hello, _) = read_handshake(HELLO_FRAME.as_bytes()).unwrap();
    assert_eq!(framing, Framing::Frame);
    let (bare, framing): (Hello, _) = read_handshake(HELLO_WIRE.as_bytes()).unwrap();
    assert_eq!(framing, Framing::Bare);
    assert_eq!(
        serde_json::to_string(&framed).unwrap(),
        serde_json::to_string(&bare).unwrap()
    );
    // The captured reference-framed hello pairs: answered in its framing, the reference's reply.
    let (reply, daemon_session) = respond_with(
        &framed,
        &daemon(),
        |auth| tokens_match(auth, OFFER_AUTH),
        &x_secret(DAEMON_EPH_PRIV),
    )
    .unwrap();
    assert_eq!(handshake_text(&reply, Framing::Frame).unwrap(), REPLY_FRAME);
    let (read, framing): (Reply, _) = read_handshake(REPLY_FRAME.as_bytes()).unwrap();
    assert_eq!(framing, Framing::Frame);
    let session = client.complete(&read).unwrap();
    assert_eq!(hex(session.send_key.as_slice()), CLIENT_SEND_KEY);
    assert_eq!(hex(daemon_session.recv_key.as_slice()), CLIENT_SEND_KEY);
    // The reference's decoder takes `d` without its padding; so do we.
    let unpadded = REPLY_FRAME.replace("==\"}", "\"}");
    assert!(read_handshake::<Reply>(unpadded.as_bytes()).is_some());
}

#[test]
fn a_frame_of_another_type_or_with_no_message_inside_is_no_handshake() {
    for refused in [
        // The reference's own stray-frame test: a ping first.
        r#"{"t":"ping","nonce":"stray"}"#.to_owned(),
        // Its synthetic handshake bytes: base64, but no hello inside.
        r#"{"t":"e2e_handshake","d":"Q0xJRU5ULUhFTExP"}"#.to_owned(),
        // Not base64.
        r#"{"t":"e2e_handshake","d":"{not base64}"}"#.to_owned(),
        r#"{"t":"e2e_handshake"}"#.to_owned(),
        r#"{"t":"e2e","n":0,"d":"AAAA"}"#.to_owned(),
        // The hello inside a frame inside a frame.
        format!(r#"{{"t":"e2e_handshake","d":"{}"}}"#, STANDARD.encode(HELLO_FRAME)),
        "[]".to_owned(),
        "not json".to_owned(),
    ] {
        assert!(read_handshake::<Hello>(refused.as_bytes()).is_none(), "{refused}");
    }
}
