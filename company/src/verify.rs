//! PAP §5, the company's checks of a browser assertion, in the order they run.
//!
//! Cheap, local checks come first (shape, `alg`, `typ`, claims, audience, time, `return_to`),
//! so a bad assertion costs neither a network fetch nor a signature verification. Then the
//! Session (a lookup: live, and the same client and user), so only an agent with a live
//! Session of its own can make the company fetch its keys; then the keys and the signature;
//! and last the one-time use of `(client_id, jti)`: an assertion refused for any other reason
//! is not consumed, and one that is consumed has passed every other check. The join's route
//! mints its cookie (carrying the Session's hash tag) and binds it in that same last step
//! ([`Verifier::verify_then_bind`]), so a store that can (Redis, one script) makes the whole
//! join one round trip.

use std::fmt;
use std::sync::Arc;

use pap_shared::{
    Algorithm, BROWSER_ASSERTION_TYP, BrowserAssertionClaims, ClaimsError, ClientId, Clock, CompactJws, CompanyDomain,
    HttpsUrl, JoseError, PairwiseUserId, Rng, SessionId, UnixTime, UnverifiedJws,
};

use crate::client::{ClientKeys, ResolveError};
use crate::join_store::{Committed, Freshness, JoinCommit, JoinStore, SeenSession};
use crate::replay::ReplayKey;
use crate::session::{SessionDirectory, SessionRecord};
use crate::store::StoreError;
use crate::web_cookie::SessionCookie;

/// How far in the future an assertion's `iat` may be, in seconds, to absorb clock drift between
/// the agent and the company. The Python reference allows none; five seconds refuses nothing an
/// honest agent sends and still leaves every assertion at most 65 seconds of validity.
pub const IAT_SKEW_SECONDS: i64 = 5;

/// The verifier of one company's browser-session endpoint.
#[derive(Clone)]
pub struct Verifier {
    parts: Arc<VerifierParts>,
}

/// What a [`Verifier`] is made of.
#[derive(Debug)]
pub struct VerifierParts {
    /// The published `web.browser_session_endpoint`, exactly as in discovery: the only `aud`.
    pub endpoint: HttpsUrl,
    /// The company's `organization.domain`: `return_to` must be on it or a subdomain.
    pub domain: CompanyDomain,
    /// Now.
    pub clock: Arc<dyn Clock>,
    /// The agents' keys.
    pub clients: Arc<dyn ClientKeys>,
    /// The company's Sessions, as the website reads them on every request.
    pub sessions: Arc<dyn SessionDirectory>,
    /// What a join reads and writes: its Session, the one-time use of `(client_id, jti)`, the
    /// cookie's binding ([`crate::stores::SeparateStores`] for stores in this process; a
    /// `RedisStore` is one itself, one round trip per join).
    pub joins: Arc<dyn JoinStore>,
}

impl Verifier {
    /// A verifier from its parts.
    pub fn new(parts: VerifierParts) -> Self {
        Self { parts: Arc::new(parts) }
    }

    /// The endpoint this verifier accepts as `aud`.
    pub fn endpoint(&self) -> &HttpsUrl {
        &self.parts.endpoint
    }

    /// The company's domain.
    pub fn domain(&self) -> &CompanyDomain {
        &self.parts.domain
    }

