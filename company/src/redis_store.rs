//! The store traits in Redis, for a company that runs as several replicas (feature `redis`).
//!
//! Every key carries the company's prefix (`{prefix}:replay:…`, `{prefix}:session:…`) and
//! expires with its record (`PXAT`), so Redis holds no more than the live records. What must
//! happen at most once is one atomic step on the server: a replay mark is one
//! script (`SET key 1 NX PX ttl` within its owner's share, a tally of its live marks settled
//! against buckets of expiry of [`SHARE_BUCKET_SECONDS`]: review N3); a cookie binding with its Session's cap is one Lua script; every
//! other record ([`Records`]: Sessions, tokens, device codes, operations) is a hash of its
//! version and JSON, changed by one Lua script that checks every version of a commit before it
//! writes any. Cookie values are never stored, only their SHA-256 (as in memory).
//!
//! A join is one round trip ([`JoinStore`]): the Session's record comes from a local copy
//! (kept [`SESSION_COPY_LIFETIME`], at most [`SESSION_COPIES`]) once it has been read, and the
//! last step is one script that re-checks the record's version, marks the `jti` and binds the
//! cookie, or does none of it. The copy stands for the record only while its version is the
//! store's: a sign-out, an end or any change moves the version, the script answers
//! "moved", and the verifier reads the record again before it decides.
//!
//! Any error talking to Redis is [`StoreError::Unavailable`]: the caller fails closed (503), and
//! the connection manager reconnects on its own when Redis is back.
//!
//! On a Redis Cluster (`redis-cluster://HOST:PORT[,…]`) the same scripts run: every key one of
//! them touches carries its owner's hash tag ([`crate::slot`]), so each is one slot's, on one
//! primary.
//!
//! Redis as operators run it (review N6, N7): `rediss://` over rustls, verified against the
//! system's roots or a private CA ([`RedisOptions::ca_pem`]), never `#insecure`; the password
//! from the caller ([`RedisOptions::password`]: a file or the environment), never needed in the
//! URL; and a refusal at connect when `maxmemory-policy` is anything but `noeviction`, since
//! every other policy may evict a replay mark before its `exp`, and its assertion would then be
//! accepted again. A mark lives until `exp` plus [`IAT_SKEW_SECONDS`] as the *company's* clock
//! reads it (a relative TTL, `PX`): a Redis whose wall clock runs ahead cannot end it early,
//! and a replica whose clock runs up to that skew behind still finds it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::{Clock, SessionId, SystemClock, UnixTime};
use redis::{AsyncCommands as _, Script};

use crate::join_store::{Committed, Freshness, JoinCommit, JoinStore, SeenSession};
use crate::records::{Change, Expect, Records, Stored, Write};
use crate::replay::{REPLAY_PRESSURE, REPLAY_SHARE};
use crate::replay::{ReplayGuard, ReplayKey};
use crate::session::{RecordSessions, SessionRecord};
use crate::share::{Buckets, Owner, SHARE_BUCKET_SECONDS, bucket_end};
use crate::slot::{self, SlotTag};
use crate::store::StoreError;
use crate::verify::IAT_SKEW_SECONDS;
use crate::web_cookie::{BINDINGS_PER_SESSION, Binding, CookieBindings, CookieHash};

mod connection;

use connection::{Connection, cluster_nodes, connect_cluster, connect_one};

/// How long a join may use its local copy of a Session's record before reading it again. The
/// copy decides nothing alone (the join's script re-checks its version), so this bounds only
/// how long a copy no join uses stays in memory.
pub const SESSION_COPY_LIFETIME: Duration = Duration::from_secs(30);
/// How many Sessions' records one process copies at most (the least used go first).
pub const SESSION_COPIES: u64 = 100_000;
/// How many live records one owner may have created in Redis by default: an eighth of the
/// reference company's 2,000,000 in memory.
pub const RECORDS_SHARE: u64 = 250_000;
/// How long a write waits for its replicas (`WAIT`) when [`RedisOptions::wait_replicas`] asks
/// for them, below the connection's response timeout.
pub const WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// A company's records in one Redis database, under one key prefix. Cheap to clone: clones
/// share the connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: Connection,
    prefix: Arc<str>,
    scripts: Arc<Scripts>,
    clock: Arc<dyn Clock>,
    /// How many live replay marks one owner may hold under pressure.
    replay_share: u64,
    /// From how many live marks made through this process the shares bind.
    replay_pressure: u64,
    /// The live marks made through this process (the pressure's reading).
    live_marks: Arc<std::sync::Mutex<Buckets>>,
    /// How many live records (and counts) one owner may have created.
    records_share: u64,
    /// How many replicas must hold a write before it counts as made (0: the primary's word).
    wait_replicas: u32,
    /// Sessions' records as joins last read them, with their versions.
    session_copies: moka::sync::Cache<SessionId, SeenSession>,
}

