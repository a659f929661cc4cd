//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use styx_engine::rng::Rng;
use styx_engine::{Address, Batch, Epoch, FnId, Key, OpId, Payload, Request, ShardId};

/// A fresh, empty directory on disk (not tmpfs: O_DIRECT needs a real file
/// system), under cargo's per-target temporary directory. Each test passes
/// its own name; the directory is kept after the test for inspection and
/// wiped when the test runs again.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("styx-storage")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `f` on a fresh glommio executor and returns its result.
pub fn glommio<G, F, T>(f: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(f)
        .expect("an executor")
        .join()
        .expect("the executor ran")
}

/// A batch of `txns` transactions with payloads of about `args` bytes.
pub fn batch(rng: &mut Rng, shard: ShardId, epoch: Epoch, txns: usize, args: usize) -> Batch {
    let mut out = Vec::with_capacity(txns);
    for i in 0..txns {
        let address = if rng.chance(0.2) {
            Address::Partition(rng.below(64) as u32)
        } else {
            let len = rng.below(40) as usize;
            let key: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            Address::Entity(Key::from_bytes(&key))
        };
        let n = if args == 0 {
            0
        } else {
            rng.below(args as u64 * 2) as usize
        };
        let payload: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
        out.push((
            epoch * 1000 + i as u64,
            Request {
                function: FnId {
                    op: OpId(rng.below(8) as u16),
                    index: rng.below(16) as u16,
                },
                address,
                args: Payload::from_vec(payload),
                client: None,
            },
        ));
    }
    Batch {
        epoch,
        shard,
        lc: epoch * 10,
        now_us: 1_700_000_000_000_000 + epoch,
        txns: out,
    }
}
