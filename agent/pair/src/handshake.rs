//! AIP-59 §3, `pair/v2`: the client's sealed hello, the daemon's signed reply, the two
//! direction keys, byte for byte as the reference computes them.
//!
//! ```text
//!  client → daemon  {"v":2,"ePub":e_pub,"ct0":Seal(daemon_x25519, {clientPub, clientName, auth})}
//!  daemon → client  {"v":2,"dePub":d_e_pub,"sig":Ed25519(daemon_ed25519, transcript)}
//!  transcript       SHA-256(e_pub ‖ utf8(ct0) ‖ d_e_pub)          (public keys as SPKI DER)
//!  keys             HKDF(ECDH(e, d_e) ‖ ECDH(e, daemon_x25519), salt = transcript,
//!                        info = "agentproto/pair/v2", 64) = k_c2d ‖ k_d2c
//! ```
//!
//! On the socket each message is wrapped as the reference wraps it,
//! `{"t":"e2e_handshake","d":base64(utf8(json))}` ([`Framing::Frame`]), or sent bare
//! ([`Framing::Bare`], the text's literal reading); a daemon reads either and answers in kind.
//!
//! Every failure is one [`PairError`] and leaves nothing half-made: a daemon refuses before it
//! signs anything, a client before it derives anything.

use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use pap_shared::Rng;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::PairError;
use crate::derive::hkdf;
use crate::keys::{DaemonKeys, Ed25519Public, X25519Public, X25519Secret};
use crate::seal::{seal, unseal};

/// How a handshake message travels on the socket. The AIP-59 text names only the objects
/// (`Hello`, `Reply`); the reference (`agentproto/ts`, `packages/acp/src/tunnel/e2e.ts`
/// `clientHandshakeOverSink`/`daemonHandshakeOverSink`, `frames.ts` `E2eHandshakeFrame`) wraps
/// each in a tunnel frame, `{"t":"e2e_handshake","d":"<base64 of the JSON>"}`, and drops a
/// message without a `t`. A client speaks [`Framing::Frame`]; a host answers in the framing it
/// was spoken to, so both the reference and a client of the spec's literal reading pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// The reference's: the JSON's UTF-8 bytes, standard padded base64, in `d` of an
    /// `e2e_handshake` frame.
    Frame,
    /// The spec's literal reading: the JSON object as the whole text message.
    Bare,
}

/// The reference's handshake frame type.
const HANDSHAKE_FRAME: &str = "e2e_handshake";

/// The reference's envelope of one handshake message.
#[derive(Deserialize, Serialize)]
struct HandshakeFrame {
    t: String,
    d: String,
}

/// Standard base64 as the reference writes it (padded), read with or without the padding.
const HANDSHAKE_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// The text of one handshake message (a [`Hello`] or a [`Reply`]) in `framing`.
pub fn handshake_text(value: &impl Serialize, framing: Framing) -> serde_json::Result<String> {
    let json = serde_json::to_string(value)?;
    match framing {
        Framing::Bare => Ok(json),
        Framing::Frame => serde_json::to_string(&HandshakeFrame {
            t: HANDSHAKE_FRAME.to_owned(),
            d: HANDSHAKE_BASE64.encode(json),
        }),
    }
}

/// One handshake message read from `data`, in either framing, and the framing it came in;
/// `None` for anything else (a frame of another type, a `d` that is not base64, an object of
/// the wrong shape, outside or inside).
pub fn read_handshake<T: DeserializeOwned>(data: &[u8]) -> Option<(T, Framing)> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    if value.get("t").is_none() {
        return serde_json::from_value(value)
            .ok()
            .map(|message| (message, Framing::Bare));
    }
    let frame: HandshakeFrame = serde_json::from_value(value).ok()?;
    if frame.t != HANDSHAKE_FRAME {
        return None;
    }
    let json = HANDSHAKE_BASE64.decode(frame.d).ok()?;
    serde_json::from_slice(&json)
        .ok()
        .map(|message| (message, Framing::Frame))
}

/// The handshake's version: the hello's and the reply's `v`.
pub const PAIR_VERSION: u8 = 2;
const KEYS_INFO: &[u8] = b"agentproto/pair/v2";

/// Client → daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`PAIR_VERSION`].
    pub v: u8,
    /// The client's ephemeral X25519 public key, standard base64 of its SPKI DER.
    #[serde(rename = "ePub")]
    pub e_pub: String,
    /// The sealed payload (a seal envelope).
    pub ct0: String,
}

