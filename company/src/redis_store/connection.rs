//! How the store reaches Redis: one server (a connection manager that reconnects on its own)
//! or a Redis Cluster (a client that follows the cluster's slots), behind one
//! [`redis::aio::ConnectionLike`], so every command and script is written once.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::{RedisOptions, RedisSetupError};

/// How long one command may take before the store counts as unavailable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest wait between two reconnection attempts, in milliseconds.
const MAX_RECONNECT_DELAY_MS: u64 = 1_000;
/// How many times the cluster client tries a command again (a moved slot, a node that went
/// away) before the store counts as unavailable, and the longest wait between two tries (ms).
const CLUSTER_RETRIES: u32 = 2;
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 200;

/// The schemes of a cluster URL: `redis-cluster://` and, over TLS, `rediss-cluster://`.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [("redis-cluster://", "redis://"), ("rediss-cluster://", "rediss://")];

/// A connection to one Redis or to a cluster. Cheap to clone: clones share it.
#[derive(Clone)]
pub(super) enum Connection {
    /// A standalone Redis (or a primary with replicas behind one address).
    One(ConnectionManager),
    /// A Redis Cluster: every command goes to the primary of its first key's slot.
    Cluster(ClusterConnection),
}

impl Connection {
    /// `INFO section` of the server, or of every primary of a cluster.
    pub(super) async fn info(&mut self, section: &str) -> Result<Vec<String>, RedisSetupError> {
        let mut command = redis::cmd("INFO");
        command.arg(section);
        match self {
            Self::One(connection) => command
                .query_async::<String>(connection)
                .await
                .map(|info| vec![info])
                .map_err(RedisSetupError::Connect),
            // `INFO` goes to every primary; the answers come keyed by node.
            Self::Cluster(connection) => command
                .query_async::<HashMap<String, String>>(connection)
                .await
                .map(|by_node| by_node.into_values().collect())
                .map_err(RedisSetupError::Connect),
        }
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::One(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::One(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::One(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The node URLs a cluster URL names (`redis-cluster://HOST:PORT[,HOST:PORT…]`), or `None`
/// for any other URL.
pub(super) fn cluster_nodes(url: &str) -> Option<Result<Vec<String>, RedisSetupError>> {
    let (rest, scheme) = CLUSTER_SCHEMES
        .iter()
        .find_map(|(cluster, node)| url.strip_prefix(cluster).map(|rest| (rest, node)))?;
    let nodes: Vec<String> = rest
        .trim_end_matches('/')
        .split(',')
        .map(|node| format!("{scheme}{}", node.trim()))
        .collect();
    // Each node a bare HOST:PORT: no user, password, database or path of its own.
    let bare = |node: &str| {
        url::Url::parse(node).is_ok_and(|parsed| {
            parsed.host_str().is_some_and(|host| !host.is_empty())
                && parsed.port().is_some()
                && parsed.username().is_empty()
                && parsed.password().is_none()
                && matches!(parsed.path(), "" | "/")
                && parsed.query().is_none()
                && parsed.fragment().is_none()
        })
    };
    Some(if nodes.iter().all(|node| bare(node)) {
        Ok(nodes)
    } else {
        Err(RedisSetupError::ClusterUrl)
    })
}

/// A manager for one Redis at `url` that reconnects on its own.
pub(super) async fn connect_one(url: &str, options: &RedisOptions) -> Result<ConnectionManager, RedisSetupError> {
    use redis::IntoConnectionInfo as _;
    let mut info = url.into_connection_info().map_err(RedisSetupError::Url)?;
    if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr {
        return Err(RedisSetupError::Insecure);
    }
    if let Some(password) = &options.password {
        info.redis.password = Some(password.as_str().to_owned());
    }
    let client = match (&info.addr, &options.ca_pem) {
        (redis::ConnectionAddr::TcpTls { .. }, Some(ca)) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.clone()),
            },
        )
        .map_err(RedisSetupError::Ca)?,
        _ => redis::Client::open(info).map_err(RedisSetupError::Url)?,
    };
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(RESPONSE_TIMEOUT)
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_max_delay(MAX_RECONNECT_DELAY_MS)
        // Commands waiting on a reconnection fail with its first failed attempt (the caller
        // answers 503 at once); the next command starts another attempt.
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(RedisSetupError::Connect)
}

/// A client of the cluster that `nodes` belong to: it learns every primary and its slots from
/// them, and follows the cluster when slots move or a replica is promoted.
pub(super) async fn connect_cluster(
    nodes: &[String],
    options: &RedisOptions,
) -> Result<ClusterConnection, RedisSetupError> {
    let mut builder = redis::cluster::ClusterClient::builder(nodes.to_vec())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS);
    if let Some(password) = &options.password {
        builder = builder.password(password.as_str().to_owned());
    }
    let tls = nodes.iter().any(|node| node.starts_with("rediss://"));
    if let (true, Some(ca)) = (tls, &options.ca_pem) {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.clone()),
        });
    }
    let client = builder.build().map_err(RedisSetupError::Url)?;
    client.get_async_connection().await.map_err(RedisSetupError::Connect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_names_its_nodes_and_nothing_else() {
        let nodes = cluster_nodes("redis-cluster://10.0.0.1:7000,10.0.0.2:7001/")
            .unwrap()
            .unwrap();
        assert_eq!(nodes, ["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"]);
        let tls = cluster_nodes("rediss-cluster://redis.internal:6380").unwrap().unwrap();
        assert_eq!(tls, ["rediss://redis.internal:6380"]);
        assert!(cluster_nodes("redis://127.0.0.1:6379/0").is_none());
        for refused in [
            "redis-cluster://",
            "redis-cluster://host-without-port",
            "redis-cluster://user:secret@10.0.0.1:7000",
            "redis-cluster://10.0.0.1:7000/3",
            "redis-cluster://10.0.0.1:7000,,10.0.0.2:7001",
        ] {
            assert!(
                matches!(cluster_nodes(refused), Some(Err(RedisSetupError::ClusterUrl))),
                "{refused}"
            );
        }
    }
}
