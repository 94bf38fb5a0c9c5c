use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

use super::*;
use crate::time::SystemRng;

fn es256() -> SigningKey {
    SigningKey::generate_es256(&SystemRng, "key-1").unwrap()
}

fn set_of(key: &SigningKey) -> Jwks {
    Jwks::parse(
        serde_json::to_vec(&json!({"keys": [key.public_key().jwk()]}))
            .unwrap()
            .as_slice(),
    )
    .unwrap()
}

#[test]
fn es256_round_trip_with_raw_signature() {
    let key = es256();
    let jws = key.sign("poppy-browser+jwt", &json!({"a": 1})).unwrap();
    let parsed = UnverifiedJws::parse(jws.secret()).unwrap();
    assert_eq!(parsed.header().alg, "ES256");
    assert_eq!(parsed.header().typ.as_deref(), Some("poppy-browser+jwt"));
    assert_eq!(parsed.header().kid.as_deref(), Some("key-1"));
    // JOSE ECDSA signatures are the fixed 64-byte r || s, not DER.
    let sig = jws.secret().rsplit('.').next().unwrap();
    assert_eq!(URL_SAFE_NO_PAD.decode(sig).unwrap().len(), 64);
    let set = set_of(&key);
    let candidate = set.candidates(Algorithm::Es256, Some("key-1")).next().unwrap();
    assert!(parsed.verify_with(Algorithm::Es256, candidate));

    // What the key parsed once refuses: another signing input, a signature changed in one
    // byte, a byte short or long, or longer than any key here makes.
    let (input, _) = jws.secret().rsplit_once('.').unwrap();
    let mut raw = URL_SAFE_NO_PAD.decode(sig).unwrap();
    let other = key.sign("poppy-browser+jwt", &json!({"a": 2})).unwrap();
    let (other_input, _) = other.secret().rsplit_once('.').unwrap();
    let refused = |input: &str, signature: &[u8]| {
        let compact = format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature));
        !UnverifiedJws::parse(&compact)
            .unwrap()
            .verify_with(Algorithm::Es256, candidate)
    };
    assert!(refused(other_input, &raw));
    assert!(!refused(input, &raw));
    raw[10] ^= 1;
    assert!(refused(input, &raw));
    raw[10] ^= 1;
    assert!(refused(input, &raw[..63]));
    assert!(refused(input, &[raw.as_slice(), &[0]].concat()));
    assert!(refused(input, &[0u8; 513]));
}

#[test]
fn rs256_with_the_longest_key_imported_verifies() {
    // RSA-4096: its 512-byte signature exactly fills the buffer `verify_with` decodes into.
    let key = SigningKey::generate_rs256(&SystemRng, 4096, "rsa-4096").unwrap();
    let jws = key.sign("JWT", &json!({"a": 1})).unwrap();
    let sig = jws.secret().rsplit('.').next().unwrap();
    assert_eq!(URL_SAFE_NO_PAD.decode(sig).unwrap().len(), 512);
    let parsed = UnverifiedJws::parse(jws.secret()).unwrap();
    let set = set_of(&key);
    let candidate = set.candidates(Algorithm::Rs256, Some("rsa-4096")).next().unwrap();
    assert!(parsed.verify_with(Algorithm::Rs256, candidate));
}

#[test]
fn rs256_round_trip() {
    let key = SigningKey::generate_rs256(&SystemRng, 2048, "rsa-1").unwrap();
    let jws = key.sign("JWT", &json!({"a": 1})).unwrap();
    let parsed = UnverifiedJws::parse(jws.secret()).unwrap();
    let set = set_of(&key);
    let candidate = set.candidates(Algorithm::Rs256, Some("rsa-1")).next().unwrap();
    assert!(parsed.verify_with(Algorithm::Rs256, candidate));
    // The same key cannot be asked to verify as ES256: no algorithm confusion.
    assert!(!parsed.verify_with(Algorithm::Es256, candidate));
    assert_eq!(set.candidates(Algorithm::Es256, None).count(), 0);
}

#[test]
fn pkcs8_pem_round_trip_keeps_the_public_key() {
    let key = es256();
    let again = SigningKey::from_pkcs8_pem(&key.to_pkcs8_pem(), "key-1").unwrap();
    assert_eq!(again.public_key().jwk(), key.public_key().jwk());
    assert_eq!(
        SigningKey::from_pkcs8_pem("not a key", "k").unwrap_err(),
        KeyError::Unsupported
    );
}

#[test]
fn debug_of_a_signing_key_shows_no_key_material() {
    let key = es256();
    let printed = format!("{key:?}");
    let pem = key.to_pkcs8_pem();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!printed.contains(&body[..20]), "{printed}");
    assert!(printed.contains("key-1"));
}

