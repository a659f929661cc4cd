//! Giving freed memory back, and background threads their priority: the binaries use mimalloc, which returns a
//! thread's free pages to the system only when that thread allocates
//! again. A thread that goes idle after a burst (a shard after the load
//! stops, the main thread after `--preload`) keeps them resident for as
//! long as it idles: at 1M accounts ~140 B an account instead of ~80.

/// Releases the calling thread's free pages (and purges the arenas' freed
/// memory) now. Costs a walk of the thread's heap: call it when a thread
/// goes quiet, not on a hot path.
pub fn collect() {
    // SAFETY: `mi_collect` takes no pointers; it releases the calling
    // thread's own free pages and purges freed arena memory.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// The nice value of a thread doing background work.
pub const BACKGROUND_NICE: i32 = 19;

/// Lowers the calling thread's CPU priority to nice [`BACKGROUND_NICE`]:
/// for helper threads whose work (writing a snapshot file) should run on
/// what the shards leave idle. Raising the nice value needs no privilege;
/// a failure leaves the priority as it was.
pub fn background() {
    // SAFETY: `gettid` takes nothing; `setpriority` takes integers (a
    // thread id with PRIO_PROCESS sets that thread's nice value on Linux).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE);
    }
}
