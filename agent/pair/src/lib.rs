//! AIP-59 `pair/v2` for the agent's browser host (the *daemon*) and a device's client: the
//! daemon's keys and fingerprint ([`keys`]), the offer ([`offer`]), the route and auth
//! tokens and the pair root ([`derive`](mod@derive)), the seal box ([`seal`]) and the
//! handshake ([`handshake`]), and the `e2e` channel that carries every frame after it
//! ([`channel`]), and the tunnel frames it carries ([`tunnel`]). No I/O, except behind two
//! features: `net`, the sockets of a pairing (`link`: dialing a broker, the handshake's
//! messages, the `e2e` link), and `broker`, a rendezvous broker a person can run for their own
//! pairings (`broker`).
//!
//! Checked byte for byte against the reference implementation's known-answer vectors
//! (`tests/vectors.rs`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "broker")]
pub mod broker;
pub mod channel;
pub mod derive;
pub mod handshake;
pub mod keys;
#[cfg(feature = "net")]
pub mod link;
pub mod offer;
pub mod seal;
pub mod tunnel;

/// Why a pairing step failed. Never carries key material, a token or a secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    /// A key is not a valid key of its kind (or agrees to nothing: a low-order point).
    #[error("a key is not a valid X25519 or Ed25519 key")]
    InvalidKey,
    /// The cryptographic library refused (never expected with valid keys).
    #[error("a cryptographic operation failed")]
    Crypto,
    /// A sealed box could not be opened: malformed, another version, the wrong key, or tampered.
    #[error("the sealed hello could not be opened")]
    Unseal,
    /// The hello is not a `pair/v2` hello.
    #[error("the hello is malformed")]
    MalformedHello,
    /// The reply is not a `pair/v2` reply.
    #[error("the reply is malformed")]
    MalformedReply,
    /// The sealed key is not the hello's: someone swapped the hello's ephemeral key.
    #[error("the sealed key does not match the hello's")]
    EphemeralMismatch,
    /// The sealed auth token was refused (unknown, spent, expired, or wrong).
    #[error("the pairing was refused")]
    AuthRejected,
    /// The reply's signature does not verify against the pinned key.
    #[error("the daemon's signature does not verify against the pinned key")]
    BadSignature,
    /// `pair/v1` (§7): the broker could authenticate as a client; mint a new offer.
    #[error("pairing_protocol_outdated: this offer uses the retired pair/v1 protocol; mint a new offer")]
    Outdated,
    /// The offer breaks a rule of §1.4 (the parameter named).
    #[error("the offer is malformed ({0})")]
    MalformedOffer(&'static str),
    /// The offer's `exp` has passed.
    #[error("the offer has expired")]
    OfferExpired,
}
