//! Load run: joins per second and latency of the real browser-session route over TLS on
//! 127.0.0.1, at concurrency 1, 8 and 32.
//!
//! Run with `cargo bench -p pap-company --bench join_load`, optionally followed by `--` and:
//! - `JOINS_PER_LEVEL` (default 3000);
//! - `--level N`, repeated: only those concurrencies (a profile of one);
//! - `--log`: `pap-company`'s own log lines, at `info` on stderr, as it runs by default;
//! - `--server-workers N`: the server runtime's worker threads (default: one per core);
//! - `--server-per-core`: thread per core (`pap_net::serve::serve_tls_on_cores`): accepted on
//!   the server's runtime, each connection served on one of as many single-threaded runtimes
//!   as the server's workers, the one with the fewest connections open;
//! - `--store-per-core`: with `--server-per-core`, over Redis, each core's joins go through a
//!   store client made on that core (one Redis connection per core), not one shared client
//!   driven on the server's runtime;
//! - `--redis-on-its-own-core`: see below.
//!
//! The server (the route behind rustls, HTTP/1.1 keep-alive) and the clients
//! share this machine's cores, as a company's front end and its load balancer would not: the
//! figures are a floor. Assertions are signed before the clock starts; each join is one POST
//! answered 303 with a cookie (redirects are not followed).
//!
//! With `--redis-on-its-own-core` (Linux, `taskset`), this process runs on core 0 and every
//! Redis server on core 1: the company and Redis on cores of their own, as a deployment with
//! Redis on its own host has them, rather than three parties sharing two cores.
//!
//! Beside each level: the CPU this process spent per join (client and server together, from
//! `/proc/self/stat`); the server's alone (the server runs on a runtime of its own, and the CPU
//! of its threads is read from `/proc/self/task/TID/stat`: accepting, TLS, HTTP, the route, the
//! stores' clients), the part of it spent in the kernel (`stime`: system calls, and on loopback
//! the TCP stack's work for the packets the server sends), and in raw ES256 verifies (issue 42's goal: at most 1.4 at concurrency 1,
//! 1.25 at 8 and 32), one raw verify timed at the start of the run on this machine (aws-lc,
//! the key parsed once, as `openssl speed` times it); the times per join the server's threads
//! parked and were woken (`voluntary_ctxt_switches` of `/proc/self/task/TID/status`); with
//! `--server-per-core`, the requests each core answered; and over Redis the commands Redis ran per join (`INFO stats`: the ones
//! its scripts ran count too), Redis's own CPU per join (`INFO cpu`) and the time Redis spent
//! in each join's script (`INFO commandstats`); then the round trips per join, counted with
//! `MONITOR` (the commands clients sent; nothing is pipelined), and what one round trip leaves
//! of memory's rate at concurrency 1 (see `one_round_trip_floor`).

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark binary")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pap_shared::CompactJws;
use support::World;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The first number that is not the value of `--level` or `--server-workers`.
    let joins: usize = args
        .windows(2)
        .filter(|pair| pair[0] != "--level" && pair[0] != "--server-workers")
        .find_map(|pair| pair[1].parse().ok())
        .unwrap_or(3_000);
    let own_core = args.iter().any(|a| a == "--redis-on-its-own-core");
    if args.iter().any(|a| a == "--log") {
        // What `pap-company` installs: its log lines at `info` unless RUST_LOG says, on stderr.
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    let chosen: Vec<usize> = args
        .windows(2)
        .filter(|pair| pair[0] == "--level")
        .filter_map(|pair| pair[1].parse().ok())
        .collect();
    if !chosen.is_empty() {
        let _ = LEVELS.set(chosen);
    }
    if own_core {
        // Before the runtime's threads exist: they inherit core 0.
        pin(std::process::id(), "0");
        REDIS_ON_ITS_OWN_CORE.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // The server's runtime, apart from the clients' one: its threads' CPU is the server's.
    let workers = args
        .windows(2)
        .find(|pair| pair[0] == "--server-workers")
        .and_then(|pair| pair[1].parse().ok())
        .unwrap_or_else(available_cores);
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .thread_name("server")
        .on_thread_start(count_as_server)
        .build()
        .unwrap();
    if args.iter().any(|a| a == "--store-per-core") {
        assert!(
            args.iter().any(|a| a == "--server-per-core"),
            "--store-per-core needs --server-per-core: without cores there is one store client"
        );
        STORE_PER_CORE.set(()).unwrap();
    }
    // Thread per core: connections accepted on `server` and served on these.
    let cores = args.iter().any(|a| a == "--server-per-core").then(|| {
        let cores = pap_net::serve::CoreRuntimes::new(
            std::num::NonZeroUsize::new(workers).expect("--server-workers above 0"),
            support::CORE_THREADS,
        )
        .unwrap();
        for core in cores.handles() {
            // Counted from the core's own thread.
            let (counted, done) = std::sync::mpsc::channel();
            core.spawn(async move {
                count_as_server();
                counted.send(()).unwrap();
            });
            done.recv().unwrap();
        }
        cores
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(joins, server.handle().clone(), cores));
}

/// Counts the calling thread as one of the server's.
fn count_as_server() {
    // `PID/task/TID`, this thread's directory under /proc.
    if let Ok(thread) = std::fs::read_link("/proc/thread-self") {
        SERVER_THREADS
            .lock()
            .unwrap()
            .push(std::path::Path::new("/proc").join(thread).join("stat"));
    }
}

/// `--store-per-core`: with `--server-per-core`, each core's joins use a Redis client of the
/// core's own.
static STORE_PER_CORE: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// One raw ES256 verify on this machine, µs, timed at the start of the run.
static RAW_VERIFY_US: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// The `stat` file of every thread the server runs on (with `--server-per-core`, the cores'
/// too; their blocking pools are not counted: nothing on the join path uses them).
static SERVER_THREADS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// CPU time the server's threads have used, in clock ticks of 10 ms: a thread that ended is no
/// longer counted, and the runtimes' threads live for the whole run.
fn server_cpu() -> Cpu {
    let threads = SERVER_THREADS.lock().unwrap();
    threads
        .iter()
        .filter_map(|stat| {
            let mut cpu = cpu_ticks(&std::fs::read_to_string(stat).ok()?);
            cpu.wakeups = std::fs::read_to_string(stat.with_file_name("status")).map_or(0, |s| voluntary_switches(&s));
            Some(cpu)
        })
        .fold(Cpu::default(), |sum, thread| Cpu {
            user: sum.user + thread.user,
            system: sum.system + thread.system,
            wakeups: sum.wakeups + thread.wakeups,
        })
}

/// `voluntary_ctxt_switches` of a `/proc/…/status`: each time the thread parked (nothing to
/// do, or waiting on a lock) and was woken again.
fn voluntary_switches(status: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time spent in user space and in the kernel (system calls, and on loopback the TCP
/// stack's work for the packets a thread sends), and for the server's threads the times they
/// parked and were woken (issue 42: fewer wake-ups per join at concurrency 1).
#[derive(Clone, Copy, Default)]
struct Cpu {
    user: Duration,
    system: Duration,
    wakeups: u64,
}

impl Cpu {
    fn total(self) -> Duration {
        self.user + self.system
    }
}

impl std::ops::Sub for Cpu {
    type Output = Self;

    fn sub(self, earlier: Self) -> Self {
        Self {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
            // A thread that ended between the readings takes its count with it.
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
        }
    }
}

/// `utime` and `stime` of a `/proc/…/stat` line.
fn cpu_ticks(stat: &str) -> Cpu {
    // The fields after the command name (which may hold spaces) start after its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks = |field: usize| Duration::from_millis(fields[field].parse::<u64>().unwrap() * 10);
    Cpu {
        user: ticks(11),
        system: ticks(12),
        wakeups: 0,
    }
}

/// One raw ES256 verification of the world's assertion, with the key parsed once: what a
/// join cannot cost less than.
struct RawVerify {
    key: aws_lc_rs::signature::ParsedPublicKey,
    input: String,
    signature: Vec<u8>,
}

impl RawVerify {
    fn new(world: &World) -> Self {
        use base64::Engine as _;
        let decode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).unwrap();
        let sample = world.assertion();
        let (input, signature) = sample.secret().rsplit_once('.').unwrap();
        let jwk = world.agent.key.public_key().jwk().clone();
        let mut sec1 = vec![0x04];
        sec1.extend(decode(jwk.x.as_deref().unwrap()));
        sec1.extend(decode(jwk.y.as_deref().unwrap()));
        Self {
            key: aws_lc_rs::signature::ParsedPublicKey::new(&aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED, &sec1)
                .unwrap(),
            input: input.to_owned(),
            signature: decode(signature),
        }
    }

    /// µs per verification, the fastest of 50 rounds of 200 on this thread: the machine's
    /// other work only makes a round slower (timed before each level instead, the figure moved
    /// from 57 to 89 µs on this VM while the verify itself does not change).
    fn micros(&self) -> f64 {
        (0..50)
            .map(|_| {
                let began = Instant::now();
                for _ in 0..200 {
                    self.key.verify_sig(self.input.as_bytes(), &self.signature).unwrap();
                }
                began.elapsed().as_secs_f64() * 1e6 / 200.0
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// One level's figures.
struct Level {
    concurrency: usize,
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// This process's CPU per join (client and server), µs.
    cpu_us: f64,
    /// The server's threads' CPU per join, µs.
    server_cpu_us: f64,
    /// The part of it spent in the kernel, µs.
    server_system_us: f64,
    /// The times per join the server's threads parked and were woken.
    server_wakeups: f64,
    /// Requests each core answered (`--server-per-core`: how the joins were spread).
    by_core: Vec<u64>,
    /// Over Redis: what Redis did for the level's joins.
    redis: Option<RedisLevel>,
}

/// What Redis did for one level's joins.
#[derive(Clone)]
struct RedisLevel {
    /// Commands Redis ran per join (a script's own commands counted).
    commands: f64,
    /// Redis's CPU per join (µs).
    cpu_us: f64,
    /// The same, server by server (a cluster's primaries, in the order given).
    cpu_each_us: Vec<f64>,
    /// The time Redis spent in each `EVALSHA`, its commands included (µs, `INFO
    /// commandstats`).
    script_us: f64,
}

/// Whether every Redis server goes to core 1 (this process being on core 0).
static REDIS_ON_ITS_OWN_CORE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pins every thread of process `pid` to `cores` (`taskset -a -p -c`).
fn pin(pid: u32, cores: &str) {
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cores, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(pinned.success(), "taskset -a -p -c {cores} {pid}");
}

/// Moves the Redis servers to core 1 when asked to.
#[cfg(feature = "redis")]
fn place(servers: &[&support::redis_server::RedisServer]) {
    if REDIS_ON_ITS_OWN_CORE.load(std::sync::atomic::Ordering::Relaxed) {
        for server in servers {
            pin(server.pid().unwrap(), "1");
        }
    }
}

/// One store's figures at each concurrency.
type Figures = Vec<Level>;

/// The concurrencies run: 1, 8 and 32 unless `--level` chose.
static LEVELS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();

fn levels_run() -> &'static [usize] {
    LEVELS.get_or_init(|| vec![1, 8, 32])
}

/// The run: the server on `server`'s runtime, or with `cores` accepting there and serving each
/// connection on one of them.
async fn run(joins: usize, server: tokio::runtime::Handle, cores: Option<pap_net::serve::CoreRuntimes>) {
    let pki = support::test_pki(&["shop.example"]);
    // The session lives past the whole run; the clock is the fixture's fixed time.
    let world = Arc::new(World::new());
    let raw_verify_us = RawVerify::new(&world).micros();
    RAW_VERIFY_US.set(raw_verify_us).unwrap();
    let (memory, answered) = support::serve_over_tls_on_cores(&server, cores.clone(), world.app(), &pki).await;
    if REDIS_ON_ITS_OWN_CORE.load(std::sync::atomic::Ordering::Relaxed) {
        println!(
            "join load over TLS on 127.0.0.1 ({joins} joins per level; client and server on core 0, Redis on core 1)"
        );
    } else {
        println!(
            "join load over TLS on 127.0.0.1 ({joins} joins per level, {} cores, client and server sharing them)",
            available_cores()
        );
    }
    if let Some(cores) = &cores {
        println!(
            "the server: accepting on a multi-threaded runtime, each connection served on one of {} single-threaded runtimes (the one with the fewest open){}",
            cores.count(),
            if STORE_PER_CORE.get().is_some() {
                "; over Redis, each with a store client of its own"
            } else {
                ""
            }
        );
    }
    println!("one raw ES256 verify (aws-lc, the key parsed once): {raw_verify_us:.1} µs");
    let memory_figures = levels(&memory, &answered, joins, None, || world.assertion()).await;
    print_figures("in memory", &memory_figures, None);

    #[cfg(feature = "redis")]
    {
        use pap_company::stores::RedisOptions;
        use support::redis_server::{RedisCluster, RedisServer};
        let bench = OverRedis {
            world: &world,
            server: &server,
            cores: &cores,
            pki: &pki,
            joins,
            memory: &memory_figures,
        };
        let server = RedisServer::start();
        let session = bench
            .run(
                "Redis",
                &server.url(),
                RedisOptions::default(),
                &[&server],
                &[],
                &Arc::default(),
            )
            .await;
        memory_per_join(&server.url(), &session).await;
        drop(server);

        // Every write held by a replica before it counts (`wait_replicas` 1): a second round
        // trip per join, to a primary with one replica.
        let primary = RedisServer::start();
        let replica = RedisServer::start_replica_of(&primary);
        let options = RedisOptions {
            wait_replicas: 1,
            ..RedisOptions::default()
        };
        bench
            .run(
                "Redis, every write held by a replica (WAIT 1; Redis's CPU: primary and replica)",
                &primary.url(),
                options,
                &[&primary],
                &[&replica],
                &Arc::default(),
            )
            .await;
        drop((primary, replica));

        // The same on a Redis Cluster of three primaries: the world's one agent is one owner,
        // so its joins all go to the primary of its slot (the others idle).
        let cluster = RedisCluster::start();
        let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
        bench
            .run(
                "Redis Cluster (3 primaries; one owner, so one primary)",
                &cluster.url(),
                RedisOptions::default(),
                &nodes,
                &[],
                &Arc::default(),
            )
            .await;

        // Joins spread over agents of many owners (each its own registrable domain, so its own
        // hash tag): their slots, and so their work, spread over the three primaries. Issue
        // 42 asks this of a cluster: Redis's CPU shared out by primary, printed per level.
        let others: Arc<Vec<support::Agent>> = Arc::new(
            (1..SPREAD_OWNERS)
                .map(|n| support::Agent::new(&format!("https://agent-{n}.example/agent.json")))
                .collect(),
        );
        let cluster = RedisCluster::start();
        let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
        bench
            .run(
                &format!("Redis Cluster (3 primaries; joins of {SPREAD_OWNERS} owners in turn)"),
                &cluster.url(),
                RedisOptions::default(),
                &nodes,
                &[],
                &others,
            )
            .await;
    }
}

/// Owners the spread cluster run joins for, in turn: enough that each primary holds some.
#[cfg(feature = "redis")]
const SPREAD_OWNERS: usize = 48;

/// What every run over a Redis shares: the world, its certificates, the joins per level and the
/// in-memory figures each is set beside.
#[cfg(feature = "redis")]
struct OverRedis<'a> {
    world: &'a Arc<World>,
    /// The server's runtime, where the store's connections are made and driven (unless
    /// `--store-per-core`).
    server: &'a tokio::runtime::Handle,
    /// With `--server-per-core`, the runtimes the connections are served on: a join there waits
    /// for `server`'s thread to read Redis's answer (unless `--store-per-core` gives each core a
    /// store client of its own).
    cores: &'a Option<pap_net::serve::CoreRuntimes>,
    pki: &'a support::TestPki,
    joins: usize,
    memory: &'a Figures,
}

#[cfg(feature = "redis")]
impl OverRedis<'_> {
    /// The route over the Redis at `url` with `options` (its `primaries`, which clients talk to,
    /// and their `replicas`, all moved to core 1 when asked): joins at each level, printed as
    /// `label` beside memory (Redis's commands and CPU over every server), then the round trips
    /// of 200 joins counted with `MONITOR` on every primary. The joins are the world's agent's,
    /// or, with `others`, its and theirs in turn, each to a Session of its own. The world's
    /// agent's Session.
    async fn run(
        &self,
        label: &str,
        url: &str,
        options: pap_company::stores::RedisOptions,
        primaries: &[&support::redis_server::RedisServer],
        replicas: &[&support::redis_server::RedisServer],
        others: &Arc<Vec<support::Agent>>,
    ) -> pap_shared::SessionId {
        let servers: Vec<_> = primaries.iter().chain(replicas).copied().collect();
        place(&servers);
        // With `WAIT` a join makes two round trips: the floor of one says nothing of it.
        let one_round_trip = options.wait_replicas == 0;
        let (app, sessions) = match self.cores.as_ref().filter(|_| STORE_PER_CORE.get().is_some()) {
            None => self
                .server
                .spawn(over_redis(self.world.clone(), url.to_owned(), options, others.clone()))
                .await
                .unwrap(),
            // Each core its own store client, made (and so driven) on that core's thread; the
            // joins' Sessions are the first core's (every core reads them from Redis).
            Some(cores) => {
                let mut apps = Vec::new();
                let mut first = None;
                for core in cores.handles() {
                    let made = over_redis(self.world.clone(), url.to_owned(), options.clone(), others.clone());
                    let (app, sessions) = core.spawn(made).await.unwrap();
                    apps.push(app);
                    first.get_or_insert(sessions);
                }
                (support::app_of_each_core(apps), first.unwrap())
            }
        };
        let (client, answered) = support::serve_over_tls_on_cores(self.server, self.cores.clone(), app, self.pki).await;
        let meter = RedisMeter::connect(&servers).await;
        let turn = std::sync::atomic::AtomicUsize::new(0);
        let assertion = || match turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % sessions.len() {
            0 => self.world.with("session_id", serde_json::json!(sessions[0].as_str())),
            n => self.world.assertion_of(&others[n - 1], &sessions[n]),
        };
        let figures = levels(&client, &answered, self.joins, Some(&meter), assertion).await;
        print_figures(label, &figures, Some(self.memory));
        round_trips(&client, primaries, 200, assertion).await;
        if one_round_trip {
            one_round_trip_floor(&meter, self.memory, &figures).await;
        }
        sessions[0].clone()
    }
}

/// The route over Redis with `options`: Sessions, replay marks and cookie bindings in `url`, a
/// Session of the world's user with the world's agent and with each of `others` started there,
/// in that order.
#[cfg(feature = "redis")]
async fn over_redis(
    world: Arc<World>,
    url: String,
    options: pap_company::stores::RedisOptions,
    others: Arc<Vec<support::Agent>>,
) -> (axum::Router, Vec<pap_shared::SessionId>) {
    let store = pap_company::stores::RedisStore::connect_with(&url, "bench", options)
        .await
        .unwrap();
    let (state, _, sessions) = world.over_redis_with(&store, &others).await;
    let route = axum::Router::new().merge(pap_company::route::browser_session_router());
    (route.with_state(state), sessions)
}

/// What one round trip costs a join at concurrency 1, and so the most of memory's rate a
/// join that waits for one can reach here: a `PING` to the (first) primary over the redis
/// crate's multiplexed connection (the one the store's connections are built on), 2,000 one
/// after the other from a task of this process's runtime, as a request's handler waits, with
/// the route idle; plus the time Redis spent in each `EVALSHA` of the c=1 level (`INFO
/// commandstats`). A join over Redis is a join in memory plus at least these two, so at c=1 it
/// can reach at most `memory / (memory + ping + script)` of memory's rate with this client.
#[cfg(feature = "redis")]
async fn one_round_trip_floor(meter: &RedisMeter, memory: &Figures, figures: &Figures) {
    const PINGS: u32 = 2_000;
    let mut primary = meter.0[0].clone();
    // On a worker, as a handler runs: `block_on`'s own thread would add a hop to the workers
    // and back on every reply.
    let ping_us = tokio::spawn(async move {
        let began = Instant::now();
        for _ in 0..PINGS {
            redis::cmd("PING").query_async::<String>(&mut primary).await.unwrap();
        }
        began.elapsed().as_secs_f64() * 1e6 / f64::from(PINGS)
    })
    .await
    .unwrap();
    let (Some(memory), Some(redis)) = (memory.first(), figures.first()) else {
        return;
    };
    let Some(script_us) = redis.redis.as_ref().map(|r| r.script_us) else {
        return;
    };
    let memory_us = 1e6 / memory.rate;
    println!(
        "one round trip's floor at c=1: a join in memory {memory_us:.0} µs + PING {ping_us:.1} µs + the script's \
         {script_us:.1} µs in Redis = at most {:.0} % of memory's rate (measured {:.0} %)",
        memory_us / (memory_us + ping_us + script_us) * 100.0,
        redis.rate / memory.rate * 100.0
    );
}

/// The round trips of `joins` joins one after the other, as Redis's `MONITOR` saw them (each
/// command a client sent; the commands a script ran are not round trips).
#[cfg(feature = "redis")]
async fn round_trips(
    client: &reqwest::Client,
    servers: &[&support::redis_server::RedisServer],
    joins: usize,
    assertion: impl Fn() -> CompactJws,
) {
    let assertions: Vec<CompactJws> = (0..joins).map(|_| assertion()).collect();
    let mut monitors: Vec<_> = servers
        .iter()
        .map(|server| support::redis_server::Monitor::start(server))
        .collect();
    load(client, assertions, 1).await;
    let commands: Vec<String> = monitors
        .iter_mut()
        .flat_map(support::redis_server::Monitor::client_commands)
        .collect();
    let mut by_name = std::collections::BTreeMap::<&str, usize>::new();
    for command in &commands {
        *by_name.entry(command.as_str()).or_default() += 1;
    }
    println!(
        "Redis round trips per join (MONITOR, {joins} joins): {:.2} {by_name:?}",
        commands.len() as f64 / joins as f64
    );
}

/// What one live join holds in Redis: a replay mark and a cookie binding (`MEMORY USAGE`); the
/// Session's list of cookies is capped at 16 and shared by its joins.
#[cfg(feature = "redis")]
async fn memory_per_join(url: &str, session: &pap_shared::SessionId) {
    let mut connection = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let usage = |pattern: &'static str| {
        let mut connection = connection.clone();
        async move {
            let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(0)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut connection)
                .await
                .unwrap();
            let key = keys.first().cloned().unwrap_or_default();
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .query_async::<Option<u64>>(&mut connection)
                .await
                .unwrap()
                .unwrap_or(0)
        }
    };
    let replay = usage("bench:replay:*").await;
    let cookie = usage("bench:cookie:*").await;
    let session: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(format!(
            "bench:record:{}",
            pap_company::stores::RecordSessions::key(session)
        ))
        .query_async::<Option<u64>>(&mut connection)
        .await
        .unwrap()
        .unwrap_or(0);
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut connection).await.unwrap();
    println!(
        "Redis memory per live join: replay mark {replay} B + cookie binding {cookie} B = {} B (a Session's record: {session} B; {keys} keys now)",
        replay + cookie
    );
}

/// The run at each of the levels (`levels_run`): `joins` fresh assertions each; over Redis at `redis`, what
/// Redis did for them.
async fn levels(
    client: &reqwest::Client,
    answered: &[std::sync::atomic::AtomicU64],
    joins: usize,
    redis: Option<&RedisMeter>,
    assertion: impl Fn() -> CompactJws,
) -> Figures {
    let mut figures = Vec::new();
    for &concurrency in levels_run() {
        let assertions: Vec<CompactJws> = (0..joins).map(|_| assertion()).collect();
        let redis_before = match redis {
            Some(meter) => Some(meter.read().await),
            None => None,
        };
        let (cpu_before, server_before) = (process_cpu(), server_cpu());
        let answered_before = answered_by_core(answered);
        let (rate, p50, p99) = load(client, assertions, concurrency).await;
        let by_core = answered_by_core(answered)
            .iter()
            .zip(answered_before)
            .map(|(after, before)| after - before)
            .collect();
        let per_join = |spent: Duration| spent.as_secs_f64() * 1e6 / joins as f64;
        let cpu_us = per_join(process_cpu() - cpu_before);
        let server = server_cpu() - server_before;
        let (server_cpu_us, server_system_us) = (per_join(server.total()), per_join(server.system));
        let server_wakeups = server.wakeups as f64 / joins as f64;
        let redis = match (redis, redis_before) {
            (Some(meter), Some(before)) => {
                let after = meter.read().await;
                // The first reading's own INFOs are counted by the second.
                let commands = (after.commands - before.commands - meter.servers()) as f64;
                let scripts = (after.scripts - before.scripts) as f64;
                Some(RedisLevel {
                    commands: commands / joins as f64,
                    cpu_us: (after.cpu - before.cpu) * 1e6 / joins as f64,
                    cpu_each_us: after
                        .cpu_each
                        .iter()
                        .zip(&before.cpu_each)
                        .map(|(after, before)| (after - before) * 1e6 / joins as f64)
                        .collect(),
                    script_us: (after.script_usec - before.script_usec) as f64 / scripts.max(1.0),
                })
            }
            _ => None,
        };
        figures.push(Level {
            concurrency,
            rate,
            p50,
            p99,
            cpu_us,
            server_cpu_us,
            server_system_us,
            server_wakeups,
            by_core,
            redis,
        });
    }
    figures
}

fn print_figures(store: &str, figures: &Figures, against: Option<&Figures>) {
    println!("{store}:");
    println!(
        "{:>11} {:>10} {:>10} {:>10} {:>14} {:>17} {:>16} {:>19} {:>16} {:>20} {:>18} {:>17}",
        "concurrency",
        "joins/s",
        "p50 ms",
        "p99 ms",
        "CPU µs/join",
        "server µs/join",
        "of it in kernel",
        "server/raw verify",
        "wake-ups/join",
        "Redis cmds run/join",
        "Redis CPU µs/join",
        "µs in EVALSHA"
    );
    for (i, level) in figures.iter().enumerate() {
        let share = against
            .and_then(|a| a.get(i))
            .map(|base| format!("  ({:.0} % of in memory)", level.rate / base.rate * 100.0))
            .unwrap_or_default();
        let (commands, redis_cpu, script) = level
            .redis
            .as_ref()
            .map(|r| {
                (
                    format!("{:.2}", r.commands),
                    format!("{:.1}", r.cpu_us),
                    format!("{:.1}", r.script_us),
                )
            })
            .unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
        println!(
            "{:>11} {:>10.0} {:>10.2} {:>10.2} {:>14.1} {:>17.1} {:>16.1} {:>18.2}x {:>16.2} {commands:>20} {redis_cpu:>18} {script:>17}{share}",
            level.concurrency,
            level.rate,
            millis(level.p50),
            millis(level.p99),
            level.cpu_us,
            level.server_cpu_us,
            level.server_system_us,
            level.server_cpu_us / RAW_VERIFY_US.get().copied().unwrap_or(f64::NAN),
            level.server_wakeups,
        );
        if !level.by_core.is_empty() {
            let each: Vec<String> = level.by_core.iter().map(u64::to_string).collect();
            println!("{:>11} requests answered, core by core: {}", "", each.join(" / "));
        }
        if let Some(each) = level
            .redis
            .as_ref()
            .map(|r| &r.cpu_each_us)
            .filter(|each| each.len() > 1)
        {
            let each: Vec<String> = each.iter().map(|us| format!("{us:.1}")).collect();
            println!("{:>11} Redis CPU µs/join, server by server: {}", "", each.join(" / "));
        }
    }
}

/// How many requests each core has answered so far (none without cores).
fn answered_by_core(answered: &[std::sync::atomic::AtomicU64]) -> Vec<u64> {
    answered
        .iter()
        .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
}

/// CPU time this process has used (user and system, every thread): `/proc/self/stat`'s
/// `utime` and `stime`, in clock ticks of 10 ms.
fn process_cpu() -> Duration {
    cpu_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap()).total()
}