/// Daemon → client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Must be [`PAIR_VERSION`].
    pub v: u8,
    /// The daemon's ephemeral X25519 public key, standard base64 of its SPKI DER.
    #[serde(rename = "dePub")]
    pub de_pub: String,
    /// The Ed25519 signature over the transcript, standard base64.
    pub sig: String,
}

/// What the hello seals.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    #[serde(rename = "clientPub")]
    client_pub: String,
    #[serde(rename = "clientName")]
    client_name: String,
    auth: String,
}

impl Drop for Payload {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.auth);
    }
}

/// A completed handshake, on either side: the keys already per direction for this side.
pub struct Session {
    /// AES-256-GCM key for what this side sends.
    pub send_key: Zeroizing<[u8; 32]>,
    /// AES-256-GCM key for what this side receives.
    pub recv_key: Zeroizing<[u8; 32]>,
    /// The transcript hash both sides bound to.
    pub transcript: [u8; 32],
    /// The name the client gave itself.
    pub client_name: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("client_name", &self.client_name)
            .finish_non_exhaustive()
    }
}

fn transcript(e_pub: &[u8], ct0: &str, de_pub: &[u8]) -> [u8; 32] {
    let joined = [e_pub, ct0.as_bytes(), de_pub].concat();
    let mut out = [0_u8; 32];
    out.copy_from_slice(digest(&SHA256, &joined).as_ref());
    out
}

/// A direction key: AES-256-GCM, wiped when dropped.
type DirectionKey = Zeroizing<[u8; 32]>;

/// `(k_c2d, k_d2c)`.
fn direction_keys(
    ephemeral_shared: &[u8; 32],
    static_shared: &[u8; 32],
    transcript: &[u8; 32],
) -> Result<(DirectionKey, DirectionKey), PairError> {
    let ikm = Zeroizing::new([&ephemeral_shared[..], &static_shared[..]].concat());
    let okm = hkdf(&ikm, transcript, &[KEYS_INFO], 64)?;
    let (mut c2d, mut d2c) = (Zeroizing::new([0_u8; 32]), Zeroizing::new([0_u8; 32]));
    c2d.copy_from_slice(&okm[..32]);
    d2c.copy_from_slice(&okm[32..]);
    Ok((c2d, d2c))
}

fn x25519_b64(text: &str) -> Result<(Vec<u8>, X25519Public), PairError> {
    let der = STANDARD.decode(text).map_err(|_| PairError::InvalidKey)?;
    let key = X25519Public::from_spki(&der)?;
    Ok((der, key))
}

/// Whether two tokens are equal, in time that depends only on their lengths (AIP-59 §2.3).
pub fn tokens_match(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// A client's handshake in progress: send [`Self::hello`], then [`Self::complete`] the reply.
pub struct ClientHandshake {
    ephemeral: X25519Secret,
    e_pub: Vec<u8>,
    daemon_x25519: X25519Public,
    daemon_ed25519: Ed25519Public,
    client_name: String,
    hello: Hello,
}

impl std::fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandshake").finish_non_exhaustive()
    }
}

impl ClientHandshake {
    /// Starts a handshake with the daemon of these pinned keys, proving `auth` (the offer's
    /// auth token on first contact, the epoch's on reconnect).
    pub fn start(
        daemon_x25519: X25519Public,
        daemon_ed25519: Ed25519Public,
        auth: &str,
        client_name: &str,
        rng: &dyn Rng,
    ) -> Result<Self, PairError> {
        let mut iv = [0_u8; 12];
        rng.fill(&mut iv);
        Self::start_with(
            daemon_x25519,
            daemon_ed25519,
            auth,
            client_name,
            [X25519Secret::generate(rng), X25519Secret::generate(rng)],
            iv,
        )
    }