/// How to reach Redis, beyond its URL.
#[derive(Clone)]
pub struct RedisOptions {
    /// Redis's password (`AUTH`), read by the caller from a file or the environment so that it
    /// is never needed on a command line; it replaces one the URL holds.
    pub password: Option<zeroize::Zeroizing<String>>,
    /// PEM roots that verify a `rediss://` server's certificate (a private CA); the system's
    /// roots when `None`.
    pub ca_pem: Option<Vec<u8>>,
    /// The company's clock, on which replay marks are kept until `exp` plus the skew.
    pub clock: Arc<dyn Clock>,
    /// How many live replay marks one owner (a client's registrable domain) may hold under
    /// pressure (review N3): a client flooding Redis with marks is refused past it (429), and
    /// no one else is.
    pub replay_share: u64,
    /// From how many live marks made through this process the shares bind (issue 42; 0:
    /// always): below it one owner takes what others leave. Counted per process, as the
    /// address shares are (Redis keeps no global count, which on a Cluster would be one hot
    /// key in every join's script): N replicas bind at N times it in all. Size Redis's
    /// `maxmemory` for it.
    pub replay_pressure: u64,
    /// How many live records (Sessions, tokens, codes, operations, counts) one owner may have
    /// created (review N3): past it that owner's new records are refused, and no one else's.
    pub records_share: u64,
    /// How many replicas must hold every write (`WAIT`) before it counts as made: a replay mark
    /// or a confirm that only the primary held is lost with it when a replica takes its place,
    /// and the assertion accepted (or the operation performed) once more. 0 (the default):
    /// the primary's word, one round trip per join; more: a second round trip per write, and a
    /// write no replica acknowledged within [`WAIT_TIMEOUT`] answers unavailable (its mark
    /// stays on the primary: the caller fails closed).
    pub wait_replicas: u32,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            password: None,
            ca_pem: None,
            clock: Arc::new(SystemClock),
            replay_share: REPLAY_SHARE,
            replay_pressure: REPLAY_PRESSURE,
            records_share: RECORDS_SHARE,
            wait_replicas: 0,
        }
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("replay_share", &self.replay_share)
            .field("replay_pressure", &self.replay_pressure)
            .field("records_share", &self.records_share)
            .field("wait_replicas", &self.wait_replicas)
            .finish_non_exhaustive()
    }
}

struct Scripts {
    commit: Script,
    count: Script,
    bind_cookie: Script,
    mark: Script,
    join: Script,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    /// The URL is not a Redis URL (`redis://HOST:PORT/DB`, `rediss://HOST:PORT/DB`).
    #[error("not a Redis URL (redis://HOST:PORT/DB, or rediss://HOST:PORT/DB for TLS)")]
    Url(#[source] redis::RedisError),
    /// The URL turns certificate verification off (`#insecure`).
    #[error("a rediss:// URL with #insecure turns certificate checks off: give the server's CA instead")]
    Insecure,
    /// The CA for `rediss://` is not PEM certificates.
    #[error("the Redis CA is not PEM certificates")]
    Ca(#[source] redis::RedisError),
    /// Redis could not be reached or refused the connection (a wrong password among others).
    #[error("Redis could not be reached, or refused the connection")]
    Connect(#[source] redis::RedisError),
    /// A `redis://` URL names a node of a Redis Cluster: a standalone connection would be
    /// answered `MOVED` for most keys, and every such join with a 503.
    #[error(
        "this Redis is a node of a Redis Cluster: name the cluster as \
         redis-cluster://HOST:PORT[,HOST:PORT...] (rediss-cluster:// for TLS)"
    )]
    Cluster,
    /// A cluster URL is not `redis-cluster://HOST:PORT[,HOST:PORT…]`.
    #[error(
        "not a Redis Cluster URL: redis-cluster://HOST:PORT[,HOST:PORT...] (rediss-cluster:// for TLS), \
         each node a bare HOST:PORT (the password comes from a file or the environment, never the URL)"
    )]
    ClusterUrl,
    /// The key prefix holds `{` or `}`, which would become the hash tag of every key.
    #[error("the Redis key prefix may not contain {{ or }} (Redis Cluster would read them as a hash tag)")]
    Prefix,
    /// Redis may evict keys before they expire.
    #[error(
        "Redis's maxmemory-policy is {policy}: under any policy but noeviction Redis may evict a \
         replay mark before its assertion expires, and the assertion would then be accepted \
         again; set maxmemory-policy noeviction (a full Redis then refuses new joins instead)"
    )]
    EvictionPolicy {
        /// The policy Redis reported.
        policy: String,
    },
}