/// Reads the count of commands run and the CPU seconds of every Redis server (each primary
/// of a cluster), summed, over connections of its own made before the run (so their
/// handshakes are not counted).
#[cfg(feature = "redis")]
struct RedisMeter(Vec<redis::aio::MultiplexedConnection>);

#[cfg(feature = "redis")]
impl RedisMeter {
    async fn connect(servers: &[&support::redis_server::RedisServer]) -> Self {
        let mut connections = Vec::new();
        for server in servers {
            let url = format!("redis://127.0.0.1:{}/0", server.port);
            let connection = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            connections.push(connection);
        }
        Self(connections)
    }

    /// How many servers a reading asks (each counts the reading's `INFO` in the next).
    fn servers(&self) -> u64 {
        self.0.len() as u64
    }

    /// Commands run, CPU seconds and `EVALSHA`s run and their µs, summed over every server.
    async fn read(&self) -> Reading {
        let mut reading = Reading::default();
        for connection in &self.0 {
            let info: String = redis::cmd("INFO")
                .arg("all")
                .query_async(&mut connection.clone())
                .await
                .unwrap();
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                    .unwrap()
                    .trim()
                    .to_owned()
            };
            reading.commands += field("total_commands_processed").parse::<u64>().unwrap();
            let cpu = field("used_cpu_user").parse::<f64>().unwrap() + field("used_cpu_sys").parse::<f64>().unwrap();
            reading.cpu += cpu;
            reading.cpu_each.push(cpu);
            // `cmdstat_evalsha:calls=N,usec=U,...`, once a script ran there.
            if let Some(stats) = info.lines().find_map(|line| line.strip_prefix("cmdstat_evalsha:")) {
                let stat = |name: &str| -> u64 {
                    stats
                        .split(',')
                        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                reading.scripts += stat("calls");
                reading.script_usec += stat("usec");
            }
        }
        reading
    }
}