#[test]
fn tampered_payload_fails_verification() {
    let key = es256();
    let jws = key.sign("JWT", &json!({"a": 1})).unwrap();
    let mut parts: Vec<String> = jws.secret().split('.').map(str::to_owned).collect();
    parts[1] = URL_SAFE_NO_PAD.encode(br#"{"a":2}"#);
    let tampered = parts.join(".");
    let parsed = UnverifiedJws::parse(&tampered).unwrap();
    let set = set_of(&key);
    assert!(!parsed.verify_with(Algorithm::Es256, &set.keys()[0]));
}

#[test]
fn a_der_signature_is_refused() {
    use p256::ecdsa::signature::Signer as _;
    let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
    let pem = secret.to_pkcs8_pem(LineEnding::LF).unwrap();
    let key = SigningKey::from_pkcs8_pem(&pem, "k").unwrap();
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256"}"#),
        URL_SAFE_NO_PAD.encode(b"{}")
    );
    let signer = p256::ecdsa::SigningKey::from(&secret);
    let der: p256::ecdsa::DerSignature = signer.sign(input.as_bytes());
    let jws = format!("{input}.{}", URL_SAFE_NO_PAD.encode(der.as_bytes()));
    let parsed = UnverifiedJws::parse(&jws).unwrap();
    assert!(!parsed.verify_with(Algorithm::Es256, key.public_key()));
    // The same signature in JOSE form verifies, so the refusal is about the encoding.
    let raw: p256::ecdsa::Signature = signer.sign(input.as_bytes());
    let jws = format!("{input}.{}", URL_SAFE_NO_PAD.encode(raw.to_bytes()));
    assert!(
        UnverifiedJws::parse(&jws)
            .unwrap()
            .verify_with(Algorithm::Es256, key.public_key())
    );
}

#[test]
fn compact_parse_refuses_malformed_input() {
    let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256"}"#);
    for bad in [
        String::new(),
        "a.b".to_owned(),
        "a.b.c.d".to_owned(),
        format!("{h}..sig"),
        format!("{h}.e30.sig="),
        format!("{h}=.e30.sig"),
        format!("{}.e30.sig", URL_SAFE_NO_PAD.encode(b"[]")),
        format!("{}.e30.sig", URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT"}"#)),
        format!("{h}.e30.{}", "A".repeat(MAX_COMPACT_LEN)),
    ] {
        assert_eq!(UnverifiedJws::parse(&bad).unwrap_err(), JoseError::Malformed, "{bad:?}");
    }
    let crit = format!(
        "{}.e30.sig",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","crit":["b64"]}"#)
    );
    assert_eq!(UnverifiedJws::parse(&crit).unwrap_err(), JoseError::CriticalHeader);
}

fn ec_jwk() -> serde_json::Value {
    serde_json::to_value(es256().public_key().jwk()).unwrap()
}

#[test]
fn jwk_rules() {
    let good = ec_jwk();
    assert!(PublicKey::from_jwk(&good).unwrap().is_some());

    let with = |member: &str, value: serde_json::Value| {
        let mut v = good.clone();
        v[member] = value;
        PublicKey::from_jwk(&v).map(|k| k.is_some())
    };
    assert_eq!(with("d", json!("AAAA")), Err(JwkError::PrivateMember));
    assert_eq!(with("crv", json!("P-384")), Err(JwkError::UnsupportedCurve));
    assert_eq!(with("crv", json!("secp256k1")), Err(JwkError::UnsupportedCurve));
    assert_eq!(with("alg", json!("RS256")), Err(JwkError::AlgorithmMismatch));
    assert_eq!(with("alg", json!("ES384")), Err(JwkError::AlgorithmMismatch));
    assert_eq!(with("use", json!("enc")), Err(JwkError::NotForSigning));
    assert_eq!(with("x", json!("AAAA")), Err(JwkError::BadKeyMaterial));
    assert_eq!(
        with("x", json!(URL_SAFE_NO_PAD.encode([7u8; 32]))),
        Err(JwkError::BadKeyMaterial)
    );
    assert_eq!(with("kty", json!("OKP")), Ok(false));
    let mut no_y = good.clone();
    no_y.as_object_mut().unwrap().remove("y");
    assert_eq!(
        PublicKey::from_jwk(&no_y).map(|k| k.is_some()),
        Err(JwkError::MissingMember)
    );
    let mut bare = good.clone();
    for m in ["alg", "use", "kid"] {
        bare.as_object_mut().unwrap().remove(m);
    }
    assert!(PublicKey::from_jwk(&bare).unwrap().is_some());
}

#[test]
fn rsa_jwk_rules() {
    let key = SigningKey::generate_rs256(&SystemRng, 2048, "r").unwrap();
    let good = serde_json::to_value(key.public_key().jwk()).unwrap();
    assert!(PublicKey::from_jwk(&good).unwrap().is_some());
    let mut short = good.clone();
    short["n"] = json!(URL_SAFE_NO_PAD.encode([0xffu8; 128]));
    assert_eq!(
        PublicKey::from_jwk(&short).map(|k| k.is_some()),
        Err(JwkError::WeakRsaKey)
    );
    let mut private = good.clone();
    private["p"] = json!("AQAB");
    assert_eq!(
        PublicKey::from_jwk(&private).map(|k| k.is_some()),
        Err(JwkError::PrivateMember)
    );
}

#[test]
fn jwks_rules() {
    let good = ec_jwk();
    let parse = |v: serde_json::Value| Jwks::parse(&serde_json::to_vec(&v).unwrap()).map(|s| s.keys().len());
    assert_eq!(parse(json!({"keys": [good]})), Ok(1));
    assert_eq!(parse(json!({"keys": []})), Err(JwkError::NoUsableKey));
    assert_eq!(
        parse(json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AA"}]})),
        Err(JwkError::NoUsableKey)
    );
    assert_eq!(parse(json!({"keys": [{"kty": "OKP"}, good]})), Ok(1));
    let mut private = good.clone();
    private["d"] = json!("AAAA");
    assert_eq!(parse(json!({"keys": [good, private]})), Err(JwkError::PrivateMember));
    assert_eq!(parse(json!([good])), Err(JwkError::NotAnObject));
    assert_eq!(Jwks::parse(b"{").map(|s| s.keys().len()), Err(JwkError::NotAnObject));
}

#[test]
fn a_jwks_past_the_cap_or_with_a_repeated_kid_is_refused_whole() {
    let parse = |v: serde_json::Value| Jwks::parse(&serde_json::to_vec(&v).unwrap()).map(|s| s.keys().len());
    let keyed = |n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| {
                serde_json::to_value(
                    SigningKey::generate_es256(&SystemRng, &format!("k{i}"))
                        .unwrap()
                        .public_key()
                        .jwk(),
                )
                .unwrap()
            })
            .collect()
    };
    assert_eq!(parse(json!({"keys": keyed(MAX_JWKS_KEYS)})), Ok(MAX_JWKS_KEYS));
    assert_eq!(
        parse(json!({"keys": keyed(MAX_JWKS_KEYS + 1)})),
        Err(JwkError::TooManyKeys)
    );
    // 1,000 entries are refused before any is parsed, even ones no parser would take.
    let junk = vec![json!({"kty": "OKP"}); 1_000];
    assert_eq!(parse(json!({ "keys": junk })), Err(JwkError::TooManyKeys));
    let good = ec_jwk();
    assert_eq!(
        parse(json!({"keys": [good.clone(), good]})),
        Err(JwkError::DuplicateKid)
    );
}

