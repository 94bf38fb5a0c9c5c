//! The token endpoint (PAP §4.2, §4.4, §4.8) and Account Token revocation (RFC 7009).
//!
//! Session Tokens (`sat_…`) are DPoP-bound to the key of the proof that got them and last as
//! long as the Session; Account Tokens (`acct_…`) stand for a sign-in and, when revoked, sign
//! every Session signed in with them out, which the website shows on its next request.

use std::collections::{HashMap, VecDeque};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

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
use super::{ReferenceCompany, token_hash};
use pap_company::records::{Commit, Expect, expect_of, read, retrying};
use pap_company::slot::{self, SlotTag};
use pap_company::stores::{Owner, StoreError};
use pap_company::stores::{RecordSessions, SessionRecord};

/// Account Tokens live 90 days.
const ACCOUNT_TOKEN_LIFETIME: i64 = 90 * 86_400;

/// A Session Token's record (key `access:{hash}`), until the Session expires.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AccessToken {
    pub(crate) session: SessionId,
    pub(crate) client_id: ClientId,
    pub(crate) thumbprint: String,
    pub(crate) expires_at: UnixTime,
}

/// An Account Token's record (key `account-token:{hash}`). Tokens rotate: each refresh claims
/// the presented token and mints the next one of the same sign-in ("family").
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccountToken {
    client_id: ClientId,
    user: PairwiseUserId,
    account: String,
    scopes: Vec<String>,
    family: String,
    claimed: bool,
    expires_at: UnixTime,
}

/// One sign-in (key `family:{id}`): every Session signed in with any of its tokens, and
/// whether it was revoked; kept while one of its tokens may still be presented.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Family {
    sessions: Vec<SessionId>,
    revoked: bool,
    kept_until: UnixTime,
}

/// Most live Session Tokens one Session holds: a newer one ends the oldest (its agent asks
/// again), so renewing in a loop holds no more.
pub const SESSION_TOKENS_PER_SESSION: usize = 8;

// Every key carries its owner's hash tag (`pap_company::slot`), read from the token, the family
// or the Session id the company minted with it, so that a commit's keys share one slot.

fn access_key(token: &str) -> String {
    let hash = URL_SAFE_NO_PAD.encode(token_hash(token));
    slot::key("access", SlotTag::of_minted(token, "sat_"), &hash)
}

fn account_token_key(token: &str) -> String {
    let hash = URL_SAFE_NO_PAD.encode(token_hash(token));
    slot::key("account-token", SlotTag::of_minted(token, "acct_"), &hash)
}

fn family_key(family: &str) -> String {
    slot::key("family", SlotTag::of_minted(family, "fam_"), family)
}

/// The Session's live Session Tokens, oldest first.
fn session_tokens_key(session: &SessionId) -> String {
    slot::key("session-tokens", SlotTag::of_session(session), session.as_str())
}

/// The account a Session was ever signed in to, until the Session expires: it may not sign in
/// to another one, even after signing out (PAP-4.8-03, PAP-4.8-04).
fn session_account_key(session: &SessionId) -> String {
    slot::key("session-account", SlotTag::of_session(session), session.as_str())
}

