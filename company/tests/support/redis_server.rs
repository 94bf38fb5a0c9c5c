//! A real `redis-server` (Debian's package) on a free loopback port, for the tests of the Redis
//! stores: started and stopped by the test, ready when it says so.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long redis-server may take to say it is ready.
const READY_DEADLINE: Duration = Duration::from_secs(10);

/// A running redis-server, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    aof: bool,
    /// Further arguments (a password, a policy, TLS).
    extra: Vec<String>,
    /// `rediss://` on `port` (the plain port is off).
    tls: bool,
}

impl RedisServer {
    /// A server with no persistence.
    pub fn start() -> Self {
        Self::launch(free_port(), scratch_dir(), false, Vec::new(), false)
    }

    /// A server with no persistence and these further arguments (`--requirepass`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::launch(
            free_port(),
            scratch_dir(),
            false,
            extra.iter().map(|a| (*a).to_owned()).collect(),
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
        Self::launch(free_port(), scratch_dir(), false, extra.to_vec(), true)
    }

    /// A directory of the server's own, for files a test hands it (certificates).
    pub fn scratch() -> PathBuf {
        scratch_dir()
    }

    /// A server that appends every write to a file in its directory (AOF), so a restart keeps
    /// what it held.
    pub fn start_persistent() -> Self {
        Self::launch(free_port(), scratch_dir(), true, Vec::new(), false)
    }

    fn launch(port: u16, dir: PathBuf, aof: bool, extra: Vec<String>, tls: bool) -> Self {
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
        let (ready, is_ready) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = ready.send(());
                }
            }
        });
        is_ready
            .recv_timeout(READY_DEADLINE)
            .expect("redis-server did not say it was ready");
        Self {
            child: Some(child),
            port,
            dir,
            aof,
            extra,
            tls,
        }
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
        let again = Self::launch(self.port, self.dir.clone(), self.aof, self.extra.clone(), self.tls);
        *self = again;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pap-redis-{}-{}", std::process::id(), free_port()));
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
