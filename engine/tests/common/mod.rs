//! Shared by the engine's integration tests: two applications (a bank and
//! an interpreter of random programs), the serial oracle
//! (`styx_engine::oracle`, shared with the workload tests), and the seed
//! swarm of the randomized tests ([`swarm`]).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::Sim;
use styx_engine::{
    Abort, Address, App, Batch, CallLimits, ClientSeq, Epoch, Handover, Key, Layout, Move, OpId, PartitionMap, Payload,
    Request, ShardId, SnapshotChunk, Value,
};

// ---------------------------------------------------------------------------
// The bank: YCSB-T transfers.

pub const START_BALANCE: i64 = 1_000_000;

pub fn bank(partitions: u32) -> Arc<App> {
    let mut app = App::new("bank");
    let account = app.operator("account", partitions);
    app.function(account, "deposit", |ctx, amount: i64| async move {
        let balance = ctx.get::<i64>()?.unwrap_or(0);
        ctx.put(&(balance + amount))?;
        Ok(())
    });
    app.function(account, "transfer", |ctx, (creditor, amount): (u64, i64)| async move {
        let balance = ctx.get::<i64>()?.unwrap_or(0);
        ctx.call::<()>("account", creditor, "deposit", amount).await?;
        let balance = balance - amount;
        if balance < 0 {
            return Err(Abort::new("insufficient credit"));
        }
        ctx.put(&balance)?;
        Ok(())
    });
    app.function(account, "balance", |ctx, (): ()| async move {
        Ok(ctx.get::<i64>()?.unwrap_or(0))
    });
    Arc::new(app)
}

pub fn transfer(app: &App, debtor: u64, creditor: u64, amount: i64) -> Request {
    Request {
        function: app.resolve("account", "transfer").unwrap(),
        address: Address::Entity(Key::from(debtor)),
        args: Payload::encode(&(creditor, amount)),
        client: None,
    }
}

pub fn balance_of(v: &Value) -> i64 {
    v.decode::<i64>().unwrap()
}

/// The bank's entity for account `k`.
pub fn account(k: u64) -> (OpId, Key) {
    (OpId(0), Key::from(k))
}

/// `accounts` accounts holding `balance` each.
pub fn accounts(accounts: u64, balance: i64) -> Vec<(OpId, Key, Value)> {
    (0..accounts)
        .map(|k| {
            let (op, key) = account(k);
            (op, key, Value::encode(&balance, &mut Default::default()).unwrap())
        })
        .collect()
}

/// Panics unless the bank's `accounts` accounts hold `total` together,
/// none overdrawn.
pub fn assert_conserved(state: &State, accounts: u64, total: i64, at: &str) {
    let sum: i64 = (0..accounts)
        .map(|a| {
            let b = state.get(&account(a)).map(balance_of).unwrap_or(0);
            assert!(b >= 0, "{at}: account {a} overdrawn: {b}");
            b
        })
        .sum();
    assert_eq!(sum, total, "{at}: money not conserved");
}

/// `r` sent by exactly-once client `client` as its request `seq`.
pub fn with_client(mut r: Request, client: u64, seq: u64) -> Request {
    r.client = Some(ClientSeq { client, seq, ack: 0 });
    r
}

// ---------------------------------------------------------------------------
// Random programs: an interpreter whose arguments are the program.

/// One instruction of a random program, run by `node.run` on some entity.
#[derive(Clone, Debug)]
pub enum Instr {
    /// acc = acc * 31 + value (0 if none).
    Read,
    /// put(acc + c).
    Write(i64),
    /// add(c): commutes with other adds.
    Add(i64),
    Delete,
    /// acc = acc * 31 + call(key, program).
    Call(u64, Vec<Instr>),
    /// Call only if acc % m == 0: the entities a transaction touches depend
    /// on what it read, so a re-execution can leave its recorded set.
    CallIf(u64, u64, Vec<Instr>),
    /// send(key, program), not awaited.
    Send(u64, Vec<Instr>),
    /// Two sync calls awaited together.
    Join(u64, Vec<Instr>, u64, Vec<Instr>),
    /// abort if acc % m == 0.
    AbortIf(u64),
    /// panic if acc % m == 0.
    PanicIf(u64),
    /// acc = acc * 31 + sum over a scan of partition p.
    Scan(u32),
    /// acc = acc * 31 + ctx.random() % 1000.
    Random,
}

