//! Where a join's state meets: the Session the assertion names, the one-time use of its
//! `(client_id, jti)` (PAP-5-07) and the cookie it gets (PAP-5-10), seen by the verifier as one
//! store ([`JoinStore`]).
//!
//! A join reads its Session first (step 8: live, the same client and user) and writes last
//! (step 10: the mark, then the binding). A store that answers in this process does both as
//! separate calls on its three stores ([`SeparateStores`]). A distributed store makes each a
//! round trip, so it may do better: read the Session from a short-lived local copy, and do the
//! last step as one atomic act that first re-checks the Session is still as it was read
//! (`RedisStore`: one script, one round trip per join). The copy never decides alone: a
//! Session that was signed out, ended or changed since it was copied fails the re-check
//! ([`Committed::SessionMoved`]), and the verifier reads it again before it decides.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use pap_shared::{SessionId, UnixTime};

use crate::replay::{ReplayGuard, ReplayKey};
use crate::session::{SessionDirectory, SessionRecord};
use crate::store::StoreError;
use crate::web_cookie::{Binding, CookieBindings, CookieHash};

/// A Session as a join read it: its record, and the stamp of that reading the commit re-checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenSession {
    /// The record as read.
    pub record: SessionRecord,
    /// The record's version when read, for a store that re-checks it at commit; `None` for one
    /// that does not (its read and its commit are in one process).
    pub stamp: Option<u64>,
    /// Whether it came from a local copy: a copy may say yes, but a no is asked of the store.
    pub copied: bool,
}

/// How fresh a join's read of its Session must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// A local copy will do: the commit re-checks it.
    MayBeCopied,
    /// From the store itself: the copy was refused at commit, or would refuse the join.
    FromStore,
}

/// The last step of a join: what is written, if the Session is still as it was seen.
#[derive(Debug)]
pub struct JoinCommit<'a> {
    /// The Session the assertion names, as the verifier checked it.
    pub session: &'a SessionId,
    /// The reading of it that was checked.
    pub seen: &'a SeenSession,
    /// The assertion's `(client_id, jti)`.
    pub replay: ReplayKey,
    /// The assertion's `exp`: the mark lives at least until then.
    pub expires_at: UnixTime,
    /// The cookie to bind to the Session in the epoch seen, until the Session's expiry; `None`
    /// when only the assertion is verified ([`crate::Verifier::verify`]).
    pub cookie: Option<CookieHash>,
}

impl JoinCommit<'_> {
    /// What the cookie stands for: the Session, in the epoch that was checked.
    pub fn binding(&self) -> Binding {
        Binding {
            session: self.session.clone(),
            epoch: self.seen.record.epoch,
        }
    }
}

/// How the last step of a join ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    /// The mark was made and the cookie (if any) bound.
    Joined,
    /// The `(client_id, jti)` was marked before: nothing written.
    Replayed,
    /// The Session is no longer as seen (signed out, ended, changed, gone): nothing written;
    /// read it again from the store and decide again.
    SessionMoved,
}

/// The stores a join touches, as one.
#[async_trait]
pub trait JoinStore: Send + Sync + fmt::Debug {
    /// Session `id` as a join sees it; `Ok(None)` when the store does not know it (a store
    /// copies Sessions it holds, never the absence of one).
    async fn session(&self, id: &SessionId, freshness: Freshness) -> Result<Option<SeenSession>, StoreError>;

    /// Marks `commit.replay` once and binds `commit.cookie`, if the Session is still as seen.
    /// A mark that is made is never undone: a binding that fails after it refuses the join
    /// (the agent signs a new assertion).
    async fn commit(&self, commit: JoinCommit<'_>) -> Result<Committed, StoreError>;
}

/// A [`JoinStore`] from a Session directory, a replay guard and cookie bindings, called one
/// after the other: for stores in this process, where a call costs no round trip. The Session
/// is not re-checked at commit (a store in this process reads it a few microseconds before).
#[derive(Clone)]
pub struct SeparateStores {
    sessions: Arc<dyn SessionDirectory>,
    replay: Arc<dyn ReplayGuard>,
    cookies: Arc<dyn CookieBindings>,
}

impl SeparateStores {
    /// The three stores; `cookies` must be the bindings the website reads
    /// ([`crate::BrowserSession::new`]).
    pub fn new(
        sessions: Arc<dyn SessionDirectory>,
        replay: Arc<dyn ReplayGuard>,
        cookies: Arc<dyn CookieBindings>,
    ) -> Self {
        Self {
            sessions,
            replay,
            cookies,
        }
    }
}

#[async_trait]
impl JoinStore for SeparateStores {
    async fn session(&self, id: &SessionId, _: Freshness) -> Result<Option<SeenSession>, StoreError> {
        Ok(self.sessions.session(id).await?.map(|record| SeenSession {
            record,
            stamp: None,
            copied: false,
        }))
    }

    async fn commit(&self, commit: JoinCommit<'_>) -> Result<Committed, StoreError> {
        if !self.replay.mark_once(commit.replay, commit.expires_at).await? {
            return Ok(Committed::Replayed);
        }
        if let Some(cookie) = commit.cookie {
            let until = commit.seen.record.expires_at;
            self.cookies.bind(cookie, commit.binding(), until).await?;
        }
        Ok(Committed::Joined)
    }
}

impl fmt::Debug for SeparateStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeparateStores")
            .field("sessions", &self.sessions)
            .field("replay", &self.replay)
            .field("cookies", &self.cookies)
            .finish()
    }
}
