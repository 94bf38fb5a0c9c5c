//! The store traits in Redis, for a company that runs as several replicas (feature `redis`).
//!
//! Every key carries the company's prefix (`{prefix}:replay:…`, `{prefix}:session:…`) and
//! expires with its record (`PXAT`), so Redis holds no more than the live records. What must
//! happen at most once is one atomic step on the server: a replay mark is one
//! `SET key 1 NX PXAT exp`; a Session's change, a cookie binding with its Session's cap, are one
//! Lua script each. Cookie values are never stored, only their SHA-256 (as in memory).
//!
//! Any error talking to Redis is [`StoreError::Unavailable`]: the caller fails closed (503), and
//! the connection manager reconnects on its own when Redis is back.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::{ClientId, Clock, PairwiseUserId, Rng, SessionId, UnixTime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands as _, Script};
use sha2::{Digest, Sha256};

use crate::replay::{ReplayGuard, ReplayKey};
use crate::session::{SESSIONS_PER_CLIENT, SessionDirectory, SessionRecord};
use crate::store::StoreError;
use crate::web_cookie::{BINDINGS_PER_SESSION, Binding, CookieBindings, CookieHash};

/// How long one command may take before the store counts as unavailable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest wait between two reconnection attempts, in milliseconds.
const MAX_RECONNECT_DELAY_MS: u64 = 1_000;

/// A company's records in one Redis database, under one key prefix. Cheap to clone: clones
/// share the connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn Rng>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    start_session: Script,
    change_session: Script,
    bind_cookie: Script,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// The URL is not a Redis URL (`redis://HOST:PORT/DB`).
    #[error("not a Redis URL (redis://HOST:PORT/DB)")]
    Url(#[source] redis::RedisError),
    /// Redis could not be reached or refused the connection.
    #[error("Redis could not be reached")]
    Connect(#[source] redis::RedisError),
}

impl RedisStore {
    /// Connects to `url` (`redis://HOST:PORT/DB`), keeping every key under `prefix` (one per
    /// company sharing the database). The connection reconnects on its own.
    pub async fn connect(
        url: &str,
        prefix: &str,
        clock: Arc<dyn Clock>,
        rng: Arc<dyn Rng>,
    ) -> Result<Self, RedisSetupError> {
        let client = redis::Client::open(url).map_err(RedisSetupError::Url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(RESPONSE_TIMEOUT)
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_max_delay(MAX_RECONNECT_DELAY_MS)
            // Commands waiting on a reconnection fail with its first failed attempt (the caller
            // answers 503 at once); the next command starts another attempt.
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(RedisSetupError::Connect)?;
        Ok(Self {
            connection,
            prefix: Arc::from(prefix),
            clock,
            rng,
            scripts: Arc::new(Scripts {
                start_session: Script::new(START_SESSION),
                change_session: Script::new(CHANGE_SESSION),
                bind_cookie: Script::new(BIND_COOKIE),
            }),
        })
    }

    /// Whether Redis answers now (for a readiness check).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(|e| unavailable(&e))
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}:{kind}:{id}", self.prefix)
    }

    fn session_key(&self, id: &SessionId) -> String {
        self.key("session", id.as_str())
    }

    fn cookie_key(&self, cookie: &CookieHash) -> String {
        self.key("cookie", &URL_SAFE_NO_PAD.encode(cookie.as_bytes()))
    }

    /// Starts a signed-out Session for `(client_id, user)` that lives `lifetime` seconds,
    /// refused when the client holds [`SESSIONS_PER_CLIENT`] live ones.
    pub async fn start_session(
        &self,
        client_id: &ClientId,
        user: &PairwiseUserId,
        lifetime: i64,
    ) -> Result<SessionId, StoreError> {
        let mut bytes = [0u8; 16];
        self.rng.fill(&mut bytes);
        let id =
            SessionId::parse(&format!("ses_{}", URL_SAFE_NO_PAD.encode(bytes))).map_err(|_| StoreError::Unavailable)?;
        let now = self.clock.now();
        let expires_at = now.plus(lifetime);
        let client_key = self.key("client-sessions", &digest(client_id.as_str()));
        let started: i64 = self
            .scripts
            .start_session
            .key(self.session_key(&id))
            .key(client_key)
            .arg(client_id.as_str())
            .arg(user.as_str())
            .arg(expires_at.as_secs())
            .arg(now.as_secs())
            .arg(SESSIONS_PER_CLIENT)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        if started == 1 { Ok(id) } else { Err(StoreError::Full) }
    }

    /// Signs the Session in to `account` with `scopes`; false for an unknown Session.
    pub async fn sign_in(&self, id: &SessionId, account: &str, scopes: &[String]) -> Result<bool, StoreError> {
        self.change_session(id, "sign_in", account, &scopes.join(" ")).await
    }

    /// Signs the Session out (a new epoch when it was signed in); false for an unknown Session.
    pub async fn sign_out(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.change_session(id, "sign_out", "", "").await
    }

    /// Replaces the Session's scopes; false for an unknown Session.
    pub async fn set_scopes(&self, id: &SessionId, scopes: &[String]) -> Result<bool, StoreError> {
        self.change_session(id, "set_scopes", "", &scopes.join(" ")).await
    }

    /// Ends the Session now; false for an unknown Session.
    pub async fn end_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.change_session(id, "end", "", "").await
    }

    async fn change_session(
        &self,
        id: &SessionId,
        what: &str,
        account: &str,
        scopes: &str,
    ) -> Result<bool, StoreError> {
        let changed: i64 = self
            .scripts
            .change_session
            .key(self.session_key(id))
            .arg(what)
            .arg(account)
            .arg(scopes)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(changed == 1)
    }
}

