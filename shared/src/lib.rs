//! Wire types and rules shared by both sides of the PAP browser-session bridge.
//!
//! PAP §5 ("Browser Session") lets a personal agent carry its PAP Session into a company's
//! website: the agent signs a 60-second `poppy-browser+jwt` and its own browser form-POSTs it to
//! the company, which verifies it and sets a cookie bound to the live Session. This crate holds
//! what both sides must agree on, and does no I/O but one ([`fs`]: how either side writes a
//! private file):
//!
//! - the browser-assertion claims ([`BrowserAssertionClaims`]) and their identifiers;
//! - compact JWS parsing, JWK/JWKS import, ES256/RS256 signing and verification ([`UnverifiedJws`],
//!   [`Jwks`], [`SigningKey`]);
//! - [`CompanyDomain`] and [`HttpsUrl`], with the `return_to` rule;
//! - injected [`Clock`] and [`Rng`];
//! - secret types that cannot be printed ([`CompactJws`]).
//!
//! ```
//! use pap_shared::{CompanyDomain, HttpsUrl};
//!
//! let shop = CompanyDomain::try_from("shop.example").unwrap();
//! assert!(HttpsUrl::parse("https://www.shop.example/orders/1").unwrap().is_on(&shop));
//! assert!(!HttpsUrl::parse("https://evilshop.example/").unwrap().is_on(&shop));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod consent;
mod domain;
pub mod fs;
mod jose;
mod secret;
mod time;
mod wire;

// The public interface is:
pub use consent::{GrantDomain, InvalidGrantDomain, registrable_domain};
pub use domain::{CompanyDomain, HttpsUrl, InvalidCompanyDomain, InvalidHttpsUrl, MAX_URL_LEN, is_public_address};
pub use jose::{
    Algorithm, JoseError, JoseHeader, JwkError, Jwks, KeyError, MAX_COMPACT_LEN, MAX_JWKS_KEYS, MIN_RSA_BITS,
    PublicJwk, PublicKey, SigningKey, UnverifiedJws,
};
pub use secret::{CompactJws, SecretToken};
pub use time::{Clock, ManualClock, Rng, SystemClock, SystemRng, UnixTime, rfc3339};
pub use wire::browser_assertion::{
    BROWSER_ASSERTION_TYP, BrowserAssertionClaims, BrowserAssertionRequest, ClaimsError, MAX_BROWSER_ASSERTION_LIFETIME,
};
pub use wire::discovery::{
    Api, AuthorizationServerMetadata, DeviceSignIn, Discovery, DiscoveryAuth, Extensions, OperationsExtension,
    Organization, PROTOCOL_VERSION, Web,
};
pub use wire::dpop::{
    DPOP_IAT_WINDOW, DPOP_TYP, DpopError, DpopRequest, VerifiedDpop, access_token_hash, create_dpop_proof,
    verify_dpop_proof,
};
pub use wire::ids::{ClientId, InvalidId, Jti, PairwiseUserId, SessionId, is_base64url};
pub use wire::jwt_assertion::{JWT_ASSERTION_SKEW, JwtAssertionClaims, JwtAssertionError, MAX_JWT_ASSERTION_LIFETIME};
pub use wire::oauth::{
    CLIENT_ASSERTION_TYPE, DeviceAuthorizationResponse, OAuthErrorBody, OAuthErrorCode, TokenResponse, grant_type,
};
pub use wire::operation::{Confirmation, Operation, OperationResult, OperationState};