pub fn encode_program(prog: &[Instr], out: &mut Vec<u8>) {
    fn sub(p: &[Instr], out: &mut Vec<u8>) {
        let mut b = Vec::new();
        encode_program(p, &mut b);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(&b);
    }
    for i in prog {
        match i {
            Instr::Read => out.push(b'R'),
            Instr::Write(c) => {
                out.push(b'W');
                out.extend_from_slice(&c.to_le_bytes());
            }
            Instr::Add(c) => {
                out.push(b'+');
                out.extend_from_slice(&c.to_le_bytes());
            }
            Instr::Delete => out.push(b'D'),
            Instr::Call(k, p) => {
                out.push(b'C');
                out.extend_from_slice(&k.to_le_bytes());
                sub(p, out);
            }
            Instr::CallIf(m, k, p) => {
                out.push(b'I');
                out.extend_from_slice(&m.to_le_bytes());
                out.extend_from_slice(&k.to_le_bytes());
                sub(p, out);
            }
            Instr::Send(k, p) => {
                out.push(b'S');
                out.extend_from_slice(&k.to_le_bytes());
                sub(p, out);
            }
            Instr::Join(k1, p1, k2, p2) => {
                out.push(b'J');
                out.extend_from_slice(&k1.to_le_bytes());
                sub(p1, out);
                out.extend_from_slice(&k2.to_le_bytes());
                sub(p2, out);
            }
            Instr::AbortIf(m) => {
                out.push(b'A');
                out.extend_from_slice(&m.to_le_bytes());
            }
            Instr::PanicIf(m) => {
                out.push(b'P');
                out.extend_from_slice(&m.to_le_bytes());
            }
            Instr::Scan(p) => {
                out.push(b'Q');
                out.extend_from_slice(&p.to_le_bytes());
            }
            Instr::Random => out.push(b'X'),
        }
    }
}

fn read_u64(b: &[u8], at: &mut usize) -> u64 {
    let v = u64::from_le_bytes(b[*at..*at + 8].try_into().unwrap());
    *at += 8;
    v
}

fn read_sub(b: &[u8], at: &mut usize) -> Vec<u8> {
    let n = u32::from_le_bytes(b[*at..*at + 4].try_into().unwrap()) as usize;
    *at += 4;
    let v = b[*at..*at + n].to_vec();
    *at += n;
    v
}

pub const NODE_PARTITIONS: u32 = 8;

/// Panics that test programs raise on purpose are caught by the engine;
/// keep them out of the output so real failures stand out.
pub fn quiet_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with("expected: ") {
                default(info);
            }
        }));
    });
}