impl RedisStore {
    /// Connects to `url` (`redis://HOST:PORT/DB`), keeping every key under `prefix` (one per
    /// company sharing the database). The connection reconnects on its own.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, RedisSetupError> {
        Self::connect_with(url, prefix, RedisOptions::default()).await
    }

    /// [`Self::connect`] with a password, a private CA for `rediss://`, and the company's clock.
    /// Refuses a Redis whose `maxmemory-policy` is not `noeviction`. A URL
    /// `redis-cluster://HOST:PORT[,HOST:PORT…]` (or `rediss-cluster://` for TLS) names a Redis
    /// Cluster by some of its nodes: every primary's policy is checked.
    pub async fn connect_with(url: &str, prefix: &str, options: RedisOptions) -> Result<Self, RedisSetupError> {
        if prefix.contains(['{', '}']) {
            return Err(RedisSetupError::Prefix);
        }
        let connection = match cluster_nodes(url) {
            Some(nodes) => Connection::Cluster(connect_cluster(&nodes?, &options).await?),
            None => Connection::One(connect_one(url, &options).await?),
        };
        Self::over(connection, prefix, options).await
    }

    /// The store over an open connection, once Redis's policy (and, for a standalone URL, that
    /// it is no cluster node) is checked.
    async fn over(mut connection: Connection, prefix: &str, options: RedisOptions) -> Result<Self, RedisSetupError> {
        // `INFO memory`, not `CONFIG GET`: managed Redis services often rename or refuse CONFIG.
        for memory in connection.info("memory").await? {
            let policy = memory
                .lines()
                .find_map(|line| line.strip_prefix("maxmemory_policy:"))
                .map(str::trim)
                .unwrap_or("unknown");
            if policy != "noeviction" {
                return Err(RedisSetupError::EvictionPolicy {
                    policy: policy.to_owned(),
                });
            }
        }
        if let Connection::One(_) = connection {
            let cluster = connection.info("cluster").await?;
            if cluster
                .iter()
                .any(|info| info.lines().any(|line| line.trim() == "cluster_enabled:1"))
            {
                return Err(RedisSetupError::Cluster);
            }
        }
        Ok(Self {
            connection,
            clock: options.clock,
            replay_share: options.replay_share,
            replay_pressure: options.replay_pressure,
            live_marks: Arc::default(),
            records_share: options.records_share,
            wait_replicas: options.wait_replicas,
            prefix: Arc::from(prefix),
            scripts: Arc::new(Scripts {
                commit: Script::new(COMMIT),
                count: Script::new(COUNT),
                bind_cookie: Script::new(BIND_COOKIE),
                mark: Script::new(MARK),
                join: Script::new(JOIN),
            }),
            session_copies: moka::sync::Cache::builder()
                .max_capacity(SESSION_COPIES)
                .time_to_live(SESSION_COPY_LIFETIME)
                .build(),
        })
    }

    /// With [`RedisOptions::wait_replicas`], waits until that many replicas hold every write
    /// this connection made (`WAIT`; on a cluster, every primary's, the fewest counting).
    async fn replicated(&self) -> Result<(), StoreError> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        let timeout_ms = u64::try_from(WAIT_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(self.wait_replicas)
            .arg(timeout_ms)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        if acknowledged < i64::from(self.wait_replicas) {
            tracing::warn!(
                acknowledged,
                "a write reached fewer replicas than asked; refused as unavailable"
            );
            return Err(StoreError::Unavailable);
        }
        Ok(())
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
        format!("{}:cookie:{}", self.prefix, cookie_id(cookie))
    }

    fn replay_key(&self, key: &ReplayKey) -> String {
        let tag = SlotTag::of(key.owner());
        slot::key(
            &format!("{}:replay", self.prefix),
            Some(tag),
            &URL_SAFE_NO_PAD.encode(key.as_bytes()),
        )
    }

    /// The records `owner` created in the slot of `redis_key` (a sorted set of their keys by
    /// expiry, in that slot so a script can touch it beside them).
    fn owned_key(&self, owner: Owner, redis_key: &str) -> String {
        format!(
            "{}:owned:{{{}}}{}",
            self.prefix,
            slot::hash_tag(redis_key),
            owner.to_hex()
        )
    }

    /// The owner's tally of live marks; its buckets are this and `:` and their end.
    fn tally_key(&self, owner: Owner) -> String {
        slot::key(
            &format!("{}:share", self.prefix),
            Some(SlotTag::of(owner)),
            &owner.to_hex(),
        )
    }

    fn session_cookies_key(&self, session: &SessionId) -> String {
        slot::key(
            &format!("{}:session-cookies", self.prefix),
            SlotTag::of_session(session),
            session.as_str(),
        )
    }

    /// Adds a replay mark to a script's keys and arguments (see `mark_lua!`): the mark's key
    /// and its owner's tally; the mark's TTL, the share, the company's clock, the end of the
    /// bucket the mark counts in, the prefix of the owner's bucket keys, the window, the
    /// buckets' length and the TTL of a new bucket. The share is unbounded while this process
    /// is below its pressure. Answers until when the mark lives, to count it with
    /// [`Self::marked`] once made.
    fn mark_args(
        &self,
        invocation: &mut redis::ScriptInvocation<'_>,
        key: &ReplayKey,
        expires_at: UnixTime,
    ) -> UnixTime {
        let now = self.clock.now();
        let share = {
            let mut live = self
                .live_marks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            live.settle(now);
            if live.live() >= self.replay_pressure {
                self.replay_share
            } else {
                u64::MAX
            }
        };
        let ttl_ms = mark_ttl_ms(expires_at, now);
        let tally = self.tally_key(key.owner());
        // The bucket the mark expires in, on the company's clock (never past the window the
        // tally is settled over).
        let lives = (ttl_ms / 1_000).min(MAX_MARK_SECONDS);
        let until = UnixTime::from_secs(now.as_secs().saturating_add(lives));
        let ends = bucket_end(until);
        // A bucket must outlive its end by the window: it is subtracted from the tally at the
        // owner's first mark after its end, at most a window later (past that the tally
        // starts again from zero).
        let bucket_ttl_ms = ends
            .saturating_sub(now.as_secs())
            .saturating_add(SHARE_WINDOW_SECONDS + SHARE_BUCKET_SECONDS)
            .saturating_mul(1_000);
        invocation
            .key(self.replay_key(key))
            .key(&tally)
            .arg(ttl_ms)
            .arg(share)
            .arg(now.as_secs())
            .arg(ends)
            .arg(format!("{tally}:"))
            .arg(SHARE_WINDOW_SECONDS)
            .arg(SHARE_BUCKET_SECONDS)
            .arg(bucket_ttl_ms);
        until
    }

    /// From how many live marks made through this process the shares bind.
    pub fn replay_pressure(&self) -> u64 {
        self.replay_pressure
    }

    /// Counts a mark made until `until` towards this process's pressure.
    fn marked(&self, until: UnixTime) {
        self.live_marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(until);
    }

    /// Adds a cookie's binding to a script's keys and arguments (see `bind_lua!`).
    fn bind_args(
        &self,
        invocation: &mut redis::ScriptInvocation<'_>,
        cookie: &CookieHash,
        binding: &Binding,
        until: UnixTime,
    ) {
        invocation
            .key(self.cookie_key(cookie))
            .key(self.session_cookies_key(&binding.session))
            .arg(cookie_id(cookie))
            .arg(binding.session.as_str())
            .arg(binding.epoch)
            .arg(until.as_secs().saturating_add(1).saturating_mul(1_000))
            .arg(BINDINGS_PER_SESSION)
            .arg(format!("{}:cookie:", self.prefix));
    }
}

