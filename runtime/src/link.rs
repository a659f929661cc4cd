//! Links between shards: a queue per direction, and a doorbell.
//!
//! A shard spins while an epoch runs, so checking its links must cost a load,
//! not a syscall or a waker registration. glommio's shared channels register
//! a waker on every empty poll and are only re-checked between task-queue
//! runs (every preemption tick while a task keeps yielding), which measured
//! here as ~60 ms batch latency for a spinning shard. So batches travel in
//! plain mutex-guarded queues (a handful per epoch: the lock is never the
//! cost), and glommio's channel mesh carries only doorbells that wake a
//! parked shard.
//!
//! Parking is race-free by the usual pairing of sequentially consistent
//! operations: a receiver sets `parked` and then re-checks its queues; a
//! sender publishes its batch and then reads `parked`. One of them sees the
//! other's write, so a batch is never left behind a sleeping shard.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One direction between two shards.
pub(crate) struct Link<T> {
    queue: Mutex<VecDeque<T>>,
    len: AtomicUsize,
}

/// Every link of a mesh of `n` shards, and who is parked.
pub(crate) struct Links<T> {
    n: usize,
    links: Vec<Link<T>>,
    parked: Vec<AtomicBool>,
    capacity: usize,
}

impl<T> Links<T> {
    pub fn new(n: usize, capacity: usize) -> Links<T> {
        Links {
            n,
            links: (0..n * n)
                .map(|_| Link {
                    queue: Mutex::new(VecDeque::new()),
                    len: AtomicUsize::new(0),
                })
                .collect(),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            capacity,
        }
    }

    fn link(&self, from: usize, to: usize) -> &Link<T> {
        &self.links[from * self.n + to]
    }

    /// Queues `item` from `from` to `to`; gives it back if the link is full.
    /// Returns whether `to` was parked (and must be rung).
    pub fn send(&self, from: usize, to: usize, item: T) -> Result<bool, T> {
        let link = self.link(from, to);
        {
            let mut q = link.queue.lock().expect("link lock");
            if q.len() >= self.capacity {
                return Err(item);
            }
            q.push_back(item);
            link.len.store(q.len(), Ordering::SeqCst);
        }
        Ok(self.parked[to].swap(false, Ordering::SeqCst))
    }

    /// Takes the oldest item from `from` to `to`, if any.
    pub fn recv(&self, from: usize, to: usize) -> Option<T> {
        let link = self.link(from, to);
        if link.len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut q = link.queue.lock().expect("link lock");
        let item = q.pop_front();
        link.len.store(q.len(), Ordering::SeqCst);
        item
    }

    /// Whether anything waits for `to`.
    pub fn any_for(&self, to: usize) -> bool {
        (0..self.n).any(|from| self.link(from, to).len.load(Ordering::SeqCst) > 0)
    }

    /// Marks `shard` parked; returns false (and unmarks it) if something
    /// arrived meanwhile, in which case it must not sleep.
    pub fn park(&self, shard: usize) -> bool {
        self.parked[shard].store(true, Ordering::SeqCst);
        if self.any_for(shard) {
            self.parked[shard].store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub fn unpark(&self, shard: usize) {
        self.parked[shard].store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_per_link_and_bounded() {
        let links = Links::new(2, 2);
        assert_eq!(links.send(0, 1, 1), Ok(false));
        assert_eq!(links.send(0, 1, 2), Ok(false));
        assert_eq!(links.send(0, 1, 3), Err(3));
        assert!(links.any_for(1) && !links.any_for(0));
        assert_eq!(links.recv(0, 1), Some(1));
        assert_eq!(links.recv(0, 1), Some(2));
        assert_eq!(links.recv(0, 1), None);
    }

    #[test]
    fn a_sender_sees_a_parked_receiver() {
        let links = Links::<u8>::new(2, 8);
        assert!(links.park(1));
        assert_eq!(links.send(0, 1, 7), Ok(true), "the sender must ring");
        assert_eq!(links.send(0, 1, 8), Ok(false), "rung once");
        assert!(!links.park(1), "data is waiting: do not sleep");
    }
}
