//! A real `redis-server` (Debian's package) on a free loopback port, for the tests of the Redis
//! stores: started and stopped by the test, ready when it says so.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

/// How long redis-server may take to say it is ready.
const READY_DEADLINE: Duration = Duration::from_secs(10);

/// How many times a server on free ports is started on others when it could not listen on
/// those it was given (another process took one between `free_port` and its bind).
const PORT_ATTEMPTS: usize = 5;

/// The last lines a server printed, kept to say why it ended.
const LINES_KEPT: usize = 20;

/// Where a server listens.
#[derive(Clone, Copy)]
enum Listen {
    /// On this port (a restart, on the port it had).
    On(u16),
    /// On free ports, picked again at each attempt; with a cluster bus port of its own (not
    /// left at port + 10,000: past 65,535 for a high free port, or another test's).
    Free { cluster_bus: bool },
}

/// What a redis-server says on its log that a test waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Said {
    /// "Ready to accept connections".
    Ready,
    /// "Cluster state changed: ok": the node serves every slot.
    ClusterOk,
    /// "MASTER <-> REPLICA sync: Finished with success": a replica holds its primary's data.
    InSync,
    /// Its log ended: the process exited.
    Ended,
}

/// A running redis-server, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// What it says on its log (standard output), as it says it.
    says: Mutex<mpsc::Receiver<Said>>,
    /// The last [`LINES_KEPT`] lines it printed.
    printed: std::sync::Arc<Mutex<std::collections::VecDeque<String>>>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    aof: bool,
    /// Further arguments (a password, a policy, TLS, its cluster bus port).
    extra: Vec<String>,
    /// `rediss://` on `port` (the plain port is off).
    tls: bool,
    /// Whether dropping it leaves its directory (handed on to its restarted self).
    keep_dir: bool,
}

impl RedisServer {
    /// A server with no persistence.
    pub fn start() -> Self {
        Self::launch(Listen::Free { cluster_bus: false }, &scratch_dir(), false, &[], false)
    }