#[async_trait]
impl ReplayGuard for RedisStore {
    /// One script (`MARK`): the owner's share checked, then `SET key 1 NX PX ttl`: of any
    /// number of replicas marking the same key at once, exactly one sees it set. The mark lives
    /// until `exp` plus [`IAT_SKEW_SECONDS`] as this company's clock reads it (see the module's
    /// doc).
    async fn mark_once(&self, key: ReplayKey, expires_at: UnixTime) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.mark.prepare_invoke();
        let until = self.mark_args(&mut invocation, &key, expires_at);
        let code: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        match code {
            MARKED => {
                self.marked(until);
                self.replicated().await.map(|()| true)
            }
            REPLAYED => Ok(false),
            _ => Err(StoreError::OverShare),
        }
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

    /// One script: every key's version checked, then the owner's share (the records it created
    /// and that still live, less those past their time), then every write applied, or none.
    async fn commit(&self, owner: Owner, changes: &[Change]) -> Result<bool, StoreError> {
        let Some(first) = changes.first() else {
            return Ok(true);
        };
        let mut invocation = self.scripts.commit.prepare_invoke();
        invocation
            .arg(self.owned_key(owner, &self.key("record", &first.key)))
            .arg(self.records_share)
            .arg(self.clock.now().as_secs().saturating_mul(1_000));
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
        match committed {
            COMMITTED => self.replicated().await.map(|()| true),
            MOVED => Ok(false),
            _ => Err(StoreError::Full),
        }
    }