/// One reading of [`RedisMeter`], over every server.
#[derive(Default)]
struct Reading {
    commands: u64,
    cpu: f64,
    /// Each server's CPU seconds, in the meter's order.
    cpu_each: Vec<f64>,
    scripts: u64,
    script_usec: u64,
}

#[cfg(not(feature = "redis"))]
enum RedisMeter {}

#[cfg(not(feature = "redis"))]
impl RedisMeter {
    fn servers(&self) -> u64 {
        match *self {}
    }

    async fn read(&self) -> Reading {
        match *self {}
    }
}

/// Posts every assertion at `concurrency`, each answered 303: joins/s, p50, p99.
async fn load(client: &reqwest::Client, assertions: Vec<CompactJws>, concurrency: usize) -> (f64, Duration, Duration) {
    let joins = assertions.len();
    let queue = Arc::new(std::sync::Mutex::new(assertions));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, queue) = (client.clone(), queue.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let Some(assertion) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let began = Instant::now();
                    let response = client
                        .post("https://shop.example/poppy/browser-session")
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(format!("assertion={}", assertion.secret()))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), reqwest::StatusCode::SEE_OTHER);
                    latencies.push(began.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(joins);
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    let wall = start.elapsed();
    latencies.sort();
    (
        joins as f64 / wall.as_secs_f64(),
        percentile(&latencies, 50),
        percentile(&latencies, 99),
    )
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
