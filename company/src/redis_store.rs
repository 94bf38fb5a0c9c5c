//! The store traits in Redis, for a company that runs as several replicas (feature `redis`).
//!
//! Every key carries the company's prefix (`{prefix}:replay:…`, `{prefix}:session:…`) and
//! expires with its record (`PXAT`), so Redis holds no more than the live records. What must
//! happen at most once is one atomic step on the server: a replay mark is one
//! `SET key 1 NX PXAT exp`; a cookie binding with its Session's cap is one Lua script; every
//! other record ([`Records`]: Sessions, tokens, device codes, operations) is a hash of its
//! version and JSON, changed by one Lua script that checks every version of a commit before it
//! writes any. Cookie values are never stored, only their SHA-256 (as in memory).
//!
//! Any error talking to Redis is [`StoreError::Unavailable`]: the caller fails closed (503), and
//! the connection manager reconnects on its own when Redis is back.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::{SessionId, UnixTime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands as _, Script};

use crate::records::{Change, Expect, Records, Stored, Write};
use crate::replay::{ReplayGuard, ReplayKey};
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
    scripts: Arc<Scripts>,
}

struct Scripts {
    commit: Script,
    count: Script,
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
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, RedisSetupError> {
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
            scripts: Arc::new(Scripts {
                commit: Script::new(COMMIT),
                count: Script::new(COUNT),
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

    fn cookie_key(&self, cookie: &CookieHash) -> String {
        self.key("cookie", &URL_SAFE_NO_PAD.encode(cookie.as_bytes()))
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
impl Records for RedisStore {
    async fn get(&self, key: &str) -> Result<Option<Stored>, StoreError> {
        let (version, data): (Option<u64>, Option<Vec<u8>>) = self
            .connection
            .clone()
            .hget(self.key("record", key), &["v", "d"])
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(version.zip(data).map(|(version, data)| Stored { version, data }))
    }

    /// One script: every key's version checked, then every write applied, or none.
    async fn commit(&self, changes: &[Change]) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.commit.prepare_invoke();
        for change in changes {
            invocation.key(self.key("record", &change.key));
            match change.expect {
                Expect::Absent => invocation.arg("absent"),
                Expect::Version(version) => invocation.arg(version.to_string()),
                Expect::Any => invocation.arg("any"),
            };
            match &change.write {
                Write::Put(data, until) => invocation
                    .arg("put")
                    .arg(data.as_slice())
                    .arg(until.as_secs().saturating_add(1).saturating_mul(1_000).max(1)),
                Write::Delete => invocation.arg("delete").arg("").arg(0),
                Write::Check => invocation.arg("check").arg("").arg(0),
            };
        }
        let committed: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(committed == 1)
    }

    async fn count(&self, key: &str, until: UnixTime) -> Result<(u64, UnixTime), StoreError> {
        let (count, until_ms): (u64, i64) = self
            .scripts
            .count
            .key(self.key("count", key))
            .arg(until.as_secs().saturating_mul(1_000))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        Ok((count, UnixTime::from_secs(until_ms / 1_000)))
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

/// Every Redis error is the store being unavailable: logged by kind, never with a key or value.
fn unavailable(error: &redis::RedisError) -> StoreError {
    tracing::warn!(kind = ?error.kind(), "redis store unavailable");
    StoreError::Unavailable
}

/// KEYS: the records of a commit. ARGV, three per key: what it expects (`absent`, `any` or a
/// version), what to do (`put`, `delete`, `check`), the JSON and the expiry in ms (for `put`).
/// 1 when every key was as expected and every write applied, 0 (nothing written) otherwise.
const COMMIT: &str = r"
for i, key in ipairs(KEYS) do
  local expect = ARGV[(i - 1) * 4 + 1]
  local held = redis.call('HGET', key, 'v')
  if expect == 'absent' then
    if held then return 0 end
  elseif expect ~= 'any' then
    if held ~= expect then return 0 end
  end
end
for i, key in ipairs(KEYS) do
  local what = ARGV[(i - 1) * 4 + 2]
  if what == 'put' then
    local version = tonumber(redis.call('HGET', key, 'v') or '0') + 1
    redis.call('HSET', key, 'v', version, 'd', ARGV[(i - 1) * 4 + 3])
    redis.call('PEXPIREAT', key, ARGV[(i - 1) * 4 + 4])
  elseif what == 'delete' then
    redis.call('DEL', key)
  end
end
return 1
";

/// KEYS: the count. ARGV: until (ms) for a new count. The count now and until when it lives.
const COUNT: &str = r"
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIREAT', KEYS[1], ARGV[1]) end
return {count, redis.call('PEXPIRETIME', KEYS[1])}
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