    /// One script: a new count is a record of `owner`'s, within its share. The count's key
    /// carries the owner's hash tag.
    async fn count(&self, owner: Owner, key: &str, until: UnixTime) -> Result<(u64, UnixTime), StoreError> {
        let count_key = slot::key(&format!("{}:count", self.prefix), Some(SlotTag::of(owner)), key);
        let owned = self.owned_key(owner, &count_key);
        let (count, until_ms): (i64, i64) = self
            .scripts
            .count
            .key(&count_key)
            .key(owned)
            .arg(until.as_secs().saturating_mul(1_000))
            .arg(self.records_share)
            .arg(self.clock.now().as_secs().saturating_mul(1_000))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        match u64::try_from(count) {
            Ok(count) => {
                self.replicated().await?;
                Ok((count, UnixTime::from_secs(until_ms / 1_000)))
            }
            Err(_) => Err(StoreError::Full),
        }
    }
}

#[async_trait]
impl CookieBindings for RedisStore {
    async fn bind(&self, cookie: CookieHash, binding: Binding, until: UnixTime) -> Result<(), StoreError> {
        let mut invocation = self.scripts.bind_cookie.prepare_invoke();
        self.bind_args(&mut invocation, &cookie, &binding, until);
        let _: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        self.replicated().await
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
            .map_err(|e| unavailable(&e))?;
        self.replicated().await
    }
}

#[async_trait]
impl JoinStore for RedisStore {
    /// The local copy when there is one and a copy will do; otherwise the record (one `HMGET`),
    /// copied for the next join of the Session.
    async fn session(&self, id: &SessionId, freshness: Freshness) -> Result<Option<SeenSession>, StoreError> {
        if freshness == Freshness::MayBeCopied
            && let Some(copy) = self.session_copies.get(id)
        {
            return Ok(Some(copy));
        }
        let Some(stored) = Records::get(self, &RecordSessions::key(id)).await? else {
            self.session_copies.invalidate(id);
            return Ok(None);
        };
        // A record that no longer reads as a Session (an older shape) is no Session.
        let Ok(record) = serde_json::from_slice::<SessionRecord>(&stored.data) else {
            return Ok(None);
        };
        let seen = SeenSession {
            record,
            stamp: Some(stored.version),
            copied: false,
        };
        self.session_copies.insert(
            id.clone(),
            SeenSession {
                copied: true,
                ..seen.clone()
            },
        );
        Ok(Some(seen))
    }