/// The sign-in (family id) that last signed Session `session` in: what the website's sign-out
/// ends (review N19).
fn session_family_key(session: &SessionId) -> String {
    slot::key("session-family", SlotTag::of_session(session), session.as_str())
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
        let thumbprint = self
            .check_dpop(headers, "POST", "/oauth/token", None, &client_id)
            .await?;
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
                .await
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
                self.inner.sessions.sign_out(&id).await.map_err(ApiError::store)?;
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
    ) -> Result<Option<pap_company::stores::SessionRecord>, ApiError> {
        let record = pap_company::stores::SessionDirectory::session(&self.inner.sessions, id)
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
        if let Some(account) = &record.account {
            // A person signed this client in: it is no stranger to the resolver (review S3).
            self.inner.clients.vouch(client_id, account);
        }
        let access_token = self.random_token("sat", client_id);
        let expires_in = record.expires_at.since(self.now()).max(1);
        let token = AccessToken {
            session: session.clone(),
            client_id: client_id.clone(),
            thumbprint: thumbprint.to_owned(),
            expires_at: record.expires_at,
        };
        let records = self.records();
        let list_key = session_tokens_key(session);
        let new_key = access_key(&access_token);
        retrying(|| async {
            let held = read::<VecDeque<String>>(records, &list_key).await?;
            let mut tokens = held.as_ref().map(|(_, list)| list.clone()).unwrap_or_default();
            let mut commit = Commit::new(Owner::of_client(client_id));
            while tokens.len() >= SESSION_TOKENS_PER_SESSION {
                if let Some(oldest) = tokens.pop_front() {
                    commit = commit.delete(oldest, Expect::Any);
                }
            }
            tokens.push_back(new_key.clone());
            let committed = commit
                .put(list_key.clone(), expect_of(&held), &tokens, record.expires_at)
                .put(new_key.clone(), Expect::Absent, &token, record.expires_at)
                .apply(records)
                .await?;
            Ok(committed.then_some(()))
        })
        .await
        .map_err(ApiError::store)?;
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
    pub(crate) async fn account_fits(&self, session: &SessionId, account: &str) -> Result<bool, ApiError> {
        let held = read::<String>(self.records(), &session_account_key(session))
            .await
            .map_err(ApiError::store)?;
        Ok(held.is_none_or(|(_, a)| a == account))
    }

    /// Signs `session` (of `user`) in to `account` with `scopes` in a new sign-in family and
    /// mints its first Account Token, in one commit with the Session's record: refused
    /// (`account_mismatch`) if the Session was ever signed in to another account.
    pub(crate) async fn sign_in(
        &self,
        client_id: &ClientId,
        user: &PairwiseUserId,
        session: &SessionId,
        account: &str,
        scopes: Vec<String>,
    ) -> Result<String, ApiError> {
        let token = self.random_token("acct", client_id);
        let family = self.random_token("fam", client_id);
        let records = self.records();
        retrying(|| async {
            let now = self.now();
            let expires_at = now.plus(ACCOUNT_TOKEN_LIFETIME);
            let session_key = RecordSessions::key(session);
            let Some((version, mut record)) = read::<SessionRecord>(records, &session_key).await? else {
                return Ok(Some(Err(ApiError::bad_request(OAuthErrorCode::InvalidSession))));
            };
            let account_key = session_account_key(session);
            let ever = read::<String>(records, &account_key).await?;
            if ever.as_ref().is_some_and(|(_, a)| a != account) {
                return Ok(Some(Err(ApiError::bad_request(OAuthErrorCode::AccountMismatch))));
            }
            let signed_by = read::<String>(records, &session_family_key(session)).await?;
            record.account = Some(account.to_owned());
            record.scopes.clone_from(&scopes);
            let committed = Commit::new(Owner::of_client(client_id))
                .put(
                    session_family_key(session),
                    expect_of(&signed_by),
                    &family,
                    record.expires_at,
                )
                .put(
                    family_key(&family),
                    Expect::Absent,
                    &Family {
                        sessions: vec![session.clone()],
                        revoked: false,
                        kept_until: expires_at,
                    },
                    expires_at,
                )
                .put(
                    account_token_key(&token),
                    Expect::Absent,
                    &AccountToken {
                        client_id: client_id.clone(),
                        user: user.clone(),
                        account: account.to_owned(),
                        scopes: scopes.clone(),
                        family: family.clone(),
                        claimed: false,
                        expires_at,
                    },
                    expires_at,
                )
                .put(
                    account_key.clone(),
                    expect_of(&ever),
                    &account.to_owned(),
                    record.expires_at,
                )
                .put(session_key, Expect::Version(version), &record, record.expires_at)
                .apply(records)
                .await?;
            Ok(committed.then_some(Ok(())))
        })
        .await
        .map_err(ApiError::store)??;
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
        let presented = form.get("refresh_token").ok_or_else(invalid_grant)?;
        let records = self.records();
        let (_, grant) = read::<AccountToken>(records, &account_token_key(presented))
            .await
            .map_err(ApiError::store)?
            .ok_or_else(invalid_grant)?;
        let family_revoked = read::<Family>(records, &family_key(&grant.family))
            .await
            .map_err(ApiError::store)?
            .is_none_or(|(_, f)| f.revoked);
        if grant.claimed || family_revoked || self.now() >= grant.expires_at || &grant.client_id != client_id {
            return Err(invalid_grant());
        }
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
        if !self.account_fits(&session, &grant.account).await? {
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
        let rotated = self.random_token("acct", client_id);
        self.claim_and_sign_in(presented, &session, &rotated, scopes).await?;
        self.issue(client_id, &session, thumbprint, Some(rotated)).await
    }

    /// The claim of a refresh, in one commit with the sign-in it makes and the family it
    /// joins: exactly one refresh wins the presented token, and only while its sign-in is
    /// neither revoked nor expired; a revoke that commits first moves the family, so the claim
    /// reads again and finds it revoked, and the Session stays signed out (review L2).
    async fn claim_and_sign_in(
        &self,
        presented: &str,
        session: &SessionId,
        rotated: &str,
        scopes: Vec<String>,
    ) -> Result<(), ApiError> {
        let invalid_grant = || ApiError::bad_request(OAuthErrorCode::InvalidGrant);
        let records = self.records();
        let presented_key = account_token_key(presented);
        retrying(|| async {
            let now = self.now();
            let Some((token_version, mut old)) = read::<AccountToken>(records, &presented_key).await? else {
                return Ok(Some(Err(invalid_grant())));
            };
            let family_key = family_key(&old.family);
            let Some((family_version, mut family)) = read::<Family>(records, &family_key).await? else {
                return Ok(Some(Err(invalid_grant())));
            };
            if old.claimed || now >= old.expires_at || family.revoked {
                return Ok(Some(Err(invalid_grant())));
            }
            let session_key = RecordSessions::key(session);
            let Some((session_version, mut record)) = read::<SessionRecord>(records, &session_key).await? else {
                return Ok(Some(Err(ApiError::bad_request(OAuthErrorCode::InvalidSession))));
            };
            let account_key = session_account_key(session);
            let ever = read::<String>(records, &account_key).await?;
            let signed_by = read::<String>(records, &session_family_key(session)).await?;
            old.claimed = true;
            let next = AccountToken {
                scopes: scopes.clone(),
                claimed: false,
                expires_at: now.plus(ACCOUNT_TOKEN_LIFETIME),
                ..old.clone()
            };
            family.kept_until = family.kept_until.max(next.expires_at);
            if !family.sessions.contains(session) {
                family.sessions.push(session.clone());
            }
            record.account = Some(old.account.clone());
            record.scopes.clone_from(&scopes);
            let committed = Commit::new(Owner::of_client(&old.client_id))
                .put(
                    presented_key.clone(),
                    Expect::Version(token_version),
                    &old,
                    old.expires_at,
                )
                .put(account_token_key(rotated), Expect::Absent, &next, next.expires_at)
                .put(family_key, Expect::Version(family_version), &family, family.kept_until)
                .put(account_key, expect_of(&ever), &old.account, record.expires_at)
                .put(
                    session_family_key(session),
                    expect_of(&signed_by),
                    &old.family,
                    record.expires_at,
                )
                .put(
                    session_key,
                    Expect::Version(session_version),
                    &record,
                    record.expires_at,
                )
                .apply(records)
                .await?;
            Ok(committed.then_some(Ok(())))
        })
        .await
        .map_err(ApiError::store)?
    }

    /// Revokes the sign-in of Account Token `token` (of `client_id`): the family marked
    /// revoked and every Session it signed in signed out, in one commit. The Sessions it signed
    /// out.
    async fn end_sign_in(&self, token: &str, client_id: &ClientId) -> Result<Vec<SessionId>, StoreError> {
        let records = self.records();
        let Some((_, grant)) = read::<AccountToken>(records, &account_token_key(token)).await? else {
            return Ok(Vec::new());
        };
        if &grant.client_id != client_id {
            return Ok(Vec::new());
        }
        self.end_family(&grant.family).await
    }

    /// Ends the sign-in that last signed Session `session` in, if any: what the website's
    /// sign-out does, so the agent's Account Token of that sign-in stops refreshing too (review
    /// N19: a sign-out on the website that the agent's next refresh undid would be no sign-out).
    /// The Sessions it signed out.
    pub(crate) async fn end_sign_in_of(&self, session: &SessionId) -> Result<Vec<SessionId>, StoreError> {
        match read::<String>(self.records(), &session_family_key(session)).await? {
            Some((_, family)) => self.end_family(&family).await,
            None => Ok(Vec::new()),
        }
    }

    /// Marks sign-in `family` revoked and signs out every Session it signed in, in one commit.
    async fn end_family(&self, family: &str) -> Result<Vec<SessionId>, StoreError> {
        let records = self.records();
        let family_key = family_key(family);
        retrying(|| async {
            let Some((version, mut family)) = read::<Family>(records, &family_key).await? else {
                return Ok(Some(Vec::new()));
            };
            if family.revoked {
                return Ok(Some(Vec::new()));
            }
            // The whole sign-in ends: every token of the family, every Session it signed in.
            family.revoked = true;
            let sessions = std::mem::take(&mut family.sessions);
            // Only records that exist are written: each stays its creator's.
            let mut commit = Commit::new(Owner::company()).put(
                family_key.clone(),
                Expect::Version(version),
                &family,
                family.kept_until,
            );
            for session in &sessions {
                let key = RecordSessions::key(session);
                if let Some((session_version, mut record)) = read::<SessionRecord>(records, &key).await? {
                    record.sign_out();
                    commit = commit.put(key, Expect::Version(session_version), &record, record.expires_at);
                }
            }
            Ok(commit.apply(records).await?.then_some(sessions))
        })
        .await
    }

    /// The live Session Token `token`, if any.
    pub(crate) async fn access_token(&self, token: &str) -> Result<Option<AccessToken>, StoreError> {
        let record = read::<AccessToken>(self.records(), &access_key(token)).await?;
        Ok(record.map(|(_, t)| t).filter(|t| self.now() < t.expires_at))
    }

    /// RFC 7009 revocation of an Account Token: every Session signed in with it is signed out
    /// now (PAP §4.8). Always 200 `{}` for an authenticated client, known token or not.
    async fn revoke(&self, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
        let form = read_form(headers, body).await?;
        let client_id = self.authenticate_client(&form).await?;
        let token = form
            .get("token")
            .ok_or_else(|| ApiError::bad_request(OAuthErrorCode::InvalidRequest))?;
        let sessions = self.end_sign_in(token, &client_id).await.map_err(ApiError::store)?;
        tracing::info!(sessions = sessions.len(), "Account Token revoked");
        Ok(json_response(StatusCode::OK, &json!({})))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pap_shared::{PairwiseUserId, SystemClock, SystemRng};

    use super::*;
    use crate::reference::CompanyConfig;
    use pap_company::resolver::StaticClientKeys;
    use pap_company::stores::SessionDirectory as _;

    #[allow(clippy::unwrap_used, reason = "tests fail loudly")]
    #[tokio::test]
    async fn a_revoke_landing_between_a_refreshs_checks_and_its_claim_wins() {
        let config = CompanyConfig::parse(include_str!("../../shop.example.toml")).unwrap();
        let company = ReferenceCompany::new(
            config,
            Arc::new(SystemClock),
            Arc::new(SystemRng),
            Arc::new(StaticClientKeys::new()),
        );
        let client = ClientId::parse("https://atlas.example/agent.json").unwrap();
        let user = PairwiseUserId::parse("usr_race_AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        let session = company
            .inner
            .sessions
            .start(client.clone(), user.clone(), 3_600)
            .await
            .unwrap();
        let token = company
            .sign_in(&client, &user, &session, "acct_ada", vec![])
            .await
            .unwrap();
        // The refresh's first checks pass on the token as it is now...
        let (_, grant) = read::<AccountToken>(company.records(), &account_token_key(&token))
            .await
            .unwrap()
            .unwrap();
        assert!(!grant.claimed);
        // ...then the revoke lands, and signs the Session out.
        assert_eq!(
            company.end_sign_in(&token, &client).await.unwrap(),
            vec![session.clone()]
        );
        // The claim reads the family again and finds it revoked: the Session stays signed out.
        let claimed = company.claim_and_sign_in(&token, &session, "acct_next", vec![]).await;
        assert_eq!(claimed.unwrap_err().code, OAuthErrorCode::InvalidGrant);
        let record = company.inner.sessions.session(&session).await.unwrap().unwrap();
        assert!(!record.is_signed_in());
    }
}