#[test]
fn candidates_follow_the_kid_rules() {
    let a = es256();
    let mut no_kid = serde_json::to_value(es256().public_key().jwk()).unwrap();
    no_kid.as_object_mut().unwrap().remove("kid");
    let set = Jwks::parse(&serde_json::to_vec(&json!({"keys": [a.public_key().jwk(), no_kid]})).unwrap()).unwrap();
    // A header kid selects only keys with that kid; a key without a kid is skipped.
    assert_eq!(set.candidates(Algorithm::Es256, Some("key-1")).count(), 1);
    assert_eq!(set.candidates(Algorithm::Es256, Some("other")).count(), 0);
    // No header kid: every key of the algorithm.
    assert_eq!(set.candidates(Algorithm::Es256, None).count(), 2);
    assert!(set.has_kid("key-1"));
    assert!(!set.has_kid("other"));
}

#[test]
fn thumbprint_matches_rfc_7638_appendix_a_shape() {
    // RFC 7638 §3.1's example RSA key and its published thumbprint.
    let jwk = json!({
        "kty": "RSA",
        "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
        "e": "AQAB",
        "alg": "RS256",
        "kid": "2011-04-29"
    });
    let key = PublicKey::from_jwk(&jwk).unwrap().unwrap();
    assert_eq!(key.thumbprint(), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
}

#[test]
fn thumbprint_ignores_optional_members() {
    let key = es256();
    let mut bare = serde_json::to_value(key.public_key().jwk()).unwrap();
    for m in ["alg", "use", "kid"] {
        bare.as_object_mut().unwrap().remove(m);
    }
    let again = PublicKey::from_jwk(&bare).unwrap().unwrap();
    assert_eq!(again.thumbprint(), key.public_key().thumbprint());
    assert_eq!(again.thumbprint().len(), 43);
}