pub fn programs() -> Arc<App> {
    quiet_expected_panics();
    let mut app = App::new("programs");
    let node = app.operator("node", NODE_PARTITIONS);
    app.function(node, "run", |ctx, prog: Vec<u8>| async move {
        let mut acc = ctx.key().as_u64().unwrap() as i64;
        let mut at = 0;
        while at < prog.len() {
            let op = prog[at];
            at += 1;
            match op {
                b'R' => acc = acc.wrapping_mul(31).wrapping_add(ctx.get::<i64>()?.unwrap_or(0)),
                b'W' => {
                    let c = read_u64(&prog, &mut at) as i64;
                    ctx.put(&acc.wrapping_add(c))?;
                }
                b'+' => {
                    let c = read_u64(&prog, &mut at) as i64;
                    ctx.add(c)?;
                }
                b'D' => ctx.delete()?,
                b'C' => {
                    let k = read_u64(&prog, &mut at);
                    let p = read_sub(&prog, &mut at);
                    let v = ctx.call::<i64>("node", k, "run", p).await?;
                    acc = acc.wrapping_mul(31).wrapping_add(v);
                }
                b'I' => {
                    let m = read_u64(&prog, &mut at);
                    let k = read_u64(&prog, &mut at);
                    let p = read_sub(&prog, &mut at);
                    if acc.unsigned_abs().is_multiple_of(m) {
                        let v = ctx.call::<i64>("node", k, "run", p).await?;
                        acc = acc.wrapping_mul(31).wrapping_add(v);
                    }
                }
                b'S' => {
                    let k = read_u64(&prog, &mut at);
                    let p = read_sub(&prog, &mut at);
                    ctx.send("node", k, "run", p)?;
                }
                b'J' => {
                    let k1 = read_u64(&prog, &mut at);
                    let p1 = read_sub(&prog, &mut at);
                    let k2 = read_u64(&prog, &mut at);
                    let p2 = read_sub(&prog, &mut at);
                    let a = ctx.call::<i64>("node", k1, "run", p1);
                    let b = ctx.call::<i64>("node", k2, "run", p2);
                    let (a, b) = futures_lite::future::zip(a, b).await;
                    acc = acc.wrapping_mul(31).wrapping_add(a?).wrapping_add(b?.wrapping_mul(7));
                }
                b'A' => {
                    let m = read_u64(&prog, &mut at);
                    if acc.unsigned_abs().is_multiple_of(m) {
                        return Err(Abort::new(format!("acc {acc} divisible by {m}")));
                    }
                }
                b'P' => {
                    let m = read_u64(&prog, &mut at);
                    if acc.unsigned_abs().is_multiple_of(m) {
                        panic!("expected: acc {acc} divisible by {m}");
                    }
                }
                b'Q' => {
                    let p = u32::from_le_bytes(prog[at..at + 4].try_into().unwrap());
                    at += 4;
                    let v = ctx.call_partition::<i64>("node", p, "sum", ()).await?;
                    acc = acc.wrapping_mul(31).wrapping_add(v);
                }
                b'X' => acc = acc.wrapping_mul(31).wrapping_add((ctx.random() % 1000) as i64),
                other => panic!("bad instruction {other}"),
            }
        }
        Ok(acc)
    });
    app.partition_function(node, "sum", |ctx, (): ()| async move {
        let mut sum: i64 = 0;
        let mut n: i64 = 0;
        ctx.scan::<i64>(|k, v| {
            sum = sum
                .wrapping_mul(17)
                .wrapping_add(v.to_native())
                .wrapping_add(k.as_u64().unwrap() as i64);
            n += 1;
        })?;
        Ok(sum.wrapping_add(n))
    });
    Arc::new(app)
}

/// Generates race-free random programs: branches that run concurrently
/// (sends, joined calls) get entities no other branch of the transaction
/// touches; a sync chain may revisit the entities of its own branch.
pub struct ProgramGen {
    pub keys: u64,
    pub depth_max: u32,
    pub abort_rate: f64,
    pub panic_rate: f64,
    pub scan_rate: f64,
}

impl ProgramGen {
    /// A transaction: the root key and its program.
    pub fn transaction(&self, rng: &mut Rng) -> (u64, Vec<Instr>) {
        let mut used = Vec::new();
        let root = self.fresh_or_root(rng, &mut used);
        let mut branch = vec![root];
        let concurrent = !rng.chance(self.scan_rate);
        let prog = self.program(rng, 0, &mut used, &mut branch, concurrent);
        (root, prog)
    }

    fn fresh(&self, rng: &mut Rng, used: &mut Vec<u64>) -> Option<u64> {
        if used.len() as u64 >= self.keys {
            return None;
        }
        loop {
            let k = rng.below(self.keys);
            if !used.contains(&k) {
                used.push(k);
                return Some(k);
            }
        }
    }

    fn fresh_or_root(&self, rng: &mut Rng, used: &mut Vec<u64>) -> u64 {
        self.fresh(rng, used).expect("enough keys")
    }