    /// The clock the verifier reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.parts.clock
    }

    /// The Session directory the verifier consults.
    pub fn sessions(&self) -> &Arc<dyn SessionDirectory> {
        &self.parts.sessions
    }

    /// Runs every check of PAP §5 on `assertion`, marking its `(client_id, jti)` used.
    pub async fn verify(&self, assertion: &CompactJws) -> Result<VerifiedAssertion, VerifyError> {
        Ok(self.run(assertion, None).await?.0)
    }

    /// Runs every check of PAP §5 on `assertion` and, in the same last step as the replay mark,
    /// binds a fresh cookie (drawn from `rng`, carrying its Session's hash tag) to its Session:
    /// the join's route.
    pub async fn verify_then_bind(
        &self,
        assertion: &CompactJws,
        rng: &dyn Rng,
    ) -> Result<(VerifiedAssertion, SessionCookie), VerifyError> {
        match self.run(assertion, Some(rng)).await? {
            (verified, Some(cookie)) => Ok((verified, cookie)),
            // `run` mints a cookie whenever it is given a source of randomness.
            (_, None) => Err(VerifyError::Store(StoreError::Unavailable)),
        }
    }

    /// Every check; with `cookie_rng`, a cookie for the Session is minted and bound in the last
    /// step. Only this function makes a [`VerifiedAssertion`].
    async fn run(
        &self,
        assertion: &CompactJws,
        cookie_rng: Option<&dyn Rng>,
    ) -> Result<(VerifiedAssertion, Option<SessionCookie>), VerifyError> {
        // 1. Shape: three unpadded base64url segments, a JSON header without `crit`.
        let jws = UnverifiedJws::parse(assertion.secret()).map_err(VerifyError::Malformed)?;
        // 2. `alg`: ES256 or RS256 only (never `none`, never HMAC).
        let alg = Algorithm::from_name(&jws.header().alg).ok_or(VerifyError::UnsupportedAlgorithm)?;
        // 3. `typ`: exactly `poppy-browser+jwt`, so a Session assertion (`JWT`) is refused here.
        if jws.header().typ.as_deref() != Some(BROWSER_ASSERTION_TYP) {
            return Err(VerifyError::WrongType);
        }
        // 4. Claims: all present, integer times, formats, `0 < exp - iat <= 60`.
        let claims = BrowserAssertionClaims::from_payload(jws.payload()).map_err(VerifyError::Claims)?;
        // 5. Audience: exactly the published endpoint, character for character.
        if claims.aud() != self.parts.endpoint.as_str() {
            return Err(VerifyError::WrongAudience);
        }
        // 6. Time: `exp` strictly after now; `iat` not later than now + skew.
        let now = self.parts.clock.now();
        if claims.exp() <= now {
            return Err(VerifyError::Expired);
        }
        if claims.iat() > now.plus(IAT_SKEW_SECONDS) {
            return Err(VerifyError::IssuedInFuture);
        }
        // 7. `return_to`: HTTPS on the company's domain or a subdomain.
        if !claims.return_to().is_on(&self.parts.domain) {
            return Err(VerifyError::ForeignReturnTo);
        }
        // 8. The Session: live, and the same client and user. Before any key is fetched: a
        //    stranger without a live Session of its own makes the company fetch nothing. A
        //    local copy may answer yes; only the store itself answers no.
        let joins = &self.parts.joins;
        let read = joins
            .session(claims.session_id(), Freshness::MayBeCopied)
            .await
            .map_err(VerifyError::Store)?
            .ok_or(VerifyError::SessionNotLive)?;
        let mut seen = match session_check(&read.record, &claims, now) {
            Ok(()) => read,
            Err(_) if read.copied => self.session_from_store(&claims, now).await?,
            Err(refused) => return Err(refused),
        };
        // 9. Signature, with a key from the `iss` client's JWKS (the Session's own client).
        let kid = jws.header().kid.as_deref();
        let keys = self
            .parts
            .clients
            .keys(claims.iss(), kid)
            .await
            .map_err(VerifyError::Client)?;
        let mut candidates = keys.candidates(alg, kid).peekable();
        if candidates.peek().is_none() {
            return Err(VerifyError::NoMatchingKey);
        }
        if !candidates.any(|key| jws.verify_with(alg, key)) {
            // The agent may have rotated its key under the same `kid`: one rate-limited refetch.
            let fresh = self
                .parts
                .clients
                .keys_after_failure(claims.iss(), kid)
                .await
                .map_err(VerifyError::Client)?;
            let verified = fresh.is_some_and(|keys| keys.candidates(alg, kid).any(|key| jws.verify_with(alg, key)));
            if !verified {
                return Err(VerifyError::BadSignature);
            }
        }
        // 10. Last: `(client_id, jti)` used once, atomically, until `exp`, with the cookie's
        //     binding, if the Session is still as checked. A mark that cannot be made refuses
        //     the join: never accepted unmarked.
        let replay = ReplayKey::browser_assertion(claims.iss(), claims.jti());
        let cookie = cookie_rng.map(|rng| SessionCookie::generate(rng, claims.session_id()));
        let mut reread = false;
        loop {
            let commit = JoinCommit {
                session: claims.session_id(),
                seen: &seen,
                replay,
                expires_at: claims.exp(),
                cookie: cookie.as_ref().map(SessionCookie::hash),
            };
            match joins.commit(commit).await.map_err(VerifyError::Store)? {
                Committed::Joined => break,
                Committed::Replayed => return Err(VerifyError::Replayed),
                // The copy was out of date: the Session as the store holds it decides, once.
                Committed::SessionMoved if !reread => {
                    reread = true;
                    seen = self.session_from_store(&claims, now).await?;
                }
                // Moved again between a read and the next commit: a Session changing that fast
                // is refused for now, not raced.
                Committed::SessionMoved => return Err(VerifyError::Store(StoreError::Unavailable)),
            }
        }
        let session = seen.record;
        if let Some(account) = &session.account {
            // A person signed this client in here: it is no stranger to the resolver (S3).
            self.parts.clients.vouch(claims.iss(), account);
        }
        let verified = VerifiedAssertion {
            client_id: claims.iss().clone(),
            user: claims.sub().clone(),
            session_id: claims.session_id().clone(),
            return_to: claims.return_to().clone(),
            session_expires_at: session.expires_at,
            session_epoch: session.epoch,
        };
        Ok((verified, cookie))
    }
}

impl Verifier {
    /// Step 8 from the store itself: the Session live, and the assertion's client and user.
    async fn session_from_store(
        &self,
        claims: &BrowserAssertionClaims,
        now: UnixTime,
    ) -> Result<SeenSession, VerifyError> {
        let seen = self
            .parts
            .joins
            .session(claims.session_id(), Freshness::FromStore)
            .await
            .map_err(VerifyError::Store)?
            .ok_or(VerifyError::SessionNotLive)?;
        session_check(&seen.record, claims, now)?;
        Ok(seen)
    }
}

