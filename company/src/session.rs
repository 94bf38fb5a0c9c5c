//! The company's view of its PAP Sessions, as the website needs it (PAP §4.2, §5).
//!
//! The verifier asks whether the Session an assertion names is live and whose it is
//! (PAP-5-08); the website asks the same on every request, so sign-in, sign-out and scope
//! changes show at once (PAP-5-10) and the cookie never outlives the Session (PAP-5-11).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::{ClientId, Clock, PairwiseUserId, Rng, SessionId, UnixTime};

/// A Session as the directory knows it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The agent the Session was started for.
    pub client_id: ClientId,
    /// The pairwise User ID the Session belongs to.
    pub user: PairwiseUserId,
    /// The account the Session is signed in to, if it is signed in now.
    pub account: Option<String>,
    /// The scopes granted to the Session now (empty while signed out).
    pub scopes: Vec<String>,
    /// When the Session ends unless renewed.
    pub expires_at: UnixTime,
    /// Whether the Session was ended before `expires_at`.
    pub ended: bool,
}

impl SessionRecord {
    /// A Session is live while it has not been ended and has not expired.
    pub fn is_live(&self, now: UnixTime) -> bool {
        !self.ended && now < self.expires_at
    }

    /// Whether the Session is signed in to an account.
    pub fn is_signed_in(&self) -> bool {
        self.account.is_some()
    }
}

/// Looks Sessions up. A distributed store implements this the same way; the website calls it on
/// every request, so it must be cheap.
#[async_trait]
pub trait SessionDirectory: Send + Sync + fmt::Debug {
    /// The Session's current record, or `None` if the id is unknown.
    async fn session(&self, id: &SessionId) -> Option<SessionRecord>;
}

/// Sessions held in this process. The reference company and the tests use it.
#[derive(Clone, Debug)]
pub struct MemorySessionDirectory {
    sessions: Arc<RwLock<HashMap<SessionId, SessionRecord>>>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl MemorySessionDirectory {
    /// An empty directory.
    pub fn new(clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        Self {
            sessions: Arc::default(),
            clock,
            rng,
        }
    }

    /// Starts a signed-out Session for `(client_id, user)` that lives `lifetime` seconds, with a
    /// fresh `ses_` + 22-character id.
    pub fn start(&self, client_id: ClientId, user: PairwiseUserId, lifetime: i64) -> SessionId {
        let mut bytes = [0u8; 16];
        self.rng.fill(&mut bytes);
        let id = format!("ses_{}", URL_SAFE_NO_PAD.encode(bytes));
        // "ses_" + 22 base64url characters always fits the SessionId alphabet and length.
        let id = SessionId::parse(&id).expect("a generated session id is valid");
        let record = SessionRecord {
            client_id,
            user,
            account: None,
            scopes: Vec::new(),
            expires_at: self.clock.now().plus(lifetime),
            ended: false,
        };
        self.write().insert(id.clone(), record);
        id
    }

    /// Signs the Session in to `account` with `scopes`. Returns false for an unknown Session.
    pub fn sign_in(&self, id: &SessionId, account: &str, scopes: Vec<String>) -> bool {
        self.update(id, |r| {
            r.account = Some(account.to_owned());
            r.scopes = scopes;
        })
    }

    /// Signs the Session out; it stays live, with no account and no scopes.
    pub fn sign_out(&self, id: &SessionId) -> bool {
        self.update(id, |r| {
            r.account = None;
            r.scopes.clear();
        })
    }

    /// Replaces the Session's scopes.
    pub fn set_scopes(&self, id: &SessionId, scopes: Vec<String>) -> bool {
        self.update(id, |r| r.scopes = scopes)
    }

    /// Ends the Session now.
    pub fn end(&self, id: &SessionId) -> bool {
        self.update(id, |r| r.ended = true)
    }

    fn update(&self, id: &SessionId, change: impl FnOnce(&mut SessionRecord)) -> bool {
        self.write().get_mut(id).map(change).is_some()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<SessionId, SessionRecord>> {
        // A panic while holding the lock cannot leave a record half-written (every change is
        // one assignment), so the map stays usable.
        self.sessions.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SessionDirectory for MemorySessionDirectory {
    async fn session(&self, id: &SessionId) -> Option<SessionRecord> {
        self.sessions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }
}