    fn program(
        &self,
        rng: &mut Rng,
        depth: u32,
        used: &mut Vec<u64>,
        branch: &mut Vec<u64>,
        concurrent: bool,
    ) -> Vec<Instr> {
        let mut prog = Vec::new();
        let len = 1 + rng.below(5);
        for _ in 0..len {
            let roll = rng.below(100);
            let nested = depth < self.depth_max && (used.len() as u64) + 4 < self.keys;
            let instr = match roll {
                0..=29 => Instr::Read,
                30..=42 => Instr::Write(rng.below(100) as i64),
                43..=49 => Instr::Add(rng.below(100) as i64 - 30),
                50..=52 => Instr::Delete,
                53..=69 if nested => {
                    // A sync call: revisit an entity of this branch, or a new one.
                    let k = if rng.chance(0.3) {
                        branch[rng.below(branch.len() as u64) as usize]
                    } else {
                        let k = self.fresh_or_root(rng, used);
                        branch.push(k);
                        k
                    };
                    let p = self.program(rng, depth + 1, used, branch, concurrent);
                    if rng.chance(0.3) {
                        Instr::CallIf(2, k, p)
                    } else {
                        Instr::Call(k, p)
                    }
                }
                70..=77 if nested && concurrent => {
                    let k = self.fresh_or_root(rng, used);
                    let mut own = vec![k];
                    Instr::Send(k, self.program(rng, depth + 1, used, &mut own, concurrent))
                }
                78..=83 if nested && concurrent => {
                    let k1 = self.fresh_or_root(rng, used);
                    let k2 = self.fresh_or_root(rng, used);
                    let p1 = self.program(rng, depth + 1, used, &mut vec![k1], concurrent);
                    let p2 = self.program(rng, depth + 1, used, &mut vec![k2], concurrent);
                    Instr::Join(k1, p1, k2, p2)
                }
                84..=89 if !concurrent => Instr::Scan(rng.below(u64::from(NODE_PARTITIONS)) as u32),
                90..=94 => Instr::Random,
                _ if rng.chance(self.abort_rate) => Instr::AbortIf(2 + rng.below(5)),
                _ if rng.chance(self.panic_rate) => Instr::PanicIf(2 + rng.below(5)),
                _ => Instr::Read,
            };
            prog.push(instr);
        }
        prog
    }
}

pub fn program_request(app: &App, root: u64, prog: &[Instr]) -> Request {
    let mut bytes = Vec::new();
    encode_program(prog, &mut bytes);
    Request {
        function: app.resolve("node", "run").unwrap(),
        address: Address::Entity(Key::from(root)),
        args: Payload::encode(&bytes),
        client: None,
    }
}

// ---------------------------------------------------------------------------
// The serial oracle.

#[allow(unused_imports)] // Each test binary uses its part.
pub use styx_engine::oracle::{Checked, Oracle, State, check_run, state_diff};

/// Runs a simulation to the end and checks it against the serial oracle.
pub fn run_and_check(sim: &mut Sim, app: &Arc<App>, limits: CallLimits, initial: &[(OpId, Key, Value)]) -> Checked {
    sim.run();
    let replies = sim.take_replies();
    let history = sim.take_history();
    check_run(app, limits, initial, &sim.logs(), &history, &replies, &sim.state())
}

// ---------------------------------------------------------------------------
// The seed swarm (`styx_engine::sim::swarm`), replaying in this test crate.

#[allow(unused_imports)] // each test crate uses some
pub use styx_engine::sim::swarm::{env_u64, seeds, seeds_of, test_name};

