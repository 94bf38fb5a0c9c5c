//! The token endpoint (PAP §4.2, §4.4, §4.8) and Account Token revocation (RFC 7009).
//!
//! Session Tokens (`sat_…`) are DPoP-bound to the key of the proof that got them and last as
//! long as the Session; Account Tokens (`acct_…`) stand for a sign-in and, when revoked, sign
//! every Session signed in with them out, which the website shows on its next request.

use std::collections::{HashMap, VecDeque};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use http::{HeaderMap, StatusCode};
use pap_shared::{
    ClientId, OAuthErrorCode, PairwiseUserId, SecretToken, SessionId, TokenResponse, UnixTime, grant_type,
};
use serde_json::json;

use super::protocol::{ApiError, json_response, read_form};
use super::{ReferenceCompany, lock, token_hash};
use crate::store::StoreError;

/// Account Tokens live 90 days.
const ACCOUNT_TOKEN_LIFETIME: i64 = 90 * 86_400;

/// A Session Token's record.
#[derive(Clone, Debug)]
pub(crate) struct AccessToken {
    pub(crate) session: SessionId,
    pub(crate) client_id: ClientId,
    pub(crate) thumbprint: String,
    pub(crate) expires_at: UnixTime,
}

/// An Account Token's record. Tokens rotate: each refresh claims the presented token and mints
/// the next one of the same sign-in ("family").
#[derive(Clone, Debug)]
struct AccountToken {
    client_id: ClientId,
    user: PairwiseUserId,
    account: String,
    scopes: Vec<String>,
    family: u64,
    claimed: bool,
    expires_at: UnixTime,
}

/// One sign-in: every Session signed in with any of its tokens, whether it was revoked, and
/// until when one of its tokens may still be presented.
#[derive(Clone, Debug)]
struct Family {
    sessions: Vec<SessionId>,
    revoked: bool,
    kept_until: UnixTime,
}

/// Most token records (Session and Account Tokens together) held at once; past it, the token
/// endpoint answers 429 until expired ones are swept.
pub const TOKEN_CAPACITY: usize = 1_000_000;

/// Most live Session Tokens one Session holds: a newer one ends the oldest (its agent asks
/// again), so renewing in a loop holds no more.
pub const SESSION_TOKENS_PER_SESSION: usize = 8;

/// Token records, by SHA-256 of the token. One lock: a refresh and a revoke of the same
/// sign-in are ordered by it, wholly (review L2).
#[derive(Default)]
pub(crate) struct Tokens {
    access: HashMap<[u8; 32], AccessToken>,
    /// Each Session's live Session Tokens, oldest first.
    access_by_session: HashMap<SessionId, VecDeque<[u8; 32]>>,
    account: HashMap<[u8; 32], AccountToken>,
    families: HashMap<u64, Family>,
    next_family: u64,
    /// The account each Session was ever signed in to, until the Session expires: it may not
    /// sign in to another one, even after signing out (PAP-4.8-03, PAP-4.8-04).
    session_accounts: HashMap<SessionId, (String, UnixTime)>,
}

impl Tokens {
    fn full(&self) -> bool {
        self.access.len() + self.account.len() >= TOKEN_CAPACITY
    }

    fn add_access(&mut self, hash: [u8; 32], token: AccessToken) {
        let held = self.access_by_session.entry(token.session.clone()).or_default();
        while held.len() >= SESSION_TOKENS_PER_SESSION {
            if let Some(oldest) = held.pop_front() {
                self.access.remove(&oldest);
            }
        }
        held.push_back(hash);
        self.access.insert(hash, token);
    }

    /// Drops every expired record.
    pub(crate) fn sweep(&mut self, now: UnixTime) {
        let Self {
            access,
            access_by_session,
            account,
            families,
            session_accounts,
            ..
        } = self;
        access.retain(|_, t| now < t.expires_at);
        access_by_session.retain(|_, held| {
            held.retain(|hash| access.contains_key(hash));
            !held.is_empty()
        });
        account.retain(|_, t| now < t.expires_at);
        families.retain(|_, f| now < f.kept_until);
        session_accounts.retain(|_, (_, until)| now < *until);
    }

