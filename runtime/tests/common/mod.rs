//! Shared by the runtime's integration tests.

#![allow(dead_code)]

use std::sync::Arc;
use styx_engine::{Abort, App, FnId};

/// A bank of accounts (16 partitions): `transfer(creditor, amount)` calls
/// the creditor's `deposit`, then debits its own account; balances start at
/// 0 unless loaded and may go negative. Returns the app and `transfer`.
pub fn bank(name: &str) -> (Arc<App>, FnId) {
    let mut app = App::new(name);
    let account = app.operator("account", 16);
    let deposit = app.function(account, "deposit", |ctx, amount: i64| async move {
        let balance = ctx.get::<i64>()?.unwrap_or(0);
        ctx.put(&(balance + amount))?;
        Ok(())
    });
    let transfer = app.function(
        account,
        "transfer",
        move |ctx, (creditor, amount): (u64, i64)| async move {
            ctx.call_fn::<()>(deposit, creditor, amount).await?;
            let balance = ctx.get::<i64>()?.unwrap_or(0);
            ctx.put(&(balance - amount))?;
            Ok::<(), Abort>(())
        },
    );
    (Arc::new(app), transfer)
}

/// A base port whose `len` ports are free now, below the kernel's
/// ephemeral range (32768 and up on Linux: an outgoing connection may take
/// any port there, and a node binding it later — a shard arriving at a
/// handover listens on its port then — would find it in use). Blocks
/// handed out are disjoint within the process (tests run side by side
/// and bind their ports only later).
pub fn free_port_block(len: u16) -> u16 {
    const FIRST: u16 = 25_000;
    const SPAN: u16 = 7_500;
    static NEXT: std::sync::Mutex<Option<u16>> = std::sync::Mutex::new(None);
    let mut next = NEXT.lock().unwrap();
    let mut base = next.unwrap_or(FIRST + (std::process::id() % u32::from(SPAN)) as u16);
    loop {
        if base + len < FIRST + SPAN && (0..len).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            *next = Some(base + len);
            return base;
        }
        base = FIRST + (base - FIRST + len) % SPAN;
    }
}

/// A cluster of `nodes` nodes of `shards` shards each on this machine: per
/// node a control port, a data-link port per shard of the cluster and a
/// client port (unused by the in-process tests).
pub fn local_cluster(nodes: u16, shards: u16) -> styx_runtime::cluster::Spec {
    local_cluster_of(&vec![shards; usize::from(nodes)])
}

/// The same with `shards[i]` shards on node `i` (0: a spare).
pub fn local_cluster_of(shards: &[u16]) -> styx_runtime::cluster::Spec {
    let nodes = shards.len() as u16;
    let total: u16 = shards.iter().sum();
    let stride = 2 + total;
    let base = free_port_block(nodes * stride);
    let addr = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    styx_runtime::cluster::Spec {
        nodes: (0..nodes)
            .map(|i| styx_runtime::cluster::Node {
                id: i,
                peer: addr(base + i * stride),
                client: addr(base + i * stride + 1 + total),
                shards: shards[usize::from(i)],
            })
            .collect(),
        heartbeat: std::time::Duration::from_millis(50),
        failure_timeout: std::time::Duration::from_secs(5),
        placement: None,
        absent: Vec::new(),
    }
}

/// Loads into `shard` (of `n_shards`) the accounts `0..accounts` it owns,
/// each with `start`.
pub fn load_accounts(app: &App, shard: &mut styx_engine::Shard, n_shards: u16, accounts: u64, start: i64) {
    let account = app.op_id("account").expect("account");
    let value = styx_engine::Value::encode(&start, &mut Default::default()).unwrap();
    for k in 0..accounts {
        let key = styx_engine::Key::from(k);
        if styx_engine::Shard::owner(app, n_shards, account, &key) == shard.id() {
            shard.load(account, &key, Some(value.clone()));
        }
    }
}
