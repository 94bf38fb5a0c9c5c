//! Real processes for the load and replica runs: `pap-company serve` (its memory and CPU read
//! from `/proc`) and `redis-server`, each on a free loopback port, ready when it says so, and
//! killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// How long the company may take to say it serves.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// Linux's `USER_HZ`: the unit of `/proc/PID/stat`'s CPU times.
const TICKS_PER_SECOND: f64 = 100.0;

/// A running company process.
pub(crate) struct CompanyProcess {
    /// Killed when dropped.
    child: Child,
    pid: u32,
    /// Where it serves HTTPS.
    pub(crate) addr: SocketAddr,
    /// Its operator API, credential included (`http://operator:…@127.0.0.1:port`).
    pub(crate) operator: Option<String>,
}

/// Where to start the company and what it may reach.
pub(crate) struct Launch<'a> {
    pub(crate) binary: &'a Path,
    pub(crate) config: &'a Path,
    pub(crate) certs: &'a Path,
    pub(crate) work: &'a Path,
    /// `NAME=ADDR:PORT` entries for its outbound fetches (`*.parent` allowed).
    pub(crate) resolve: Vec<String>,
    /// A company from before the operator credential (to measure a "before"): no
    /// `--admin-credential-file`, no operator figures.
    pub(crate) before_credential: bool,
    /// `--store` (a Redis URL), when the company keeps its state there.
    pub(crate) store: Option<String>,
    /// A name for its log file (`company-NAME.log`).
    pub(crate) name: &'a str,
    /// `--replay-share`: how many live replay marks one registrable domain's clients may hold
    /// (the company's default when `None`).
    pub(crate) replay_share: Option<u64>,
    /// `--replay-share-per-address`: how many live replay marks one client address may make
    /// through the process (the company's default when `None`).
    pub(crate) replay_share_per_address: Option<u64>,
    /// `--replay-pressure`: from how many live marks the shares bind (the company's default
    /// when `None`).
    pub(crate) replay_pressure: Option<u64>,
}

impl CompanyProcess {
    /// Starts `pap-company serve` on free loopback ports and waits for it to say it serves the
    /// operator API (the last thing it does before serving).
    pub(crate) async fn start(launch: Launch<'_>) -> anyhow::Result<Self> {
        let addr = free_port()?;
        let admin = free_port()?;
        let credential_file = launch.work.join(format!("operator-{}.credential", launch.name));
        let log_path = launch.work.join(format!("company-{}.log", launch.name));
        let mut command = Command::new(launch.binary);
        command
            .arg("serve")
            .arg("--config")
            .arg(launch.config)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--cert")
            .arg(launch.certs.join("cert.pem"))
            .arg("--key")
            .arg(launch.certs.join("key.pem"))
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--trust-ca")
            .arg(launch.certs.join("ca.pem"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(store) = &launch.store {
            command.arg("--store").arg(store);
        }
        if let Some(share) = launch.replay_share {
            command.arg("--replay-share").arg(share.to_string());
        }
        if let Some(share) = launch.replay_share_per_address {
            command.arg("--replay-share-per-address").arg(share.to_string());
        }
        if let Some(pressure) = launch.replay_pressure {
            command.arg("--replay-pressure").arg(pressure.to_string());
        }
        if !launch.before_credential {
            command.arg("--admin-credential-file").arg(&credential_file);
        }
        for entry in &launch.resolve {
            command.arg("--resolve").arg(entry);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", launch.binary.display()))?;
        let pid = child.id().context("the company exited at once")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(copy_log(stderr, log_path.clone(), ready_tx));
        match tokio::time::timeout(START_DEADLINE, ready_rx).await {
            Ok(Ok(())) => {}
            _ => bail!("the company did not start; see {}", log_path.display()),
        }
        let operator = if launch.before_credential {
            None
        } else {
            let credential = std::fs::read_to_string(&credential_file)
                .with_context(|| format!("reading {}", credential_file.display()))?;
            Some(format!("http://operator:{}@{admin}", credential.trim()))
        };
        Ok(Self {
            child,
            pid,
            addr,
            operator,
        })
    }

    /// Its resident memory now, in bytes.
    pub(crate) fn rss(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .context("no VmRSS")?;
        Ok(kib * 1024)
    }

    /// The CPU time it has used, user and system.
    pub(crate) fn cpu(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        // Fields after the command name (which may hold spaces) start at state, field 3.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).context("no stat")?;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // utime and stime are fields 14 and 15, that is 11 and 12 after the state.
        Ok(Duration::from_secs_f64((ticks(11) + ticks(12)) / TICKS_PER_SECOND))
    }

    /// Its open file descriptors now.
    pub(crate) fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid)).map_or(0, Iterator::count)
    }
}