    /// One script (`JOIN`): the Session's version re-checked, the `jti` marked `NX`, the
    /// cookie bound, or nothing written.
    async fn commit(&self, commit: JoinCommit<'_>) -> Result<Committed, StoreError> {
        let mut invocation = self.scripts.join.prepare_invoke();
        invocation
            .key(self.key("record", &RecordSessions::key(commit.session)))
            .arg(commit.seen.stamp.map(|v| v.to_string()).unwrap_or_default());
        let until = self.mark_args(&mut invocation, &commit.replay, commit.expires_at);
        if let Some(cookie) = &commit.cookie {
            self.bind_args(
                &mut invocation,
                cookie,
                &commit.binding(),
                commit.seen.record.expires_at,
            );
        }
        let code: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| unavailable(&e))?;
        match code {
            MARKED => {
                self.marked(until);
                self.replicated().await.map(|()| Committed::Joined)
            }
            REPLAYED => Ok(Committed::Replayed),
            OVER_SHARE => Err(StoreError::OverShare),
            _ => {
                self.session_copies.invalidate(commit.session);
                Ok(Committed::SessionMoved)
            }
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// What names a cookie's binding after `PREFIX:cookie:`: its hash tag and its hash, as the
/// Session's list of cookies holds it.
fn cookie_id(cookie: &CookieHash) -> String {
    slot::tagged(cookie.tag(), &URL_SAFE_NO_PAD.encode(cookie.as_bytes()))
}

/// How long a replay mark for an assertion expiring at `expires_at` lives from `now`: until
/// `exp` plus [`IAT_SKEW_SECONDS`], and at least a second.
fn mark_ttl_ms(expires_at: UnixTime, now: UnixTime) -> i64 {
    expires_at
        .as_secs()
        .saturating_add(IAT_SKEW_SECONDS)
        .saturating_sub(now.as_secs())
        .saturating_mul(1_000)
        .max(1_000)
}

/// Every Redis error is the store being unavailable: logged by kind, never with a key or value.
fn unavailable(error: &redis::RedisError) -> StoreError {
    tracing::warn!(kind = ?error.kind(), "redis store unavailable");
    StoreError::Unavailable
}

/// KEYS: the records of a commit. ARGV: the committing owner's set of records it created (by
/// expiry, in the commit's slot), its share, now (ms, the company's clock); then four per key:
/// what it expects (`absent`, `any` or a version), what to do (`put`, `delete`, `check`), the
/// JSON and the expiry in ms (for `put`). [`COMMITTED`] when every key was as expected and
/// every write applied; [`MOVED`] or [`OVER_SHARE`] (a new record past the owner's share)
/// with nothing written. A record keeps its creator (`o`, the creator's set) through later
/// versions, and leaves the creator's set when deleted; the set drops what has expired.
const COMMIT: &str = r"
local owned, share, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function arg(i, n) return ARGV[3 + (i - 1) * 4 + n] end
local new = 0
for i, key in ipairs(KEYS) do
  local expect = arg(i, 1)
  local held = redis.call('HGET', key, 'v')
  if expect == 'absent' then
    if held then return 1 end
  elseif expect ~= 'any' then
    if held ~= expect then return 1 end
  end
  if arg(i, 2) == 'put' and not held then new = new + 1 end
end
if new > 0 then
  redis.call('ZREMRANGEBYSCORE', owned, '-inf', now)
  if redis.call('ZCARD', owned) + new > share then return 3 end
end
for i, key in ipairs(KEYS) do
  local what = arg(i, 2)
  if what == 'put' then
    local held = redis.call('HMGET', key, 'v', 'o')
    local creator = held[2] or owned
    redis.call('HSET', key, 'v', tonumber(held[1] or '0') + 1, 'd', arg(i, 3), 'o', creator)
    redis.call('PEXPIREAT', key, arg(i, 4))
    redis.call('ZADD', creator, arg(i, 4), key)
    redis.call('PEXPIREAT', creator, math.max(tonumber(arg(i, 4)), tonumber(redis.call('PEXPIRETIME', creator))))
  elseif what == 'delete' then
    local creator = redis.call('HGET', key, 'o')
    if creator then redis.call('ZREM', creator, key) end
    redis.call('DEL', key)
  end
end
return 0
";

/// What [`COMMIT`] answers (and [`OVER_SHARE`]).
const COMMITTED: i64 = 0;
const MOVED: i64 = 1;

/// KEYS: the count, its owner's set of records it created. ARGV: until (ms) for a new count,
/// the owner's share, now (ms). The count now and until when it lives; `{-1, 0}` (no count
/// made) when a new count is past the owner's share.
const COUNT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then return {-1, 0} end
  redis.call('ZADD', KEYS[2], ARGV[1], KEYS[1])
  redis.call('PEXPIREAT', KEYS[2], math.max(tonumber(ARGV[1]), tonumber(redis.call('PEXPIRETIME', KEYS[2]))))
end
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIREAT', KEYS[1], ARGV[1]) end
return {count, redis.call('PEXPIRETIME', KEYS[1])}
";

/// Binds a cookie: `bind(k, a)` reads the cookie's binding key at `KEYS[k]`, the Session's
/// list of cookies at `KEYS[k + 1]`, and at `ARGV[a]..ARGV[a + 5]` the cookie's hash, the
/// session, the epoch, until (ms), the cap per Session and the prefix of binding keys. The
/// Session's oldest cookies past the cap end. Eight commands for a Session at its cap (the
/// length `RPUSH` answers is counted down, not asked again).
macro_rules! bind_lua {
    () => {
        r"
local function bind(k, a)
  redis.call('HSET', KEYS[k], 'session', ARGV[a + 1], 'epoch', ARGV[a + 2])
  redis.call('PEXPIREAT', KEYS[k], ARGV[a + 3])
  local held = redis.call('RPUSH', KEYS[k + 1], ARGV[a])
  local cap = tonumber(ARGV[a + 4])
  while held > cap do
    local ended = redis.call('LPOP', KEYS[k + 1])
    redis.call('DEL', ARGV[a + 5] .. ended)
    held = held - 1
  end
  redis.call('PEXPIREAT', KEYS[k + 1], ARGV[a + 3])
end
"
    };
}

/// KEYS and ARGV: one cookie's binding at 1 (see [`bind_lua`]).
const BIND_COOKIE: &str = concat!(bind_lua!(), "bind(1, 1)\nreturn 1\n");

/// The longest a mark made now may live: a client assertion issued 30 s ahead that lives 300 s,
/// kept 30 s past its `exp`, plus the skew every mark is kept for.
const MAX_MARK_SECONDS: i64 = pap_shared::JWT_ASSERTION_SKEW
    + pap_shared::MAX_JWT_ASSERTION_LIFETIME
    + pap_shared::JWT_ASSERTION_SKEW
    + IAT_SKEW_SECONDS;

/// [`MAX_MARK_SECONDS`] and one bucket more: once the owner's tally was last settled longer ago
/// than this, every bucket it held has ended.
const SHARE_WINDOW_SECONDS: i64 = MAX_MARK_SECONDS + SHARE_BUCKET_SECONDS;

/// Marks once, within the owner's share. The owner's live marks are a tally (a hash: `n` live
/// marks, buckets settled up to `s`) and a key per bucket of expiry (`PREFIX..end`, how many
/// of the owner's marks expire before `end`): a mark reads the tally, subtracts the buckets
/// that ended since it was settled (at most once per 10 s per owner: a `GETDEL` per ended
/// bucket), and compares. Four commands for a fresh mark (`HMGET`, `SET`, `INCR`, `HINCRBY`),
/// whatever the owner holds.
///
/// `mark(k, a)` reads the mark's key at `KEYS[k]`, the tally at `KEYS[k + 1]`, and at
/// `ARGV[a]..ARGV[a + 7]` the mark's TTL (ms), the share, now (s, the company's clock), the end
/// of the mark's bucket (s), the prefix of the owner's bucket keys, the window (s), the buckets'
/// length (s) and a new bucket's TTL (ms). The bucket keys are not in `KEYS`: they are the
/// tally's, named from it, so they carry its hash tag and lie in its slot of a Redis Cluster,
/// which lets a script touch them. Answers [`MARKED`],
/// [`REPLAYED`] (a held key is a replay whatever the share), or [`OVER_SHARE`] (no mark).
macro_rules! mark_lua {
    () => {
        r"
local function mark(k, a)
  local now, window, length = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local held = redis.call('HMGET', KEYS[k + 1], 'n', 's')
  local n, settled = tonumber(held[1]) or 0, tonumber(held[2])
  local ended = now - now % length
  if settled == nil or settled < ended then
    if settled == nil or ended - settled > window then n, settled = 0, ended end
    while settled < ended do
      settled = settled + length
      n = n - (tonumber(redis.call('GETDEL', ARGV[a + 4] .. settled)) or 0)
    end
    if n < 0 then n = 0 end
    redis.call('HSET', KEYS[k + 1], 'n', n, 's', settled)
    redis.call('PEXPIRE', KEYS[k + 1], (window + 2 * length) * 1000)
  end
  if n >= tonumber(ARGV[a + 1]) then
    if redis.call('EXISTS', KEYS[k]) == 1 then return 1 end
    return 3
  end
  if not redis.call('SET', KEYS[k], 1, 'NX', 'PX', ARGV[a]) then return 1 end
  local bucket = ARGV[a + 4] .. ARGV[a + 3]
  if redis.call('INCR', bucket) == 1 then redis.call('PEXPIRE', bucket, ARGV[a + 7]) end
  redis.call('HINCRBY', KEYS[k + 1], 'n', 1)
  return 0
end
"
    };
}

/// What [`MARK`] and [`JOIN`] answer.
const MARKED: i64 = 0;
const REPLAYED: i64 = 1;
const OVER_SHARE: i64 = 3;

/// KEYS and ARGV: one mark at 1 (see [`mark_lua`]).
const MARK: &str = concat!(mark_lua!(), "return mark(1, 1)\n");

/// A join's last step. KEYS: the Session's record, the replay mark and its owner's tally, then
/// (when a cookie is bound) the binding's two keys. ARGV: the version the record must be at
/// (empty: not checked), the mark's eight (see [`mark_lua`]), then the binding's six (see
/// [`bind_lua`]). 0: joined; 1: replayed; 2: the Session moved; 3: the client's owner is over
/// its share of marks (nothing written but a join).
const JOIN: &str = concat!(
    mark_lua!(),
    bind_lua!(),
    r"
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 2 end
local marked = mark(2, 2)
if marked ~= 0 then return marked end
if #KEYS == 5 then bind(4, 10) end
return 0
"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs redis-server; .ci/run runs it"]
    fn a_mark_lives_until_exp_plus_the_skew_on_the_companys_clock() {
        let exp = UnixTime::from_secs(1_060);
        assert_eq!(mark_ttl_ms(exp, UnixTime::from_secs(1_000)), 65_000);
        assert_eq!(mark_ttl_ms(exp, UnixTime::from_secs(1_064)), 1_000);
        assert_eq!(mark_ttl_ms(exp, UnixTime::from_secs(2_000)), 1_000);
    }

    #[test]
    fn the_share_window_covers_the_longest_mark() {
        // A client assertion issued as far ahead as accepted, living as long as accepted, kept
        // as long past its `exp` as its checks allow: its mark must end inside the window.
        let now = UnixTime::from_secs(1_000);
        let iat = now.plus(pap_shared::JWT_ASSERTION_SKEW);
        let exp = iat.plus(pap_shared::MAX_JWT_ASSERTION_LIFETIME);
        let kept_until = exp.plus(pap_shared::JWT_ASSERTION_SKEW);
        assert_eq!(mark_ttl_ms(kept_until, now) / 1_000, MAX_MARK_SECONDS);
        assert!(bucket_end(now.plus(MAX_MARK_SECONDS)) - bucket_end(now) <= SHARE_WINDOW_SECONDS);
    }

    #[test]
    fn the_options_never_print_the_password() {
        let options = RedisOptions {
            password: Some(zeroize::Zeroizing::new("hunter2-secret".to_owned())),
            ..RedisOptions::default()
        };
        assert!(!format!("{options:?}").contains("hunter2"));
    }
}