#[async_trait]
impl ReplayGuard for RedisStore {
    /// One `SET key 1 NX PXAT exp`: of any number of replicas marking the same key at once,
    /// exactly one sees `OK`.
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError> {
        let key = self.key("replay", &URL_SAFE_NO_PAD.encode(key.as_bytes()));
        let at_ms = expires_at.as_secs().saturating_add(1).saturating_mul(1_000).max(1);
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            .arg(at_ms)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(set.is_some())
    }
}

#[async_trait]
impl SessionDirectory for RedisStore {
    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let fields: Vec<Option<String>> = self
            .connection
            .clone()
            .hget(
                self.session_key(id),
                &["client_id", "user", "account", "scopes", "expires_at", "ended", "epoch"],
            )
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(session_record(&fields))
    }
}

#[async_trait]
impl CookieBindings for RedisStore {
    async fn bind(&self, cookie: CookieHash, binding: Binding, until: UnixTime) -> Result<(), StoreError> {
        let _: i64 = self
            .scripts
            .bind_cookie
            .key(self.cookie_key(&cookie))
            .key(self.key("session-cookies", binding.session.as_str()))
            .arg(URL_SAFE_NO_PAD.encode(cookie.as_bytes()))
            .arg(binding.session.as_str())
            .arg(binding.epoch)
            .arg(until.as_secs().saturating_add(1).saturating_mul(1_000))
            .arg(BINDINGS_PER_SESSION)
            .arg(format!("{}:cookie:", self.prefix))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn lookup(&self, cookie: &CookieHash) -> Result<Option<Binding>, StoreError> {
        let (session, epoch): (Option<String>, Option<u64>) = self
            .connection
            .clone()
            .hget(self.cookie_key(cookie), &["session", "epoch"])
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(session
            .and_then(|s| SessionId::parse(&s).ok())
            .zip(epoch)
            .map(|(session, epoch)| Binding { session, epoch }))
    }

    async fn forget(&self, cookie: &CookieHash) -> Result<(), StoreError> {
        self.connection
            .clone()
            .del::<_, ()>(self.cookie_key(cookie))
            .await
            .map_err(|e| unavailable(&e))
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A Session's record from its hash's fields (in the order the lookups ask for them).
fn session_record(fields: &[Option<String>]) -> Option<SessionRecord> {
    let field = |i: usize| fields.get(i).and_then(Option::as_deref);
    let scopes = field(3).unwrap_or_default();
    Some(SessionRecord {
        client_id: ClientId::parse(field(0)?).ok()?,
        user: PairwiseUserId::parse(field(1)?).ok()?,
        account: field(2).filter(|a| !a.is_empty()).map(str::to_owned),
        scopes: scopes.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
        expires_at: UnixTime::from_secs(field(4)?.parse().ok()?),
        ended: field(5) == Some("1"),
        epoch: field(6).and_then(|e| e.parse().ok()).unwrap_or(0),
    })
}

/// SHA-256 of `text`, base64url: a bounded key part for an unbounded name (a `client_id`).
fn digest(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// Every Redis error is the store being unavailable: logged by kind, never with a key or value.
fn unavailable(error: &redis::RedisError) -> StoreError {
    tracing::warn!(kind = ?error.kind(), "redis store unavailable");
    StoreError::Unavailable
}

/// KEYS: session, the client's sorted set of Sessions. ARGV: client_id, user, expires_at (s),
/// now (s), cap. 1 when started, 0 when the client holds its cap.
const START_SESSION: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 0 end
local until_ms = (tonumber(ARGV[3]) + 1) * 1000
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('PEXPIREAT', KEYS[2], until_ms)
redis.call('HSET', KEYS[1], 'client_id', ARGV[1], 'user', ARGV[2], 'account', '', 'scopes', '',
  'expires_at', ARGV[3], 'ended', '0', 'epoch', '0')
redis.call('PEXPIREAT', KEYS[1], until_ms)
return 1
";

/// KEYS: session. ARGV: what (sign_in, sign_out, set_scopes, end), account, scopes. 1 when the
/// Session exists (and was changed), 0 otherwise.
const CHANGE_SESSION: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local what = ARGV[1]
if what == 'sign_in' then
  redis.call('HSET', KEYS[1], 'account', ARGV[2], 'scopes', ARGV[3])
elseif what == 'sign_out' then
  if redis.call('HGET', KEYS[1], 'account') ~= '' then redis.call('HINCRBY', KEYS[1], 'epoch', 1) end
  redis.call('HSET', KEYS[1], 'account', '', 'scopes', '')
elseif what == 'set_scopes' then
  redis.call('HSET', KEYS[1], 'scopes', ARGV[3])
elseif what == 'end' then
  redis.call('HSET', KEYS[1], 'ended', '1')
end
return 1
";

/// KEYS: the cookie's binding, the Session's list of cookies. ARGV: the cookie's hash, session,
/// epoch, until (ms), the cap per Session, the prefix of binding keys. The Session's oldest
/// cookies past the cap end.
const BIND_COOKIE: &str = r"
redis.call('HSET', KEYS[1], 'session', ARGV[2], 'epoch', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[1])
while redis.call('LLEN', KEYS[2]) > tonumber(ARGV[5]) do
  local ended = redis.call('LPOP', KEYS[2])
  redis.call('DEL', ARGV[6] .. ended)
end
redis.call('PEXPIREAT', KEYS[2], ARGV[4])
return 1
";