/// Samples a process's memory until stopped; the highest it saw.
pub(crate) struct PeakRss {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<u64>,
}

impl PeakRss {
    pub(crate) fn start(company: &CompanyProcess) -> Self {
        let pid = company.pid;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut peak = 0;
            let mut ticks = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopped.changed() => return peak,
                }
                if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    let kib = status
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                    peak = peak.max(kib * 1024);
                }
            }
        });
        Self { stop, task }
    }

    pub(crate) async fn peak(self) -> u64 {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or(0)
    }
}

/// The company's CPU share over a stretch of wall time.
pub(crate) struct CpuShare {
    cpu: Duration,
    wall: Instant,
}

impl CpuShare {
    pub(crate) fn start(company: &CompanyProcess) -> anyhow::Result<Self> {
        Ok(Self {
            cpu: company.cpu()?,
            wall: Instant::now(),
        })
    }

    /// CPU time over wall time since the start, as a fraction of one core.
    pub(crate) fn share(&self, company: &CompanyProcess) -> anyhow::Result<f64> {
        let used = company.cpu()?.saturating_sub(self.cpu);
        Ok(used.as_secs_f64() / self.wall.elapsed().as_secs_f64().max(1e-3))
    }
}

async fn copy_log(
    stderr: tokio::process::ChildStderr,
    path: PathBuf,
    ready: tokio::sync::oneshot::Sender<()>,
) -> anyhow::Result<()> {
    let mut ready = Some(ready);
    let mut log = tokio::fs::File::create(&path).await?;
    let mut lines = BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await? {
        if line.contains("serving the operator API")
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(());
        }
        log.write_all(line.as_bytes()).await?;
        log.write_all(b"\n").await?;
    }
    Ok(())
}

fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

impl CompanyProcess {
    /// Kills it at once (SIGKILL: no shutdown, as a crash), and waits for it to be gone.
    pub(crate) async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Redis as the company's replicas share it: one `redis-server`, or a Redis Cluster of three
/// primaries made with `redis-cli --cluster create`; each node on free loopback ports, with its
/// own directory (AOF on when asked, so a restart keeps what it held).
pub(crate) struct RedisProcess {
    nodes: Vec<RedisNode>,
    cluster: bool,
}

/// One `redis-server`.
struct RedisNode {
    child: Option<std::process::Child>,
    port: u16,
    dir: PathBuf,
    aof: bool,
    /// `--cluster-port` when it is a cluster's node.
    bus: Option<u16>,
    /// What it says on its log that the run waits for ([`READY`], [`CLUSTER_OK`]).
    says: std::sync::mpsc::Receiver<&'static str>,
}

/// What redis-server logs once it accepts connections.
const READY: &str = "Ready to accept connections";
/// What a cluster's node logs once it serves all 16,384 slots.
const CLUSTER_OK: &str = "Cluster state changed: ok";

/// How long a cluster may take to agree on its slots (made, or restarted).
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

impl RedisProcess {
    /// One server.
    pub(crate) fn start(dir: &Path, aof: bool) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let node = RedisNode::launch(free_port()?.port(), dir.to_owned(), aof, None)?;
        Ok(Self {
            nodes: vec![node],
            cluster: false,
        })
    }

