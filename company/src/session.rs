//! The company's view of its PAP Sessions, as the website needs it (PAP §4.2, §5).
//!
//! The verifier asks whether the Session an assertion names is live and whose it is
//! (PAP-5-08); the website asks the same on every request, so sign-in, sign-out and scope
//! changes show at once (PAP-5-10) and the cookie never outlives the Session (PAP-5-11).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::{ClientId, Clock, PairwiseUserId, Rng, SessionId, UnixTime};

use crate::records::{Commit, Expect, Records, expect_of, read, retrying};
use crate::share::Owner;
use crate::slot::{self, SESSION_ID_PREFIX, SlotTag};
use crate::store::{Bounded, PerOwner, StoreError, WhenFull};

/// A Session as the directory knows it now.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// How many times the Session was signed out. A cookie bound in an earlier epoch stands for
    /// nothing: signing out logs every joined browser out for good, and a later sign-in of the
    /// same Session does not bring those cookies back (only a new join does).
    pub epoch: u64,
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

    /// Signs the Session out: no account, no scopes, and a new epoch when it was signed in
    /// (every cookie bound to the old epoch stops reading as signed in).
    pub fn sign_out(&mut self) {
        if self.account.take().is_some() {
            self.epoch += 1;
        }
        self.scopes.clear();
    }
}

/// Looks Sessions up. A distributed store implements this the same way; the website calls it on
/// every request, so it must be cheap.
#[async_trait]
pub trait SessionDirectory: Send + Sync + fmt::Debug {
    /// The Session's current record, `Ok(None)` if the id is unknown, an error when the
    /// directory cannot answer (the caller refuses: a page is not shown, a join not accepted).
    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;
}

/// How many Sessions the embedded directory holds at most.
pub const SESSION_CAPACITY: u64 = 100_000;

/// How many live Sessions one client may hold in the embedded directory: past it, a new one is
/// refused ([`StoreError::Full`], answered 429) until one ends or expires.
pub const SESSIONS_PER_CLIENT: usize = 1_000;