    /// How many records it holds.
    pub(crate) fn sizes(&self) -> [(&'static str, u64); 4] {
        let n = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        [
            ("session_tokens", n(self.access.len())),
            ("account_tokens", n(self.account.len())),
            ("sign_in_families", n(self.families.len())),
            ("session_accounts", n(self.session_accounts.len())),
        ]
    }
}

pub(super) fn routes() -> Router<ReferenceCompany> {
    Router::new()
        .route("/oauth/token", post(token))
        .route("/oauth/revoke", post(revoke))
}

async fn token(State(company): State<ReferenceCompany>, headers: HeaderMap, body: Body) -> Response {
    company
        .token(&headers, body)
        .await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

async fn revoke(State(company): State<ReferenceCompany>, headers: HeaderMap, body: Body) -> Response {
    company
        .revoke(&headers, body)
        .await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

impl ReferenceCompany {
    async fn token(&self, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
        let form = read_form(headers, body).await?;
        let client_id = self.authenticate_client(&form).await?;
        let thumbprint = self.check_dpop(headers, "POST", "/oauth/token", None).await?;
        match form.get("grant_type").map(String::as_str) {
            Some(grant_type::JWT_BEARER) => self.session_grant(&client_id, &form, &thumbprint).await,
            Some(grant_type::DEVICE_CODE) => self.device_grant(&client_id, &form, &thumbprint).await,
            Some(grant_type::REFRESH_TOKEN) => self.refresh_grant(&client_id, &form, &thumbprint).await,
            Some(_) => Err(ApiError::bad_request(OAuthErrorCode::UnsupportedGrantType)),
            None => Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest)),
        }
    }

    /// The jwt-bearer grant: a Session assertion starts a signed-out Session (or renews one of
    /// the same client and user). A `poppy-browser+jwt` here is `invalid_grant` (PAP-5-05).
    async fn session_grant(
        &self,
        client_id: &ClientId,
        form: &HashMap<String, String>,
        thumbprint: &str,
    ) -> Result<Response, ApiError> {
        let invalid_grant = || ApiError::bad_request(OAuthErrorCode::InvalidGrant);
        let assertion = form.get("assertion").ok_or_else(invalid_grant)?;
        let claims = self
            .check_jwt_assertion(client_id, assertion)
            .await
            .map_err(|failure| match failure {
                super::client_auth::AssertionFailure::Refused(_) => invalid_grant(),
                super::client_auth::AssertionFailure::Store(error) => ApiError::store(error),
                super::client_auth::AssertionFailure::Busy => ApiError::busy(),
            })?;
        let user = PairwiseUserId::parse(&claims.sub).map_err(|_| invalid_grant())?;
        let session = match form.get("session_id") {
            None => self
                .inner
                .sessions
                .start(client_id.clone(), user, self.inner.config.session_lifetime)
                .map_err(ApiError::store)?,
            Some(id) => {
                let id = SessionId::parse(id).map_err(|_| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
                let record = self
                    .session_record(&id)
                    .await?
                    .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
                if &record.client_id != client_id || record.user != user {
                    return Err(ApiError::bad_request(OAuthErrorCode::InvalidSession));
                }
                // A renewal continues signed out.
                self.inner.sessions.sign_out(&id);
                id
            }
        };
        self.issue(client_id, &session, thumbprint, None).await
    }

    /// The live record of Session `id` (`None`: unknown, ended or expired); a store that cannot
    /// answer is the caller's 503.
    pub(crate) async fn session_record(
        &self,
        id: &SessionId,
    ) -> Result<Option<crate::session::SessionRecord>, ApiError> {
        let record = crate::session::SessionDirectory::session(&self.inner.sessions, id)
            .await
            .map_err(ApiError::store)?;
        Ok(record.filter(|r| r.is_live(self.now())))
    }

    /// A token response for `session`, with a new Session Token bound to `thumbprint`, and the
    /// Account Token when the Session was just signed in.
    pub(crate) async fn issue(
        &self,
        client_id: &ClientId,
        session: &SessionId,
        thumbprint: &str,
        account_token: Option<String>,
    ) -> Result<Response, ApiError> {
        let record = self
            .session_record(session)
            .await?
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
        let access_token = self.random_token("sat");
        let expires_in = record.expires_at.since(self.now()).max(1);
        {
            let mut tokens = lock(&self.inner.tokens);
            if tokens.full() {
                return Err(ApiError::store(StoreError::Full));
            }
            tokens.add_access(
                token_hash(&access_token),
                AccessToken {
                    session: session.clone(),
                    client_id: client_id.clone(),
                    thumbprint: thumbprint.to_owned(),
                    expires_at: record.expires_at,
                },
            );
        }
        let body = TokenResponse {
            access_token: SecretToken::new(access_token),
            token_type: "DPoP".to_owned(),
            expires_in,
            scope: Some(record.scopes.join(" ")),
            session_id: session.as_str().to_owned(),
            signed_in: record.is_signed_in(),
            refresh_token: account_token.map(SecretToken::new),
        };
        Ok(json_response(StatusCode::OK, &body))
    }

    /// Whether `session` may sign in to `account`: never to another account than the one it
    /// was ever signed in to.
    pub(crate) fn account_fits(&self, session: &SessionId, account: &str) -> bool {
        lock(&self.inner.tokens)
            .session_accounts
            .get(session)
            .is_none_or(|(a, _)| a == account)
    }

    /// Signs `session` (of `user`) in to `account` with `scopes` in a new sign-in family and
    /// mints its first Account Token.
    pub(crate) fn sign_in(
        &self,
        client_id: &ClientId,
        user: &PairwiseUserId,
        session: &SessionId,
        account: &str,
        scopes: Vec<String>,
    ) -> Result<String, ApiError> {
        let now = self.now();
        let session_until = self.inner.sessions.get(session).map_or(now, |r| r.expires_at);
        let token = self.random_token("acct");
        let expires_at = now.plus(ACCOUNT_TOKEN_LIFETIME);
        let mut tokens = lock(&self.inner.tokens);
        if tokens.full() {
            return Err(ApiError::store(StoreError::Full));
        }
        let family = tokens.next_family;
        tokens.next_family += 1;
        tokens.families.insert(
            family,
            Family {
                sessions: vec![session.clone()],
                revoked: false,
                kept_until: expires_at,
            },
        );
        tokens
            .session_accounts
            .insert(session.clone(), (account.to_owned(), session_until));
        tokens.account.insert(
            token_hash(&token),
            AccountToken {
                client_id: client_id.clone(),
                user: user.clone(),
                account: account.to_owned(),
                scopes: scopes.clone(),
                family,
                claimed: false,
                expires_at,
            },
        );
        self.inner.sessions.sign_in(session, account, scopes);
        Ok(token)
    }

    /// The refresh grant (PAP §4.8): an Account Token of this client signs a Session of the
    /// same client and user in again, within the token's scopes; the token rotates, and a
    /// claimed, revoked or expired token is `invalid_grant`.
    async fn refresh_grant(
        &self,
        client_id: &ClientId,
        form: &HashMap<String, String>,
        thumbprint: &str,
    ) -> Result<Response, ApiError> {
        let invalid_grant = || ApiError::bad_request(OAuthErrorCode::InvalidGrant);
        let presented = token_hash(form.get("refresh_token").ok_or_else(invalid_grant)?);
        let grant = {
            let tokens = lock(&self.inner.tokens);
            let grant = tokens.account.get(&presented).cloned().ok_or_else(invalid_grant)?;
            let family_revoked = tokens.families.get(&grant.family).is_none_or(|f| f.revoked);
            if grant.claimed || family_revoked || self.now() >= grant.expires_at || &grant.client_id != client_id {
                return Err(invalid_grant());
            }
            grant
        };
        let session = form
            .get("session_id")
            .and_then(|s| SessionId::parse(s).ok())
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
        let record = self
            .session_record(&session)
            .await?
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidSession))?;
        if &record.client_id != client_id || record.user != grant.user {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidSession));
        }
        if !self.account_fits(&session, &grant.account) {
            return Err(ApiError::bad_request(OAuthErrorCode::AccountMismatch));
        }
        let requested = super::scopes(form.get("scope").map(String::as_str).unwrap_or_default());
        if requested.iter().any(|s| !grant.scopes.contains(s)) {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidScope));
        }
        let scopes = if requested.is_empty() {
            grant.scopes.clone()
        } else {
            requested
        };
        let rotated = self.random_token("acct");
        self.claim_and_sign_in(&presented, &grant, &session, record.expires_at, &rotated, scopes)?;
        self.issue(client_id, &session, thumbprint, Some(rotated)).await
    }

    /// The claim of a refresh, in one critical section with the sign-in it makes: exactly one
    /// refresh wins the presented token, and only while its sign-in is neither revoked nor
    /// expired, so a revoke that lands first leaves the Session signed out (review L2).
    fn claim_and_sign_in(
        &self,
        presented: &[u8; 32],
        grant: &AccountToken,
        session: &SessionId,
        session_until: UnixTime,
        rotated: &str,
        scopes: Vec<String>,
    ) -> Result<(), ApiError> {
        let invalid_grant = || ApiError::bad_request(OAuthErrorCode::InvalidGrant);
        let now = self.now();
        let mut tokens = lock(&self.inner.tokens);
        if tokens.full() {
            return Err(ApiError::store(StoreError::Full));
        }
        let family_live = tokens.families.get(&grant.family).is_some_and(|f| !f.revoked);
        let Some(old) = tokens
            .account
            .get_mut(presented)
            .filter(|t| !t.claimed && now < t.expires_at && family_live)
        else {
            return Err(invalid_grant());
        };
        old.claimed = true;
        let next = AccountToken {
            scopes: scopes.clone(),
            claimed: false,
            expires_at: now.plus(ACCOUNT_TOKEN_LIFETIME),
            ..grant.clone()
        };
        let next_until = next.expires_at;
        tokens.account.insert(token_hash(rotated), next);
        if let Some(family) = tokens.families.get_mut(&grant.family) {
            family.kept_until = family.kept_until.max(next_until);
            if !family.sessions.contains(session) {
                family.sessions.push(session.clone());
            }
        }
        tokens
            .session_accounts
            .insert(session.clone(), (grant.account.clone(), session_until));
        self.inner.sessions.sign_in(session, &grant.account, scopes);
        Ok(())
    }

    /// Revokes the sign-in of Account Token `token` (of `client_id`): every token of its family
    /// and every Session it signed in, signed out now. The Sessions it signed out.
    fn end_sign_in(&self, token: &str, client_id: &ClientId) -> Vec<SessionId> {
        let sessions = {
            let mut tokens = lock(&self.inner.tokens);
            let family = tokens
                .account
                .get(&token_hash(token))
                .filter(|t| &t.client_id == client_id)
                .map(|t| t.family);
            match family.and_then(|f| tokens.families.get_mut(&f)) {
                // The whole sign-in ends: every token of the family, every Session it signed in.
                Some(family) if !family.revoked => {
                    family.revoked = true;
                    std::mem::take(&mut family.sessions)
                }
                _ => Vec::new(),
            }
        };
        for session in &sessions {
            self.inner.sessions.sign_out(session);
        }
        sessions
    }

    /// The live Session Token `token`, if any.
    pub(crate) fn access_token(&self, token: &str) -> Option<AccessToken> {
        let record = lock(&self.inner.tokens).access.get(&token_hash(token)).cloned()?;
        (self.now() < record.expires_at).then_some(record)
    }

    /// RFC 7009 revocation of an Account Token: every Session signed in with it is signed out
    /// now (PAP §4.8). Always 200 `{}` for an authenticated client, known token or not.
    async fn revoke(&self, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
        let form = read_form(headers, body).await?;
        let client_id = self.authenticate_client(&form).await?;
        let token = form
            .get("token")
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidRequest))?;
        let sessions = self.end_sign_in(token, &client_id);
        tracing::info!(sessions = sessions.len(), "Account Token revoked");
        Ok(json_response(StatusCode::OK, &json!({})))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pap_shared::{PairwiseUserId, SystemClock, SystemRng};

    use super::*;
    use crate::client::StaticClientKeys;
    use crate::reference::CompanyConfig;

    #[allow(clippy::unwrap_used, reason = "tests fail loudly")]
    #[test]
    fn a_revoke_landing_between_a_refreshs_checks_and_its_claim_wins() {
        let config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
        let company = ReferenceCompany::new(
            config,
            Arc::new(SystemClock),
            Arc::new(SystemRng),
            Arc::new(StaticClientKeys::new()),
        );
        let client = ClientId::parse("https://atlas.example/agent.json").unwrap();
        let user = PairwiseUserId::parse("usr_race_AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let session = company.inner.sessions.start(client.clone(), user, 3_600).unwrap();
        let record = company.inner.sessions.get(&session).unwrap();
        let token = company
            .sign_in(&client, &record.user, &session, "acct_ada", vec![])
            .unwrap();
        // The refresh's first checks pass on the token as it is now...
        let presented = token_hash(&token);
        let grant = lock(&company.inner.tokens).account.get(&presented).cloned().unwrap();
        // ...then the revoke lands, and signs the Session out.
        assert_eq!(company.end_sign_in(&token, &client), vec![session.clone()]);
        // Before: the claim re-checked only `claimed`, and signed the Session back in.
        let claimed = company.claim_and_sign_in(&presented, &grant, &session, record.expires_at, "acct_next", vec![]);
        assert_eq!(claimed.unwrap_err().code, OAuthErrorCode::InvalidGrant);
        assert!(!company.inner.sessions.get(&session).unwrap().is_signed_in());
    }
}