/// PAP-5-08: the Session is live, and the assertion's `iss` and `sub` are its client and user.
fn session_check(session: &SessionRecord, claims: &BrowserAssertionClaims, now: UnixTime) -> Result<(), VerifyError> {
    if !session.is_live(now) {
        return Err(VerifyError::SessionNotLive);
    }
    if &session.client_id != claims.iss() || &session.user != claims.sub() {
        return Err(VerifyError::SessionOwnerMismatch);
    }
    Ok(())
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("endpoint", &self.parts.endpoint)
            .field("domain", &self.parts.domain)
            .finish_non_exhaustive()
    }
}

/// Proof that a browser assertion passed every check of PAP §5, replay included. Its fields are
/// private and only [`Verifier::verify`] builds one.
#[derive(Debug)]
pub struct VerifiedAssertion {
    client_id: ClientId,
    user: PairwiseUserId,
    session_id: SessionId,
    return_to: HttpsUrl,
    session_expires_at: UnixTime,
    session_epoch: u64,
}

impl VerifiedAssertion {
    /// The agent (`iss`).
    pub fn client_id(&self) -> &ClientId {
        &self.client_id
    }
    /// The pairwise User ID (`sub`).
    pub fn user(&self) -> &PairwiseUserId {
        &self.user
    }
    /// The live Session joined.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    /// Where to send the browser: on the company's domain.
    pub fn return_to(&self) -> &HttpsUrl {
        &self.return_to
    }
    /// When the Session expires, as it stood at verification.
    pub fn session_expires_at(&self) -> UnixTime {
        self.session_expires_at
    }
    /// The Session's sign-out epoch at verification: a cookie issued now stands for this epoch.
    pub fn session_epoch(&self) -> u64 {
        self.session_epoch
    }
}

/// Why a browser assertion was refused. Each variant is one check of PAP §5; none carries the
/// assertion or any part of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The signature verifies with none of the candidate keys (PAP-5-05).
    #[error("the signature does not verify")]
    BadSignature,
    /// A claim is missing, mistyped, malformed, or the lifetime is not `1..=60` s (PAP-5-06).
    #[error("the claims are invalid")]
    Claims(#[source] ClaimsError),
    /// The agent's keys could not be resolved (PAP-5-05).
    #[error("the client could not be resolved")]
    Client(#[source] ResolveError),
    /// `exp` is now or past (PAP-5-06).
    #[error("the assertion has expired")]
    Expired,
    /// `return_to` is not on the company's domain or a subdomain (PAP-5-09).
    #[error("return_to is not on the company's domain")]
    ForeignReturnTo,
    /// `iat` is later than now plus [`IAT_SKEW_SECONDS`].
    #[error("the assertion is issued in the future")]
    IssuedInFuture,
    /// Not a compact JWS with a readable header (PAP-5-05).
    #[error("the assertion is malformed")]
    Malformed(#[source] JoseError),
    /// The key set has no key for the header's `alg` and `kid` (PAP-5-05).
    #[error("no key matches the header's alg and kid")]
    NoMatchingKey,
    /// `(client_id, jti)` was accepted before (PAP-5-07).
    #[error("the assertion was already used")]
    Replayed,
    /// The Session belongs to another client or user (PAP-5-08).
    #[error("the Session belongs to another client or user")]
    SessionOwnerMismatch,
    /// The Session is unknown, ended or expired (PAP-5-08).
    #[error("the Session is not live")]
    SessionNotLive,
    /// A store could not answer (full, or unreachable): nothing is accepted without it.
    #[error("a store could not answer")]
    Store(#[source] StoreError),
    /// `alg` is not ES256 or RS256 (PAP-5-05).
    #[error("the algorithm is not ES256 or RS256")]
    UnsupportedAlgorithm,
    /// `aud` is not exactly this endpoint (PAP-5-06).
    #[error("the audience is not this endpoint")]
    WrongAudience,
    /// `typ` is not exactly `poppy-browser+jwt` (PAP-5-05).
    #[error("the type is not poppy-browser+jwt")]
    WrongType,
}

impl VerifyError {
    /// A stable, token-free code for logs and counters.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadSignature => "bad_signature",
            Self::Claims(_) => "invalid_claims",
            Self::Client(_) => "client_unresolved",
            Self::Expired => "expired",
            Self::ForeignReturnTo => "foreign_return_to",
            Self::IssuedInFuture => "issued_in_future",
            Self::Malformed(_) => "malformed",
            Self::NoMatchingKey => "no_matching_key",
            Self::Replayed => "replayed",
            Self::SessionOwnerMismatch => "session_owner_mismatch",
            Self::SessionNotLive => "session_not_live",
            Self::Store(StoreError::Full) => "store_full",
            Self::Store(StoreError::OverShare) => "over_share",
            Self::Store(StoreError::Unavailable) => "store_unavailable",
            Self::UnsupportedAlgorithm => "unsupported_algorithm",
            Self::WrongAudience => "wrong_audience",
            Self::WrongType => "wrong_type",
        }
    }
}