/// The command that replays `seed` of the test `test` in this test crate.
pub fn replay_command(test: Option<&str>, seed: u64) -> String {
    styx_engine::sim::swarm::replay_command(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"), test, seed)
}

/// Runs `run(seed)` for every seed of `seeds`, in order; the first that
/// fails prints itself and the command that replays it, and fails the test.
pub fn swarm(seeds: Vec<u64>, run: impl FnMut(u64)) {
    styx_engine::sim::swarm::swarm(seeds, env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"), run)
}

// ---------------------------------------------------------------------------
// Partition moves.

/// The partition map the moves in `batches` make, from the default one:
/// each epoch's moves applied at its end, in tid order, as every shard does.
pub fn map_of_log<'a>(app: &App, shards: u16, batches: impl IntoIterator<Item = &'a Batch>) -> PartitionMap {
    let mut by_epoch: std::collections::BTreeMap<Epoch, Vec<(u64, Move)>> = Default::default();
    for b in batches {
        for (tid, r) in &b.txns {
            if let Some(m) = Move::of(r) {
                by_epoch
                    .entry(b.epoch)
                    .or_default()
                    .push((*tid, m.expect("a logged move is valid")));
            }
        }
    }
    let mut map = PartitionMap::new(app, shards);
    for moves in by_epoch.values_mut() {
        map.apply(moves);
    }
    map
}

/// Between epochs with no copy under way: every shard holds `map` (with
/// the moves it has queued applied: a snapshot may keep a queue), and
/// every entity lives on the shard it names.
pub fn assert_placed(sim: &Sim, map: &PartitionMap, at: &str) {
    for s in 0..sim.n_shards() {
        let shard = sim.shard(s);
        assert_eq!(
            &shard.partition_map().settled(),
            map,
            "{at}: shard {s} holds another map"
        );
        shard.for_each_entity(|op, key, _| {
            let owner: ShardId = shard.owner_now(op, key);
            assert_eq!(owner, s, "{at}: {key} of {op:?} on shard {s}");
        });
    }
}

// ---------------------------------------------------------------------------
// Shard handovers.

/// The layouts the handovers in `batches` make from `initial`: `(e,
/// layout)` holds from epoch `e` on (each epoch's handovers decided at its
/// end, in tid order, as if none waited for a copy: once the engine's
/// queue is empty it holds the last one).
#[allow(dead_code)] // Each test binary uses its part.
pub fn layouts_of_log<'a>(initial: &Layout, batches: impl IntoIterator<Item = &'a Batch>) -> Vec<(Epoch, Layout)> {
    let mut by_epoch: std::collections::BTreeMap<Epoch, Vec<(u64, Handover)>> = Default::default();
    for b in batches {
        for (tid, r) in &b.txns {
            if let Some(h) = Handover::of(r) {
                by_epoch
                    .entry(b.epoch)
                    .or_default()
                    .push((*tid, h.expect("a logged handover is valid")));
            }
        }
    }
    let mut layout = initial.clone();
    let mut out = vec![(0, layout.clone())];
    for (epoch, mut hs) in by_epoch {
        if !layout.decide(epoch, &mut hs, false, true).is_empty() {
            out.push((epoch + 1, layout.clone()));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Moves, handovers and snapshot files of the bank.

/// The request that moves the bank's partition `partition` to shard `to`.
pub fn move_to(partition: u32, to: ShardId) -> Request {
    Move {
        op: OpId(0),
        partition,
        to,
        share: None,
    }
    .request()
}

/// The request that hands `shard` to `node`.
pub fn hand(shard: ShardId, node: u16) -> Request {
    Handover { shard, node }.request()
}

/// A shard's snapshot file: its entities and meta.
pub type SnapshotFile = (State, Vec<u8>);

/// Every shard's file of every snapshot epoch with all files complete:
/// per epoch, per shard.
pub fn complete_snapshots(chunks: &[SnapshotChunk], shards: u16) -> BTreeMap<Epoch, Vec<SnapshotFile>> {
    let mut state = vec![State::new(); shards as usize];
    let mut writing = vec![false; shards as usize];
    let mut at: BTreeMap<Epoch, Vec<Option<SnapshotFile>>> = BTreeMap::new();
    for c in chunks {
        let i = c.shard as usize;
        if c.base && !writing[i] {
            // A whole file (after a hand-off): a new chain.
            state[i].clear();
        }
        writing[i] = !c.last;
        let s = &mut state[i];
        for (op, k, v) in &c.entries {
            match v {
                Some(v) => s.insert((*op, k.clone()), v.clone()),
                None => s.remove(&(*op, k.clone())),
            };
        }
        if c.last {
            at.entry(c.epoch).or_insert_with(|| vec![None; shards as usize])[c.shard as usize] =
                Some((s.clone(), c.meta.clone()));
        }
    }
    at.into_iter()
        .filter(|(_, per)| per.iter().all(Option::is_some))
        .map(|(e, per)| (e, per.into_iter().map(Option::unwrap).collect()))
        .collect()
}
