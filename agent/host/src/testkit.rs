//! Test support (the `test-support` feature): what floods the host in its tests and load runs,
//! never the host itself.

use std::net::SocketAddr;

/// A flood of strangers against an MCP host at `addr` (review N4), held while this lives:
/// `slow_pairs` connections that each send a `POST /pair` head and one byte of its body, and
/// `idle` connections that send nothing. For the test and the load run of the host's bounds.
#[derive(Debug)]
pub struct Flood {
    held: Vec<tokio::net::TcpStream>,
}

impl Flood {
    /// Opens the flood; `host` is the `Host` header the guard admits (`127.0.0.1:PORT`).
    pub async fn open(addr: SocketAddr, host: &str, slow_pairs: usize, idle: usize) -> std::io::Result<Self> {
        use tokio::io::AsyncWriteExt as _;
        let mut held = Vec::with_capacity(slow_pairs + idle);
        for _ in 0..slow_pairs {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            let head = format!(
                "POST /pair HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
            );
            stream.write_all(head.as_bytes()).await?;
            held.push(stream);
        }
        for _ in 0..idle {
            held.push(tokio::net::TcpStream::connect(addr).await?);
        }
        Ok(Self { held })
    }

    /// How many connections it opened.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether it opened none.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}
