//! The execution host: what running functions see of their shard.
//!
//! A function's `Ctx` reaches the shard through its frame's `Rc<dyn Host>`,
//! which is this `Exec`. It reads and writes through the access record its
//! invocation was admitted with (`frame.access`, in the current phase's
//! table), so a read sees the transaction's own buffered write first and
//! the epoch-start value otherwise, and a write only buffers; calls become
//! `Invoke` messages routed to the owner of their address.
//!
//! Invariants: functions never write the store: a write goes into the
//! access record and reaches the store only when its transaction's writes
//! are applied (a phase-1 commit, a `Finish`). Each host method borrows
//! `st` only for its own duration, never across a function's await.
//!
//! Why a `RefCell` behind an `Rc`: frames outlive the call that created
//! them (a function's future keeps its `Ctx`), and the shard's own methods
//! reach the same state; one owner with interior mutability is the
//! simplest shape that needs no `unsafe`.

use crate::abort::Abort;
use crate::app::App;
use crate::codec::Payload;
use crate::ctx::{CallLimits, Frame, Host, NO_INDEX};
use crate::epoch::{Tables, Write};
use crate::ids::{Address, Epoch, FnId, ShardId};
use crate::key::{Key, partition_of};
use crate::message::{Invoke, Message, Parent, Phase};
use crate::partition_map::PartitionMap;
use crate::store::Store;
use crate::value::Value;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

/// The state functions read and write, and where their messages go.
pub(super) struct ExecState {
    pub(super) store: Store,
    pub(super) tables: Tables,
    pub(super) phase: Phase,
    pub(super) epoch: Epoch,
    /// Messages for this shard itself, handled a budget per step.
    pub(super) local: VecDeque<Message>,
    /// How many messages at the front of `local` were warmed (`run_local`).
    pub(super) local_warmed: usize,
    /// Messages for peers, per destination, until the driver drains them.
    pub(super) outbox: Vec<Vec<Message>>,
    /// In phase 3, the serial queue position of the running transaction.
    pub(super) step: u32,
    /// A scan's page of slots, kept between scans (no allocation per page).
    pub(super) scan_slots: Vec<u32>,
}

pub(super) struct Exec {
    pub(super) app: Arc<App>,
    pub(super) limits: CallLimits,
    pub(super) id: ShardId,
    pub(super) n_shards: u16,
    /// Where partitions live: changed only between epochs (moves), read
    /// to route every call.
    pub(super) map: RefCell<PartitionMap>,
    pub(super) st: RefCell<ExecState>,
    /// A scan's rows, copied out of the store so that the function's
    /// closure runs without `st` borrowed (it may use its `Ctx`); kept
    /// between scans, so a page of inline values allocates nothing.
    pub(super) scan_rows: RefCell<Vec<(Key, Value)>>,
}

impl Exec {
    /// The partition, owner and key hash of an address.
    #[inline]
    pub(super) fn locate(&self, function: FnId, address: &Address) -> (u32, ShardId, u64) {
        let (partition, hash) = match address {
            Address::Entity(key) => {
                let hash = key.hash64();
                (
                    partition_of(hash, self.app.operator_info(function.op).partitions()),
                    hash,
                )
            }
            Address::Partition(p) => (*p, 0),
        };
        (partition, self.map.borrow().owner(function.op, partition), hash)
    }

    pub(super) fn route(&self, st: &mut ExecState, to: ShardId, msg: Message) {
        if to == self.id {
            st.local.push_back(msg);
        } else {
            st.outbox[to as usize].push(msg);
        }
    }

    /// In phase 2, a write into a partition that a fallback transaction
    /// scans must be ordered against that scan: only writers recorded in
    /// phase 1 are in the partition's queue; any other drifted.
    fn check_scanned(st: &ExecState, frame: &Frame) -> Result<(), Abort> {
        if st.phase != Phase::Fallback {
            return Ok(());
        }
        let part_slot = st.tables.accesses[st.phase.index()][frame.access.get() as usize].part_slot;
        if let Some(p) = st.tables.touched_ordinal(&st.store, part_slot) {
            let q = st.tables.touched[p as usize].queue;
            if q != NO_INDEX && !st.tables.in_queue(q, frame.tid) {
                frame.force(Abort::drift());
                return Err(Abort::drift());
            }
        }
        Ok(())
    }

    /// Sends `msg` to every shard, this one included.
    pub(super) fn broadcast(&self, msg: Message) {
        let mut st = self.st.borrow_mut();
        for to in 0..self.n_shards {
            self.route(&mut st, to, msg.clone());
        }
    }
}

impl Host for Exec {
    fn app(&self) -> &App {
        &self.app
    }

    fn limits(&self) -> CallLimits {
        self.limits
    }

