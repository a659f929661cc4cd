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
/// shards = 1                  # or the shards it runs by id: shards = [0, 2]
/// ```
///
/// A count numbers the shards in order (node 0 runs the first ones, and
/// so on); lists place them, every shard of `0..total` on exactly one
/// node. Either every node gives a count or every node gives a list. A
/// node may run none (`shards = 0` or `[]`): a spare, which takes part in
/// the cluster and may be handed shards (`styx handover`). A node with
/// `joins_later = true` (and no shard) is listed ahead of its start: the
/// others run without it until `styx node add N` makes it a member
/// (docs/nodes.md, "Membership"); give every node the same file.
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
    pub shards: Shards,
    /// The node joins the cluster later (`styx node add`): until then no
    /// node waits for it.
    #[serde(default)]
    pub joins_later: bool,
}

/// A node's shards in the file: how many, or which.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a shard count or a list of shard ids, each 0..=65535")]
pub enum Shards {
    Count(u16),
    Ids(Vec<u16>),
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
                shards: match &n.shards {
                    Shards::Count(c) => *c,
                    Shards::Ids(ids) => u16::try_from(ids.len())
                        .map_err(|_| format!("{}: node {} lists {} shards", path.display(), n.id, ids.len()))?,
                },
            });
        }
        let placement = placement(&file.nodes).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut absent: Vec<u16> = file.nodes.iter().filter(|n| n.joins_later).map(|n| n.id).collect();
        absent.sort_unstable();
        let spec = Spec {
            nodes,
            heartbeat: Duration::from_millis(file.heartbeat_ms.unwrap_or(100)),
            failure_timeout: Duration::from_millis(file.failure_timeout_ms.unwrap_or(500)),
            placement,
            absent,
        };
        spec.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(spec)
    }
}

/// The node of each shard when the nodes list their shards, `None` when
/// they count them; refuses a mix, a shard listed twice or none of `0..total`
/// left out.
fn placement(nodes: &[ClusterNode]) -> Result<Option<Vec<u16>>, String> {
    let lists = nodes.iter().filter(|n| matches!(n.shards, Shards::Ids(_))).count();
    if lists == 0 {
        return Ok(None);
    }
    if lists != nodes.len() {
        return Err(
            "either every node lists its shards (shards = [0, 2]) or every node counts them (shards = 2)".into(),
        );
    }
    let total: usize = nodes
        .iter()
        .map(|n| match &n.shards {
            Shards::Ids(ids) => ids.len(),
            Shards::Count(_) => 0,
        })
        .sum();
    let mut node_of: Vec<Option<u16>> = vec![None; total];
    for n in nodes {
        let Shards::Ids(ids) = &n.shards else { continue };
        for &s in ids {
            match node_of.get_mut(usize::from(s)) {
                None => {
                    return Err(format!(
                        "node {} lists shard {s}, but the nodes list {total} shards: shards are numbered 0..{total}",
                        n.id
                    ));
                }
                Some(Some(other)) => {
                    return Err(format!("shard {s} is listed by node {other} and by node {}", n.id));
                }
                Some(slot) => *slot = Some(n.id),
            }
        }
    }
    // Every id is below `total` and none twice, so every slot is filled.
    let node_of: Vec<u16> = node_of
        .into_iter()
        .map(|n| n.expect("each shard placed once"))
        .collect();
    // Lists that number the shards in order are the counts' layout: the
    // same cluster (one fingerprint), whichever way the file says it.
    Ok((!node_of.is_sorted()).then_some(node_of))
}

#[cfg(test)]
mod tests {
    use super::ClusterFile;