    /// A cluster of three primaries (no replicas), ready once every node says `ok`.
    pub(crate) fn start_cluster(dir: &Path, aof: bool) -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for i in 0..3 {
            let dir = dir.join(format!("node-{i}"));
            std::fs::create_dir_all(&dir)?;
            nodes.push(RedisNode::launch(
                free_port()?.port(),
                dir,
                aof,
                Some(free_port()?.port()),
            )?);
        }
        // `--cluster create` waits for the nodes to meet with no deadline of its own: 30 s
        // (coreutils `timeout`), then a clear failure rather than a hung run.
        let mut create = std::process::Command::new("timeout");
        create.args(["30", "redis-cli", "--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let made = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .context("running timeout 30 redis-cli --cluster create (Debian's redis-tools, coreutils)")?;
        if !made.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&made.stdout)
            );
        }
        let cluster = Self { nodes, cluster: true };
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// `redis://127.0.0.1:PORT/0`, or `redis-cluster://127.0.0.1:P1,…` for a cluster.
    pub(crate) fn url(&self) -> String {
        if self.cluster {
            let nodes: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
            format!("redis-cluster://{}", nodes.join(","))
        } else {
            format!("redis://127.0.0.1:{}/0", self.nodes[0].port)
        }
    }

    /// Kills every node (no shutdown save: what survives is what the AOF holds).
    pub(crate) fn kill(&mut self) {
        self.nodes.iter_mut().for_each(RedisNode::kill);
    }

    /// Starts every node again on its port and directory (a cluster's nodes read their
    /// `nodes.conf`: the same cluster, the same slots).
    pub(crate) fn restart(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            node.kill();
            *node = RedisNode::launch(node.port, node.dir.clone(), node.aof, node.bus)?;
        }
        if self.cluster {
            self.wait_until_ok()?;
        }
        Ok(())
    }

    /// Waits until every node says its cluster is `ok` (it serves all 16,384 slots), with a
    /// deadline.
    fn wait_until_ok(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        for node in &self.nodes {
            node.waits_until_it_says(CLUSTER_OK, deadline)?;
        }
        Ok(())
    }
}

impl RedisNode {
    fn launch(port: u16, dir: PathBuf, aof: bool, bus: Option<u16>) -> anyhow::Result<Self> {
        use std::io::BufRead as _;
        let mut command = std::process::Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args([
                "--appendonly",
                if aof { "yes" } else { "no" },
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&dir);
        if let Some(bus) = bus {
            // The bus port is asked for, not left at port + 10,000 (past 65,535 for a high
            // free port).
            command.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-port",
                &bus.to_string(),
            ]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server (Debian's redis-server package)")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (said, says) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(event) = [READY, CLUSTER_OK].into_iter().find(|event| line.contains(event))
                    && said.send(event).is_err()
                {
                    break;
                }
            }
        });
        let node = Self {
            child: Some(child),
            port,
            dir,
            aof,
            bus,
            says,
        };
        node.waits_until_it_says(READY, Instant::now() + START_DEADLINE)?;
        Ok(node)
    }

    /// Waits until the node says `what` on its log (or has said it since it was last asked).
    fn waits_until_it_says(&self, what: &str, deadline: Instant) -> anyhow::Result<()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.says.recv_timeout(left) {
                Ok(said) if said == what => return Ok(()),
                Ok(_) => {}
                Err(_) => bail!("redis-server on port {} did not say \"{what}\" in time", self.port),
            }
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Approves the Device Sign-In of `user_code` for `acct_ada` through a company's operator API
/// (`operator`, credential included), as the person would on the device page.
pub(crate) async fn approve_device(http: &reqwest::Client, operator: &str, user_code: &str) -> anyhow::Result<()> {
    let approved = http
        .post(format!("{operator}/approve-device"))
        .header("content-type", "application/json")
        .body(serde_json::json!({"user_code": user_code, "account": "acct_ada"}).to_string())
        .send()
        .await?;
    anyhow::ensure!(approved.status() == 200, "the operator answered {}", approved.status());
    Ok(())
}