    fn read(&self, frame: &Frame, f: &mut dyn FnMut(Option<&Value>)) -> Result<(), Abort> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        let a = &mut st.tables.accesses[st.phase.index()][frame.access.get() as usize];
        frame.mark.set(a.writes);
        match &a.write {
            Write::Put(v) => f(Some(v)),
            Write::Delete => f(None),
            Write::None => {
                a.read = true;
                let slot = st.tables.touched[a.touched as usize].slot;
                f(st.store.entries[slot as usize].value.as_ref());
            }
            Write::Add(d) => {
                // The sum needs the value it adds to: a read.
                a.read = true;
                let slot = st.tables.touched[a.touched as usize].slot;
                let sum = Value::added(st.store.entries[slot as usize].value.as_ref(), *d)?;
                f(Some(&sum));
            }
        }
        Ok(())
    }

    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        let phase = st.phase;
        let index = frame.access.get() as usize;
        Exec::check_scanned(st, frame)?;
        let a = &mut st.tables.accesses[phase.index()][index];
        a.write = match value {
            Some(v) => Write::Put(v),
            None => Write::Delete,
        };
        a.writes = a.writes.wrapping_add(1);
        Ok(())
    }

    fn add(&self, frame: &Frame, delta: i64) -> Result<(), Abort> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        let phase = st.phase;
        let index = frame.access.get() as usize;
        Exec::check_scanned(st, frame)?;
        let a = &st.tables.accesses[phase.index()][index];
        let write = match &a.write {
            Write::Put(v) => Write::Put(Value::added(Some(v), delta)?),
            Write::Delete => Write::Put(Value::of_i64(delta)),
            Write::Add(d) => Write::Add(d.wrapping_add(delta)),
            Write::None => {
                // The type, not the value: not a read. Only a put or a
                // delete could change it, and either conflicts with an add.
                let slot = st.tables.touched[a.touched as usize].slot;
                if let Some(v) = &st.store.entries[slot as usize].value
                    && v.as_i64().is_none()
                {
                    return Err(Value::not_addable(v));
                }
                Write::Add(delta)
            }
        };
        let a = &mut st.tables.accesses[phase.index()][index];
        a.write = write;
        a.writes = a.writes.wrapping_add(1);
        Ok(())
    }

    fn written_since(&self, frame: &Frame, mark: u32) -> bool {
        let st = self.st.borrow();
        st.tables.accesses[st.phase.index()][frame.access.get() as usize].writes != mark
    }

    fn call(&self, frame: &Frame, child: u32, function: FnId, address: Address, args: Payload, _sync: bool) {
        let (partition, owner, hash) = self.locate(function, &address);
        let mut st = self.st.borrow_mut();
        let msg = Message::Invoke(Invoke {
            epoch: st.epoch,
            phase: st.phase,
            tid: frame.tid,
            now_us: frame.now_us,
            function,
            address,
            partition,
            hash,
            args,
            seed: frame.child_seed(child),
            depth: frame.depth + 1,
            parent: Parent::Call {
                shard: self.id,
                task: frame.task.get(),
                child,
            },
            step: st.step,
        });
        self.route(&mut st, owner, msg);
    }

    fn scan(
        &self,
        frame: &Frame,
        after: Option<&[u8]>,
        at_most: usize,
        f: &mut dyn FnMut(&Key, &Value),
    ) -> Result<(), Abort> {
        // Taken, not borrowed: a scan inside the closure finds it empty.
        let mut rows = std::mem::take(&mut *self.scan_rows.borrow_mut());
        rows.clear();
        {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            let phase = st.phase;
            let op = frame.function.op;
            st.tables.accesses[phase.index()][frame.access.get() as usize].read = true;
            // Read your own writes: this transaction's buffered writes to
            // entities of the partition past `after`, overlaid below.
            let mut own: Vec<(&Key, Option<Value>)> = Vec::new();
            if let Some(txn) = st.tables.txn(frame.tid) {
                let mut at = st.tables.head(phase, txn);
                while at != NO_INDEX {
                    let a = &st.tables.accesses[phase.index()][at as usize];
                    let t = &st.tables.touched[a.touched as usize];
                    if let (Some(key), true) = (&t.key, t.op == op && t.partition == frame.partition)
                        && after.is_none_or(|after| key.as_bytes() > after)
                    {
                        match &a.write {
                            Write::None => {}
                            Write::Put(v) => own.push((key, Some(v.clone()))),
                            Write::Delete => own.push((key, None)),
                            Write::Add(d) => {
                                let base = st.store.entries[t.slot as usize].value.as_ref();
                                own.push((key, Some(Value::added(base, *d)?)));
                            }
                        }
                    }
                    at = a.next;
                }
            }
            // Each own write hides at most one stored entity, so the first
            // `at_most` rows are among the first `at_most + own` stored.
            let mut slots = std::mem::take(&mut st.scan_slots);
            st.store.scan_into(
                op,
                frame.partition,
                after,
                at_most.saturating_add(own.len()),
                &mut slots,
            );
            let entry = |slot: u32| {
                let e = &st.store.entries[slot as usize];
                (e.key.as_ref().expect("entity entry"), e.value.as_ref())
            };
            if own.is_empty() {
                // The common case: the page as stored, copied in one go.
                rows.extend(slots.iter().map(|&slot| {
                    let (k, v) = entry(slot);
                    (k.clone(), v.expect("a scan lists live entities").clone())
                }));
            } else {
                let mut merged: Vec<(&Key, Option<Value>)> = slots
                    .iter()
                    .map(|&slot| {
                        let (k, v) = entry(slot);
                        (k, v.cloned())
                    })
                    .collect();
                for (key, new) in own {
                    match merged.binary_search_by(|r| r.0.cmp(key)) {
                        Ok(i) => merged[i].1 = new,
                        Err(i) => merged.insert(i, (key, new)),
                    }
                }
                rows.extend(
                    merged
                        .into_iter()
                        .filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
                        .take(at_most),
                );
            }
            st.scan_slots = slots;
        }
        for (k, v) in &rows {
            f(k, v);
        }
        rows.clear();
        *self.scan_rows.borrow_mut() = rows;
        Ok(())
    }
}