    /// A server with no persistence and these further arguments (`--requirepass`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::launch(
            Listen::Free { cluster_bus: false },
            &scratch_dir(),
            false,
            &extra.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>(),
            false,
        )
    }

    /// A server that speaks only TLS, with this certificate chain and key (PEM files), its
    /// clients unauthenticated.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Self {
        let extra = [
            "--tls-cert-file".to_owned(),
            cert.display().to_string(),
            "--tls-key-file".to_owned(),
            key.display().to_string(),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        Self::launch(Listen::Free { cluster_bus: false }, &scratch_dir(), false, &extra, true)
    }

    /// A directory of the server's own, for files a test hands it (certificates).
    pub fn scratch() -> PathBuf {
        scratch_dir()
    }

    /// A server that appends every write to a file in its directory (AOF), so a restart keeps
    /// what it held.
    pub fn start_persistent() -> Self {
        Self::launch(Listen::Free { cluster_bus: false }, &scratch_dir(), true, &[], false)
    }

    /// Starts a server and waits until it is ready. On free ports, a server that ended before
    /// it was ready (a port taken under it) is started again on others, up to
    /// [`PORT_ATTEMPTS`] times; the test fails with what each attempt printed last.
    fn launch(listen: Listen, dir: &std::path::Path, aof: bool, extra: &[String], tls: bool) -> Self {
        let mut ended = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let (port, args) = match listen {
                Listen::On(port) => (port, extra.to_vec()),
                Listen::Free { cluster_bus } => {
                    let mut args = extra.to_vec();
                    if cluster_bus {
                        args.extend(["--cluster-port".to_owned(), free_port().to_string()]);
                    }
                    (free_port(), args)
                }
            };
            let mut server = Self::spawn(port, dir.to_path_buf(), aof, args, tls);
            match server.waits_until_it_says_or_ends(Said::Ready, Instant::now() + READY_DEADLINE) {
                Ok(()) => return server,
                Err(printed) => {
                    // The directory serves the next attempt.
                    server.keep_dir = true;
                    ended.push(format!("port {port}: {printed}"));
                    if matches!(listen, Listen::On(_)) {
                        break;
                    }
                }
            }
        }
        panic!("redis-server ended before it was ready:\n{}", ended.join("\n"));
    }

    /// Spawns redis-server with its log read as it comes.
    fn spawn(port: u16, dir: PathBuf, aof: bool, extra: Vec<String>, tls: bool) -> Self {
        let ports: [String; 4] = if tls {
            ["--port".into(), "0".into(), "--tls-port".into(), port.to_string()]
        } else {
            ["--port".into(), port.to_string(), "--tls-port".into(), "0".into()]
        };
        let mut child = Command::new("redis-server")
            .args(&ports)
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(&extra)
            .args(["--appendonly", if aof { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (Debian's redis-server package; .ci/run installs it)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (said, says) = mpsc::channel();
        let printed = std::sync::Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let kept = printed.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                {
                    let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if kept.len() == LINES_KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(line.clone());
                }
                let event = [
                    ("Ready to accept connections", Said::Ready),
                    ("Cluster state changed: ok", Said::ClusterOk),
                    ("MASTER <-> REPLICA sync: Finished with success", Said::InSync),
                ]
                .into_iter()
                .find_map(|(text, event)| line.contains(text).then_some(event));
                if let Some(event) = event
                    && said.send(event).is_err()
                {
                    return;
                }
            }
            let _ = said.send(Said::Ended);
        });
        Self {
            child: Some(child),
            says: Mutex::new(says),
            printed,
            port,
            dir,
            aof,
            extra,
            tls,
            keep_dir: false,
        }
    }

    /// A replica of `primary`, once it says it is in sync with it.
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        replica.waits_until_it_says(Said::InSync, Instant::now() + READY_DEADLINE);
        // In sync is not yet counted: the primary streams to a replica (and counts it for
        // `WAIT`) only from the replica's first `REPLCONF ACK`, which its log does not show.
        // `WAIT 1` blocks until that acknowledgement, within the deadline.
        let deadline_ms = READY_DEADLINE.as_millis().to_string();
        let acked = Command::new("redis-cli")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "WAIT",
                "1",
                &deadline_ms,
            ])
            .output()
            .expect("redis-cli comes with redis-server (Debian's redis-tools)");
        assert_eq!(
            String::from_utf8_lossy(&acked.stdout).trim(),
            "1",
            "the primary on port {} never counted its replica",
            primary.port
        );
        replica
    }

    /// Waits until the server says `what` on its log (or has said it since it was last asked),
    /// failing the test at `deadline` or when it ends first, with what it printed last.
    pub fn waits_until_it_says(&self, what: Said, deadline: Instant) {
        if let Err(printed) = self.waits_until_it_says_or_ends(what, deadline) {
            panic!(
                "redis-server on port {} ended before it said {what:?}: {printed}",
                self.port
            );
        }
    }

    /// Waits until the server says `what`: `Err` with the lines it printed last when it ended
    /// first; the test fails at `deadline`.
    fn waits_until_it_says_or_ends(&self, what: Said, deadline: Instant) -> Result<(), String> {
        let says = self.says.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match says.recv_timeout(left) {
                Ok(said) if said == what => return Ok(()),
                Ok(Said::Ended) => return Err(self.printed()),
                Ok(_) => {}
                Err(_) => panic!(
                    "redis-server on port {} did not say {what:?} in time; it printed last: {}",
                    self.port,
                    self.printed()
                ),
            }
        }
    }

    /// The lines it printed last, one string.
    fn printed(&self) -> String {
        let printed = self.printed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        printed.iter().map(String::as_str).collect::<Vec<_>>().join(" | ")
    }

    /// `redis://127.0.0.1:PORT/0`, or `rediss://localhost:PORT/0` for a TLS server (its
    /// certificate names `localhost`).
    pub fn url(&self) -> String {
        if self.tls {
            format!("rediss://localhost:{}/0", self.port)
        } else {
            format!("redis://127.0.0.1:{}/0", self.port)
        }
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (as a crash would: no shutdown save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        let again = Self::launch(Listen::On(self.port), &self.dir, self.aof, &self.extra, self.tls);
        let mut before = std::mem::replace(self, again);
        // Its directory is the new server's now.
        before.keep_dir = true;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scratch_dir() -> PathBuf {
    // Numbered, not named by a free port: two servers started at once in one process could be
    // handed the same free port number, then share a directory, and the second of two cluster
    // nodes refuses the first's locked nodes.conf (CI run 62, on every retry in that directory).
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pap-redis-{}-{n}", std::process::id()));
    // Left by an earlier process that had this pid: nothing of it belongs to this server.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// `redis-cli MONITOR` on a server: every command Redis runs, as it runs it. A client's own
/// commands are its round trips (nothing here pipelines); the commands a script runs are shown
/// apart (`[0 lua]`) and not counted.
pub struct Monitor {
    child: Child,
    lines: mpsc::Receiver<String>,
    port: u16,
    marks: u32,
}

impl Monitor {
    /// Watches `server` from now on (once `MONITOR` has answered `OK`).
    pub fn start(server: &RedisServer) -> Self {
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "monitor"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli comes with redis-server (Debian's redis-tools)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let ok = lines.recv_timeout(READY_DEADLINE).expect("MONITOR answered");
        assert_eq!(ok, "OK", "MONITOR's first line");
        Self {
            child,
            lines,
            port: server.port,
            marks: 0,
        }
    }

    /// The names of the commands clients sent since the last call (or the start), in order:
    /// read until a marker this call sends (`ECHO`) comes through, so nothing is waited for
    /// by time.
    pub fn client_commands(&mut self) -> Vec<String> {
        self.marks += 1;
        let marker = format!("pap-monitor-mark-{}", self.marks);
        let echoed = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "echo", &marker])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(echoed.success());
        let mut commands = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(READY_DEADLINE)
                .expect("the marker came through");
            if line.contains(&marker) {
                // redis-cli's own connection handshake (if any) precedes its ECHO.
                commands.retain(|c: &String| c != "COMMAND" && c != "CLIENT");
                return commands;
            }
            // `1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "…" …`; script commands: `[0 lua]`.
            let Some((source, command)) = line.split_once("] ") else {
                continue;
            };
            if source.ends_with(" lua") {
                continue;
            }
            let name = command.split('"').nth(1).unwrap_or_default().to_ascii_uppercase();
            commands.push(name);
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a new (or restarted) cluster may take to agree on its slots.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

/// A real Redis Cluster of three primaries (a replica each, when asked) on free loopback ports, created with
/// `redis-cli --cluster create` as an operator would, each node killed when dropped.
pub struct RedisCluster {
    /// The nodes: three primaries, each owning a third of the slots, and their replicas.
    pub nodes: Vec<RedisServer>,
    password: Option<String>,
    /// When the nodes speak only TLS: the directory of their certificates and CA, removed when
    /// the cluster is dropped.
    certificates: Option<PathBuf>,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::kill);
        if let Some(dir) = &self.certificates {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The CA's file in a TLS cluster's directory of certificates.
const CA_FILE: &str = "ca.pem";

/// A throwaway CA and one certificate for every node of a TLS cluster, written to `dir`: the
/// certificate names 127.0.0.1 (the address the nodes announce, which clients then check) and
/// serves both ends of a TLS connection, as the cluster bus has a node verify the other's as a
/// client's. Returns the certificate, its key and the CA.
fn cluster_certificates(dir: &std::path::Path) -> [PathBuf; 3] {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // Names of their own: with rcgen's one default name for both, OpenSSL (the nodes, redis-cli)
    // takes the node's certificate for a self-signed one.
    ca.distinguished_name.push(
        rcgen::DnType::CommonName,
        "PAP bridge test Redis cluster CA (throwaway)",
    );
    let ca = ca.self_signed(&ca_key).expect("a CA");
    let node_key = KeyPair::generate().expect("a key");
    let mut node = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("node parameters");
    node.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    node.distinguished_name
        .push(rcgen::DnType::CommonName, "a Redis Cluster node");
    let node = node.signed_by(&node_key, &ca, &ca_key).expect("a node certificate");
    let files = [dir.join("node.pem"), dir.join("node-key.pem"), dir.join(CA_FILE)];
    for (file, text) in files.iter().zip([node.pem(), node_key.serialize_pem(), ca.pem()]) {
        std::fs::write(file, text).expect("a certificate file");
    }
    files
}

impl RedisCluster {
    /// Three primaries, ready once every node says `cluster_state:ok`.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Three primaries started with these further arguments each (`--requirepass`, a policy).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::make(extra, 0, None)
    }

    /// Three primaries with a replica each (six nodes): a primary killed is replaced by its
    /// replica.
    pub fn start_with_replicas() -> Self {
        Self::make(&[], 1, None)
    }

    /// Three primaries that speak only TLS, to clients and on the cluster bus, with a
    /// throwaway CA of their own ([`Self::ca_pem`]); clients unauthenticated.
    pub fn start_tls() -> Self {
        let dir = scratch_dir();
        let files = cluster_certificates(&dir);
        let [cert, key, ca] = files.map(|f| f.display().to_string());
        let extra = [
            "--tls-cluster",
            "yes",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ];
        Self::make(&extra, 0, Some(dir))
    }

    /// The CA that signed a TLS cluster's nodes (PEM).
    pub fn ca_pem(&self) -> Option<String> {
        let dir = self.certificates.as_ref()?;
        Some(std::fs::read_to_string(dir.join(CA_FILE)).expect("the cluster's CA"))
    }

    /// The cluster, its nodes started with `extra`; with `certificates`, the directory of
    /// [`cluster_certificates`], its nodes speak only TLS (and the directory goes with the
    /// cluster once its nodes run, a failed `--cluster create` included).
    fn make(extra: &[&str], replicas: usize, certificates: Option<PathBuf>) -> Self {
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let password = extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| (*p).to_owned());
        if let Some(password) = &password {
            // The nodes talk to each other with it too.
            args.extend(["--masterauth".to_owned(), password.clone()]);
        }
        // `redis-cli --cluster create` waits for the nodes to meet with no deadline of its own,
        // and a node whose bus port another test took between `free_port` and its bind never
        // meets the others: each attempt gets `CLUSTER_DEADLINE` (coreutils `timeout`), and a
        // failed one is retried on fresh nodes and ports.
        let mut certificates = certificates;
        let mut failures = Vec::new();
        for _ in 0..3 {
            let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
                .map(|_| {
                    RedisServer::launch(
                        Listen::Free { cluster_bus: true },
                        &scratch_dir(),
                        false,
                        &args,
                        certificates.is_some(),
                    )
                })
                .collect();
            let mut cluster = Self {
                nodes,
                password: password.clone(),
                certificates: certificates.take(),
            };
            let mut create = Command::new("timeout");
            create
                .arg(CLUSTER_DEADLINE.as_secs().to_string())
                .arg("redis-cli")
                .arg("--cluster")
                .arg("create");
            for node in &cluster.nodes {
                create.arg(format!("127.0.0.1:{}", node.port));
            }
            create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
            cluster.cli_options(&mut create);
            let created = create
                .output()
                .expect("redis-cli comes with redis-server (Debian's redis-tools); timeout with coreutils");
            if created.status.success() {
                cluster.wait_until_ok();
                return cluster;
            }
            failures.push(format!(
                "{:?}: {}{}",
                created.status.code(),
                String::from_utf8_lossy(&created.stdout),
                String::from_utf8_lossy(&created.stderr)
            ));
            // The certificates stay for the next attempt; these nodes go.
            certificates = cluster.certificates.take();
        }
        panic!("redis-cli --cluster create failed 3 times: {failures:#?}")
    }

    /// Whether the node at `index` is a primary now (`INFO replication`).
    pub fn is_primary(&self, index: usize) -> bool {
        let mut info = Command::new("redis-cli");
        info.args(["-h", "127.0.0.1", "-p", &self.nodes[index].port.to_string()]);
        self.cli_options(&mut info);
        let out = info.args(["info", "replication"]).output().expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).contains("role:master")
    }

    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3` (`rediss-cluster://` over TLS).
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let scheme = if self.certificates.is_some() {
            "rediss-cluster"
        } else {
            "redis-cluster"
        };
        format!("{scheme}://{}", nodes.join(","))
    }

    /// Kills every node (as a crash would).
    pub fn kill(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::kill);
    }

    /// Starts every node again on its port and directory (each reads its `nodes.conf`: the
    /// same cluster, the same slots), ready once the cluster is `ok` again.
    pub fn restart(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::restart);
        self.wait_until_ok();
    }

    /// What `redis-cli` needs to talk to the nodes: the password, TLS and its CA.
    fn cli_options(&self, command: &mut Command) {
        if let Some(password) = &self.password {
            command.args(["-a", password, "--no-auth-warning"]);
        }
        if let Some(dir) = &self.certificates {
            command.arg("--tls").arg("--cacert").arg(dir.join(CA_FILE));
        }
    }

    /// Waits until every node says its cluster is `ok` (it serves all 16,384 slots), with a
    /// deadline.
    fn wait_until_ok(&self) {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        for node in &self.nodes {
            node.waits_until_it_says(Said::ClusterOk, deadline);
        }
    }
}

/// Where a test's Redis runs: one server, or a cluster of three primaries. What must hold for
/// the company's store holds on both.
pub enum Deployment {
    /// One `redis-server`.
    One(RedisServer),
    /// Three primaries in a Redis Cluster.
    Cluster(RedisCluster),
}

impl Deployment {
    /// Its URL for `RedisStore::connect` (`redis://…` or `redis-cluster://…`).
    pub fn url(&self) -> String {
        match self {
            Self::One(server) => server.url(),
            Self::Cluster(cluster) => cluster.url(),
        }
    }

    /// Kills every server (as a crash would).
    pub fn kill(&mut self) {
        match self {
            Self::One(server) => server.kill(),
            Self::Cluster(cluster) => cluster.kill(),
        }
    }

    /// Starts every server again on its port and directory.
    pub fn restart(&mut self) {
        match self {
            Self::One(server) => server.restart(),
            Self::Cluster(cluster) => cluster.restart(),
        }
    }

    /// Every server (the primaries of a cluster), e.g. to `MONITOR` each.
    pub fn servers(&self) -> Vec<&RedisServer> {
        match self {
            Self::One(server) => vec![server],
            Self::Cluster(cluster) => cluster.nodes.iter().collect(),
        }
    }
}