    /// [`Self::start`] with its randomness given: the client's ephemeral key, the seal's
    /// ephemeral key and the seal's IV (for known-answer tests).
    pub fn start_with(
        daemon_x25519: X25519Public,
        daemon_ed25519: Ed25519Public,
        auth: &str,
        client_name: &str,
        [ephemeral, seal_ephemeral]: [X25519Secret; 2],
        iv: [u8; 12],
    ) -> Result<Self, PairError> {
        let e_pub = ephemeral.public()?.to_spki();
        let e_pub_b64 = STANDARD.encode(&e_pub);
        let payload = Payload {
            client_pub: e_pub_b64.clone(),
            client_name: client_name.to_owned(),
            auth: auth.to_owned(),
        };
        let json = Zeroizing::new(serde_json::to_vec(&payload).map_err(|_| PairError::Crypto)?);
        let ct0 = seal(&json, &daemon_x25519, &seal_ephemeral, iv)?;
        Ok(Self {
            ephemeral,
            e_pub,
            daemon_x25519,
            daemon_ed25519,
            client_name: client_name.to_owned(),
            hello: Hello {
                v: PAIR_VERSION,
                e_pub: e_pub_b64,
                ct0,
            },
        })
    }

    /// What to send.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Checks the reply's signature against the pinned Ed25519 key, then derives the session.
    pub fn complete(self, reply: &Reply) -> Result<Session, PairError> {
        if reply.v != PAIR_VERSION {
            return Err(PairError::MalformedReply);
        }
        let (de_pub_der, de_pub) = x25519_b64(&reply.de_pub).map_err(|_| PairError::MalformedReply)?;
        let transcript = transcript(&self.e_pub, &self.hello.ct0, &de_pub_der);
        let sig = STANDARD.decode(&reply.sig).map_err(|_| PairError::MalformedReply)?;
        if !self.daemon_ed25519.verifies(&transcript, &sig) {
            return Err(PairError::BadSignature);
        }
        let ephemeral_shared = self.ephemeral.agree(&de_pub)?;
        let static_shared = self.ephemeral.agree(&self.daemon_x25519)?;
        let (c2d, d2c) = direction_keys(&ephemeral_shared, &static_shared, &transcript)?;
        Ok(Session {
            send_key: c2d,
            recv_key: d2c,
            transcript,
            client_name: self.client_name,
        })
    }
}

/// The daemon's answer to `hello`: opens it, checks that the sealed key is the hello's and that
/// `auth_ok` accepts the sealed auth token (the caller compares with [`tokens_match`]), then signs
/// the transcript with a fresh ephemeral key from `rng`. A `v: 1` hello is
/// [`PairError::Outdated`]; nothing is signed for a hello that fails any check.
pub fn respond(
    hello: &Hello,
    keys: &DaemonKeys,
    auth_ok: impl FnOnce(&str) -> bool,
    rng: &dyn Rng,
) -> Result<(Reply, Session), PairError> {
    respond_with(hello, keys, auth_ok, &X25519Secret::generate(rng))
}

/// [`respond`] with the daemon's ephemeral key given (for known-answer tests).
pub fn respond_with(
    hello: &Hello,
    keys: &DaemonKeys,
    auth_ok: impl FnOnce(&str) -> bool,
    ephemeral: &X25519Secret,
) -> Result<(Reply, Session), PairError> {
    match hello.v {
        PAIR_VERSION => {}
        1 => return Err(PairError::Outdated),
        _ => return Err(PairError::MalformedHello),
    }
    let (e_pub_der, e_pub) = x25519_b64(&hello.e_pub).map_err(|_| PairError::MalformedHello)?;
    let opened = unseal(&hello.ct0, &keys.x25519)?;
    let payload: Payload = serde_json::from_slice(&opened).map_err(|_| PairError::MalformedHello)?;
    let client_name = payload.client_name.clone();
    if payload.client_pub != hello.e_pub {
        return Err(PairError::EphemeralMismatch);
    }
    if !auth_ok(&payload.auth) {
        return Err(PairError::AuthRejected);
    }
    let de_pub_der = ephemeral.public()?.to_spki();
    let transcript = transcript(&e_pub_der, &hello.ct0, &de_pub_der);
    let sig = keys.ed25519.sign(&transcript);
    let ephemeral_shared = ephemeral.agree(&e_pub)?;
    let static_shared = keys.x25519.agree(&e_pub)?;
    let (c2d, d2c) = direction_keys(&ephemeral_shared, &static_shared, &transcript)?;
    let reply = Reply {
        v: PAIR_VERSION,
        de_pub: STANDARD.encode(&de_pub_der),
        sig: STANDARD.encode(sig),
    };
    Ok((
        reply,
        Session {
            send_key: d2c,
            recv_key: c2d,
            transcript,
            client_name,
        },
    ))
}
