//! Client authentication by `private_key_jwt` (PAP §4.1, RFC 7523) and the Session assertion
//! of the jwt-bearer grant (PAP §4.2): both are ES256/RS256 JWTs signed with a key of the
//! agent's JWKS, `typ` absent or `JWT`, `aud` exactly the issuer, used once.

use std::collections::HashMap;

use http::StatusCode;
use pap_shared::{Algorithm, CLIENT_ASSERTION_TYPE, ClientId, JwtAssertionClaims, OAuthErrorCode, UnverifiedJws};

use super::ReferenceCompany;
use super::protocol::ApiError;
use pap_company::resolver::ResolveError;
use pap_company::stores::ReplayKey;

/// Why a JWT assertion failed; the caller maps it to `invalid_client` or `invalid_grant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AssertionFailure {
    Refused(&'static str),
    /// The replay store could not mark the `jti`: nothing is accepted unmarked.
    Store(pap_company::stores::StoreError),
    /// The client's keys could not be fetched now (too many fetches under way): try again.
    Busy,
}

impl ReferenceCompany {
    /// Authenticates the client of a token, device or revocation request; every failure is
    /// 401 `invalid_client`.
    pub(crate) async fn authenticate_client(&self, form: &HashMap<String, String>) -> Result<ClientId, ApiError> {
        let invalid = |why: &'static str| {
            tracing::info!(why, "client authentication failed");
            ApiError::new(StatusCode::UNAUTHORIZED, OAuthErrorCode::InvalidClient)
        };
        if form.get("client_assertion_type").map(String::as_str) != Some(CLIENT_ASSERTION_TYPE) {
            return Err(invalid("client_assertion_type"));
        }
        let client_id = form
            .get("client_id")
            .and_then(|c| ClientId::parse(c).ok())
            .ok_or_else(|| invalid("client_id"))?;
        let assertion = form
            .get("client_assertion")
            .ok_or_else(|| invalid("client_assertion"))?;
        let claims = self
            .check_jwt_assertion(&client_id, assertion)
            .await
            .map_err(|failure| match failure {
                AssertionFailure::Refused(why) => invalid(why),
                AssertionFailure::Store(error) => ApiError::store(error),
                AssertionFailure::Busy => ApiError::busy(),
            })?;
        if claims.sub != client_id.as_str() {
            return Err(invalid("sub"));
        }
        Ok(client_id)
    }

    /// Checks a client or Session assertion from `client_id`, in order: shape, `alg`, `typ`
    /// (absent or `JWT`: a `poppy-browser+jwt` is refused here, PAP-5-05), claims, `iss`,
    /// `aud`, time, signature, one-time `jti`.
    pub(crate) async fn check_jwt_assertion(
        &self,
        client_id: &ClientId,
        compact: &str,
    ) -> Result<JwtAssertionClaims, AssertionFailure> {
        let refuse = AssertionFailure::Refused;
        let jws = UnverifiedJws::parse(compact).map_err(|_| refuse("malformed"))?;
        let alg = Algorithm::from_name(&jws.header().alg).ok_or(refuse("alg"))?;
        if jws.header().typ.as_deref().is_some_and(|t| t != "JWT") {
            return Err(refuse("typ"));
        }
        let claims = JwtAssertionClaims::from_payload(jws.payload()).map_err(|_| refuse("claims"))?;
        if claims.iss != client_id.as_str() {
            return Err(refuse("iss"));
        }
        if claims.aud != self.inner.base {
            return Err(refuse("aud"));
        }
        let now = self.inner.clock.now();
        claims.check_time(now).map_err(|_| refuse("time"))?;
        let kid = jws.header().kid.as_deref();
        let keys = self
            .inner
            .clients
            .keys(client_id, kid)
            .await
            .map_err(|error| match error {
                ResolveError::Busy => AssertionFailure::Busy,
                _ => refuse("client unresolved"),
            })?;
        // As the reference's token endpoint: a key without a kid may verify a header with one.
        let verified = keys
            .keys()
            .iter()
            .filter(|k| kid.is_none() || k.kid().is_none() || k.kid() == kid)
            .any(|k| jws.verify_with(alg, k));
        if !verified {
            return Err(refuse("signature"));
        }
        let key = ReplayKey::of("jwt-assertion", client_id.as_str(), &claims.jti, client_id);
        let first = self
            .inner
            .stores
            .replay
            .mark_once(key, claims.exp.plus(pap_shared::JWT_ASSERTION_SKEW))
            .await
            .map_err(AssertionFailure::Store)?;
        if !first {
            pap_company::metrics::replay_hit();
            return Err(refuse("replayed jti"));
        }
        Ok(claims)
    }
}
