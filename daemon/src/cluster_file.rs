//! The cluster file: a static list of nodes and the failure detector's
//! timing, the same file on every node (`--cluster FILE --node-id N`).

use serde::Deserialize;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;
use styx_runtime::cluster::{Node, Spec};

/// A cluster file: the nodes and the failure detector.
///
/// ```toml
/// heartbeat_ms = 100          # optional
/// failure_timeout_ms = 500    # optional
/// [[nodes]]
/// id = 0
/// peer = "127.0.0.1:7500"     # control plane; shard s's data links on port + 1 + s
///                             # (s of the cluster's shards: reserve them all)
/// client = "127.0.0.1:7400"
/// shards = 1
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub heartbeat_ms: Option<u64>,
    pub failure_timeout_ms: Option<u64>,
    pub nodes: Vec<ClusterNode>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    pub id: u16,
    pub peer: String,
    pub client: String,
    pub shards: u16,
}

impl ClusterFile {
    /// Reads and checks a cluster file.
    pub fn load(path: &std::path::Path) -> Result<Spec, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: ClusterFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let addr = |what: &str, a: &str| -> Result<SocketAddr, String> {
            let r = a
                .to_socket_addrs()
                .map_err(|e| format!("{}: {what} address {a}: {e}", path.display()))?
                .next()
                .ok_or_else(|| format!("{}: {what} address {a} resolves to nothing", path.display()))?;
            if r.port() == 0 {
                return Err(format!("{}: {what} address {a} needs a port", path.display()));
            }
            Ok(r)
        };
        let mut nodes = Vec::with_capacity(file.nodes.len());
        for n in &file.nodes {
            nodes.push(Node {
                id: n.id,
                peer: addr("peer", &n.peer)?,
                client: addr("client", &n.client)?,
                shards: n.shards,
            });
        }
        let spec = Spec {
            nodes,
            heartbeat: Duration::from_millis(file.heartbeat_ms.unwrap_or(100)),
            failure_timeout: Duration::from_millis(file.failure_timeout_ms.unwrap_or(500)),
        };
        spec.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(n) = spec.nodes.iter().find(|n| n.shards == 0) {
            return Err(format!(
                "{}: node {} has no shards: a daemon does not run a spare node yet (docs/nodes.md)",
                path.display(),
                n.id
            ));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::ClusterFile;

    fn file(shards: [u16; 2]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("styx-cluster-file-{}-{shards:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.toml");
        let mut text = String::new();
        for (i, s) in shards.iter().enumerate() {
            text.push_str(&format!(
                "[[nodes]]\nid = {i}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\nshards = {s}\n",
                21_000 + 10 * i,
                22_000 + i
            ));
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_node_without_shards_is_refused_by_name() {
        let spec = ClusterFile::load(&file([2, 1])).unwrap();
        assert_eq!(spec.n_shards(), 3);
        // The runtime runs spares (`run_rounds`); a daemon does not yet.
        let err = ClusterFile::load(&file([2, 0])).unwrap_err();
        assert!(err.contains("node 1 has no shards"), "{err}");
        assert!(err.contains("spare"), "{err}");
    }
}