    /// A file of one node per entry, `shards = {entry}`.
    fn file(shards: &[&str]) -> std::path::PathBuf {
        let name = shards.join("_").replace(['[', ']', ',', ' '], "");
        let dir = std::env::temp_dir().join(format!("styx-cluster-file-{}-{name}", std::process::id()));
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
    fn a_node_without_shards_is_a_spare_and_a_cluster_of_spares_is_refused() {
        let spec = ClusterFile::load(&file(&["2", "1"])).unwrap();
        assert_eq!(spec.n_shards(), 3);
        assert_eq!(spec.shards_of(1), [2]);
        let spec = ClusterFile::load(&file(&["2", "0", "1"])).unwrap();
        assert_eq!(spec.n_shards(), 3);
        assert!(spec.shards_of(1).is_empty());
        assert_eq!(spec.shards_of(2), [2]);
        let spec = ClusterFile::load(&file(&["[0, 1]", "[]"])).unwrap();
        assert!(spec.shards_of(1).is_empty());
        let err = ClusterFile::load(&file(&["0", "0"])).unwrap_err();
        assert!(err.contains("no node has shards"), "{err}");
    }

    #[test]
    fn nodes_listing_their_shards_place_them() {
        let spec = ClusterFile::load(&file(&["[0, 2]", "[3, 1]"])).unwrap();
        assert_eq!(spec.n_shards(), 4);
        assert_eq!(spec.shards_of(0), [0, 2]);
        assert_eq!(spec.shards_of(1), [1, 3]);
        assert_eq!(spec.node_of(3), 1);
        assert_eq!(spec.layout().placed().shards_of(0).collect::<Vec<_>>(), [0, 2]);
        // Lists in order are the counts' cluster; another placement of the
        // same counts is another cluster.
        let in_order = ClusterFile::load(&file(&["[0, 1]", "[2, 3]"])).unwrap();
        assert_eq!(in_order.placement, None);
        assert_eq!(
            in_order.fingerprint(),
            ClusterFile::load(&file(&["2", "2"])).unwrap().fingerprint()
        );
        let other = ClusterFile::load(&file(&["[1, 2]", "[0, 3]"])).unwrap();
        assert_ne!(spec.fingerprint(), other.fingerprint());
        assert_ne!(
            spec.fingerprint(),
            ClusterFile::load(&file(&["2", "2"])).unwrap().fingerprint()
        );
    }

    #[test]
    fn a_node_that_joins_later_is_absent_from_the_first_layout_and_runs_none() {
        let with = |last: &str| {
            let dir =
                std::env::temp_dir().join(format!("styx-cluster-file-{}-later-{}", std::process::id(), last.len()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("cluster.toml");
            let mut text = String::new();
            for (i, s) in ["shards = 2", "shards = 1", last].iter().enumerate() {
                text.push_str(&format!(
                    "[[nodes]]\nid = {i}\npeer = \"127.0.0.1:{}\"\nclient = \"127.0.0.1:{}\"\n{s}\n",
                    23_000 + 10 * i,
                    24_000 + i
                ));
            }
            std::fs::write(&path, text).unwrap();
            ClusterFile::load(&path)
        };
        let spec = with("shards = 0\njoins_later = true").unwrap();
        assert_eq!(spec.absent, [2]);
        assert!(spec.joins_later(2) && !spec.joins_later(1));
        assert_eq!(spec.layout().absent(), &[2]);
        assert!(spec.layout().is_member(1) && !spec.layout().is_member(2));
        // Another cluster than the one whose node 2 is a spare from the start.
        assert_ne!(spec.fingerprint(), with("shards = 0").unwrap().fingerprint());
        let err = with("shards = 1\njoins_later = true").unwrap_err();
        assert!(err.contains("node 2 joins later and runs 1 shards"), "{err}");
    }

    #[test]
    fn a_placement_that_misses_or_repeats_a_shard_is_refused_by_name() {
        for (shards, says) in [
            (&["[0, 1]", "[1, 2]"][..], "shard 1 is listed by node 0 and by node 1"),
            (
                &["[0, 1]", "[3]"][..],
                "node 1 lists shard 3, but the nodes list 3 shards",
            ),
            (&["[0, 1]", "1"][..], "either every node lists its shards"),
            (&["[0, 1]", "[-1]"][..], "a shard count or a list of shard ids"),
            (&["70000", "1"][..], "a shard count or a list of shard ids"),
        ] {
            let err = ClusterFile::load(&file(shards)).unwrap_err();
            assert!(err.contains(says), "{shards:?}: {err}");
        }
    }
}
