//! The networking both sides of the bridge share, in one place: what faces strangers.
//!
//! A company serves strangers' browsers and fetches strangers' documents (an agent's client
//! metadata and JWKS); an agent serves its documents and its MCP host, and fetches companies'
//! documents. Both need the same four things, and each is written once here:
//!
//! | module | what | why one home |
//! |---|---|---|
//! | [`serve`] | the bounded accept loop: a connection cap, handshake, header, idle and request deadlines; optionally thread per core | a stranger holds a slot only as long as a deadline allows (security review H2) |
//! | [`listener`] | a TLS listener whose handshakes are bounded apart from each other, for `axum::serve` | a connection that never says hello holds up no other (M9) |
//! | [`resolve`] | a DNS resolver that answers only public addresses | no document a stranger names makes us dial loopback or a private network (PAP-3-10) |
//! | [`tls`] | server configurations from PEM, the trust roots and the client configuration | one rustls set-up (aws-lc-rs, safe versions) for every client and server |
//! | [`shares`] | at most so many of something per key (an address, a domain), given back on drop | one stranger holds its share of a pool, not the pool (N1, N15) |
//!
//! `dev_certs` (feature `dev-certs`) writes a throwaway CA and leaf for tests on 127.0.0.1.
//!
//! Rule ids (`H2`, `M9`, `PAP-3-10`) are entries of `conformance/requirements.toml`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "dev-certs")]
pub mod dev_certs;
#[cfg(feature = "server")]
pub mod listener;
pub mod resolve;
#[cfg(feature = "server")]
pub mod serve;
pub mod shares;
pub mod tls;
