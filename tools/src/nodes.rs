//! Which handovers drain or fill a node (`styx node drain|fill`): a plan
//! over a layout (`node_of[shard]` is the node running it), the same on
//! every run. The shard count stays fixed; a node is added as a spare in
//! the cluster file (no shard) and filled, and is drained before it is
//! taken out (docs/nodes.md, step 5).

/// The handovers `(shard, to)`, in order, that leave `node` without a
/// shard: each of its shards, lowest first, to the other node running the
/// fewest at that point (the lowest id on a tie; a spare runs none, so it
/// is filled first), none of the nodes `gone` (they left the cluster, or
/// do not answer). Empty if `node` runs none.
pub fn drain(node_of: &[u16], nodes: u16, node: u16, gone: &[u16]) -> Result<Vec<(u16, u16)>, String> {
    let mut counts = counts(node_of, nodes, node)?;
    if nodes < 2 {
        return Err(format!(
            "node {node} is the cluster's only node: its shards have nowhere to go"
        ));
    }
    let mut plan = Vec::new();
    for (shard, _) in node_of.iter().enumerate().filter(|(_, n)| **n == node) {
        let to = (0..nodes)
            .filter(|n| *n != node && !gone.contains(n))
            .min_by_key(|n| (counts[usize::from(*n)], *n))
            .ok_or_else(|| {
                format!("node {node}'s shards have nowhere to go: nodes {gone:?} left the cluster or do not answer")
            })?;
        counts[usize::from(to)] += 1;
        counts[usize::from(node)] -= 1;
        plan.push((shard as u16, to));
    }
    Ok(plan)
}

/// The handovers `(shard, to = node)`, in order, that give `node` its
/// share: while another node runs at least two shards more than it, that
/// node's highest shard (the one running the most; the lowest id on a
/// tie). Empty if `node` runs its share already.
pub fn fill(node_of: &[u16], nodes: u16, node: u16) -> Result<Vec<(u16, u16)>, String> {
    let mut counts = counts(node_of, nodes, node)?;
    let mut owner = node_of.to_vec();
    let mut plan = Vec::new();
    loop {
        let from = (0..nodes)
            .filter(|n| *n != node)
            .max_by_key(|n| (counts[usize::from(*n)], std::cmp::Reverse(*n)))
            .expect("another node");
        if counts[usize::from(from)] < counts[usize::from(node)] + 2 {
            return Ok(plan);
        }
        let shard = owner
            .iter()
            .rposition(|n| *n == from)
            .expect("a node with shards runs one");
        owner[shard] = node;
        counts[usize::from(from)] -= 1;
        counts[usize::from(node)] += 1;
        plan.push((shard as u16, node));
    }
}

/// Shards per node, after checking that `node` is one of `nodes`.
fn counts(node_of: &[u16], nodes: u16, node: u16) -> Result<Vec<usize>, String> {
    if node >= nodes {
        return Err(format!("no node {node} (the cluster has {nodes})"));
    }
    let mut counts = vec![0usize; usize::from(nodes)];
    for n in node_of {
        let c = counts
            .get_mut(usize::from(*n))
            .ok_or_else(|| format!("the layout places a shard on node {n}, of {nodes}"))?;
        *c += 1;
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(node_of: &[u16], plan: &[(u16, u16)]) -> Vec<u16> {
        let mut out = node_of.to_vec();
        for (s, to) in plan {
            out[usize::from(*s)] = *to;
        }
        out
    }

    #[test]
    fn a_spare_filled_takes_its_share_from_the_fullest() {
        // Two nodes of two shards and a spare: one shard comes over.
        let plan = fill(&[0, 0, 1, 1], 3, 2).unwrap();
        assert_eq!(plan, [(1, 2)]);
        assert_eq!(apply(&[0, 0, 1, 1], &plan), [0, 2, 1, 1]);
        // Two nodes of four and a spare: shards from each, highest first.
        let plan = fill(&[0, 0, 0, 0, 1, 1, 1, 1], 3, 2).unwrap();
        assert_eq!(plan, [(3, 2), (7, 2)]);
        // At its share: nothing.
        assert!(fill(&[0, 2, 1, 1], 3, 2).unwrap().is_empty());
        assert!(fill(&[0, 1], 2, 1).unwrap().is_empty());
    }

    #[test]
    fn a_drained_node_hands_each_shard_to_the_emptiest() {
        // A spare takes the first, then the others in turn.
        let plan = drain(&[0, 2, 1, 1], 3, 1, &[]).unwrap();
        assert_eq!(plan, [(2, 0), (3, 2)]);
        assert_eq!(apply(&[0, 2, 1, 1], &plan), [0, 2, 0, 2]);
        let plan = drain(&[0, 0, 1, 1], 3, 0, &[]).unwrap();
        assert_eq!(plan, [(0, 2), (1, 2)], "the spare, still the emptiest");
        assert!(drain(&[0, 0, 1, 1], 3, 2, &[]).unwrap().is_empty(), "a spare");
    }

    #[test]
    fn what_cannot_be_planned_is_refused_by_name() {
        assert!(drain(&[0, 0], 1, 0, &[]).unwrap_err().contains("only node"));
        assert!(fill(&[0, 0], 2, 2).unwrap_err().contains("no node 2"));
        assert!(drain(&[0, 3], 2, 0, &[]).unwrap_err().contains("node 3, of 2"));
        // Nodes gone take nothing, however few they run.
        assert_eq!(drain(&[0, 0, 1, 1], 3, 1, &[2]).unwrap(), vec![(2, 0), (3, 0)]);
        assert!(
            drain(&[0, 0, 1, 1], 3, 1, &[0, 2])
                .unwrap_err()
                .contains("nowhere to go")
        );
    }
}