/// Sessions held in this process, in moka, each until it expires; the reference company and
/// the tests use it. It refuses a new Session when it is full or the client holds
/// [`SESSIONS_PER_CLIENT`] live ones, and drops none that is live.
#[derive(Clone, Debug)]
pub struct MemorySessionDirectory {
    sessions: Arc<Bounded<SessionId, SessionRecord>>,
    by_client: Arc<PerOwner<ClientId, SessionId>>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl MemorySessionDirectory {
    /// An empty directory of [`SESSION_CAPACITY`] Sessions.
    pub fn new(clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        Self::with_capacity(SESSION_CAPACITY, clock, rng)
    }

    /// An empty directory of at most `capacity` Sessions.
    pub fn with_capacity(capacity: u64, clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        Self {
            sessions: Arc::new(Bounded::new(capacity, WhenFull::Refuse, clock.clone())),
            by_client: Arc::new(PerOwner::new(SESSIONS_PER_CLIENT, capacity, clock.clone())),
            clock,
            rng,
        }
    }

    /// Starts a signed-out Session for `(client_id, user)` that lives `lifetime` seconds, with a
    /// fresh id (`ses_`, the owner's hash tag, 22 random characters); refused when the directory
    /// is full or the client holds its cap of live Sessions.
    pub fn start(&self, client_id: ClientId, user: PairwiseUserId, lifetime: i64) -> Result<SessionId, StoreError> {
        let id = mint_session_id(self.rng.as_ref(), &client_id)?;
        let now = self.clock.now();
        let expires_at = now.plus(lifetime);
        // The client's live Sessions, counted and capped in one atomic step.
        self.by_client.add(&client_id, id.clone(), expires_at)?;
        let record = SessionRecord {
            client_id,
            user,
            account: None,
            scopes: Vec::new(),
            expires_at,
            ended: false,
            epoch: 0,
        };
        self.sessions.insert(id.clone(), record, expires_at)?;
        Ok(id)
    }

    /// Signs the Session in to `account` with `scopes`. Returns false for an unknown Session.
    pub fn sign_in(&self, id: &SessionId, account: &str, scopes: Vec<String>) -> bool {
        self.sessions.update(id, |r| {
            r.account = Some(account.to_owned());
            r.scopes = scopes;
        })
    }

    /// Signs the Session out; it stays live, with no account and no scopes, in a new epoch (the
    /// browsers it joined are logged out for good).
    pub fn sign_out(&self, id: &SessionId) -> bool {
        self.sessions.update(id, SessionRecord::sign_out)
    }

    /// Replaces the Session's scopes.
    pub fn set_scopes(&self, id: &SessionId, scopes: Vec<String>) -> bool {
        self.sessions.update(id, |r| r.scopes = scopes)
    }

    /// Ends the Session now.
    pub fn end(&self, id: &SessionId) -> bool {
        self.sessions.update(id, |r| r.ended = true)
    }

    /// The Session's record, if it is held (live or not yet swept).
    pub fn get(&self, id: &SessionId) -> Option<SessionRecord> {
        self.sessions.get(id)
    }

    /// How many Sessions are held.
    pub fn len(&self) -> u64 {
        self.sessions.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the Sessions (and the per-client counts) whose time has passed.
    pub fn sweep(&self) {
        self.sessions.sweep();
        self.by_client.sweep();
    }
}

/// Sessions as versioned [`Records`]: in this process or, over Redis, shared by every replica
/// of a company. Each change is one commit (a sign-out racing a sign-in, on any two replicas,
/// leaves the Session as one of them did, never half of each).
///
/// [`MemorySessionDirectory`] is the faster embedded default for one process; this one is what
/// the reference company uses, so that its other records and its Sessions change together.
#[derive(Clone, Debug)]
pub struct RecordSessions {
    records: Arc<dyn Records>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
}

impl RecordSessions {
    /// Sessions kept in `records`.
    pub fn new(records: Arc<dyn Records>, clock: Arc<dyn Clock>, rng: Arc<dyn Rng>) -> Self {
        Self { records, clock, rng }
    }

    /// The key of Session `id`'s record.
    pub fn key(id: &SessionId) -> String {
        slot::key("session", SlotTag::of_session(id), id.as_str())
    }

    fn client_key(client_id: &ClientId) -> String {
        use sha2::Digest as _;
        slot::key(
            "client-sessions",
            Some(SlotTag::of(Owner::of_client(client_id))),
            &URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(client_id.as_str().as_bytes())),
        )
    }

    /// Starts a signed-out Session for `(client_id, user)` that lives `lifetime` seconds;
    /// refused ([`StoreError::Full`]) when the client holds [`SESSIONS_PER_CLIENT`] live ones.
    pub async fn start(
        &self,
        client_id: ClientId,
        user: PairwiseUserId,
        lifetime: i64,
    ) -> Result<SessionId, StoreError> {
        let id = mint_session_id(self.rng.as_ref(), &client_id)?;
        let client_key = Self::client_key(&client_id);
        let records = self.records.as_ref();
        retrying(|| async {
            let now = self.clock.now();
            let expires_at = now.plus(lifetime);
            let held = read::<Vec<(SessionId, UnixTime)>>(records, &client_key).await?;
            let mut live: Vec<(SessionId, UnixTime)> = held
                .as_ref()
                .map(|(_, list)| list.iter().filter(|(_, until)| now < *until).cloned().collect())
                .unwrap_or_default();
            if live.len() >= SESSIONS_PER_CLIENT {
                return Err(StoreError::Full);
            }
            live.push((id.clone(), expires_at));
            let last = live.iter().map(|(_, until)| *until).max().unwrap_or(expires_at);
            let record = SessionRecord {
                client_id: client_id.clone(),
                user: user.clone(),
                account: None,
                scopes: Vec::new(),
                expires_at,
                ended: false,
                epoch: 0,
            };
            let committed = Commit::new(Owner::of_client(&client_id))
                .put(client_key.clone(), expect_of(&held), &live, last)
                .put(Self::key(&id), Expect::Absent, &record, expires_at)
                .apply(records)
                .await?;
            Ok(committed.then_some(()))
        })
        .await?;
        Ok(id)
    }

    /// Changes Session `id` with `change`, in one commit; false for an unknown Session.
    async fn change(&self, id: &SessionId, change: impl Fn(&mut SessionRecord)) -> Result<bool, StoreError> {
        let key = Self::key(id);
        let records = self.records.as_ref();
        retrying(|| async {
            let Some((version, mut record)) = read::<SessionRecord>(records, &key).await? else {
                return Ok(Some(false));
            };
            change(&mut record);
            let until = record.expires_at;
            let committed = Commit::new(Owner::of_client(&record.client_id))
                .put(key.clone(), Expect::Version(version), &record, until)
                .apply(records)
                .await?;
            Ok(committed.then_some(true))
        })
        .await
    }

    /// Signs the Session in to `account` with `scopes`; false for an unknown Session.
    pub async fn sign_in(&self, id: &SessionId, account: &str, scopes: &[String]) -> Result<bool, StoreError> {
        self.change(id, |r| {
            r.account = Some(account.to_owned());
            r.scopes = scopes.to_vec();
        })
        .await
    }

    /// Signs the Session out, in a new epoch when it was signed in (its browsers are logged out
    /// for good); false for an unknown Session.
    pub async fn sign_out(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.change(id, SessionRecord::sign_out).await
    }

    /// Replaces the Session's scopes; false for an unknown Session.
    pub async fn set_scopes(&self, id: &SessionId, scopes: &[String]) -> Result<bool, StoreError> {
        self.change(id, |r| r.scopes = scopes.to_vec()).await
    }

    /// Ends the Session now; false for an unknown Session.
    pub async fn end(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.change(id, |r| r.ended = true).await
    }
}

#[async_trait]
impl SessionDirectory for RecordSessions {
    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        Ok(read::<SessionRecord>(self.records.as_ref(), &Self::key(id))
            .await?
            .map(|(_, r)| r))
    }
}

#[async_trait]
impl SessionDirectory for MemorySessionDirectory {
    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.sessions.get(id))
    }
}

/// A fresh Session id for `client_id`'s Session: `ses_`, its owner's hash tag ([`crate::slot`]),
/// 16 random bytes (22 base64url characters).
fn mint_session_id(rng: &dyn Rng, client_id: &ClientId) -> Result<SessionId, StoreError> {
    let mut bytes = [0u8; 16];
    rng.fill(&mut bytes);
    let id = SlotTag::of(Owner::of_client(client_id)).mint(SESSION_ID_PREFIX, &bytes);
    // "ses_" + 4 hex digits + 22 base64url characters always fits the SessionId alphabet and
    // length; were it not to, no Session starts.
    SessionId::parse(&id).map_err(|_| StoreError::Unavailable)
}
