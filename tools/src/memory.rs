//! Giving freed memory back, and helper threads the cores' leftovers.
//!
//! The binaries use mimalloc, which returns a
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

/// Puts the calling thread in Linux's `SCHED_IDLE` class: for helper
/// threads whose work (writing a snapshot file) should run only on what
/// the shards leave idle. A shard waking on a core such a thread holds
/// takes it at once; at nice 19 (the first try) the writer still ran
/// 1–2 ms slices and a shard waited up to 4.6 ms for its core (`perf
/// sched timehist`). Lowering a thread's own policy needs no privilege; a
/// failure leaves it as it was.
///
/// It also takes the CPUs of the process's main thread: a helper started
/// from a shard's thread inherits that thread's pinning to one core, where
/// idle time is scarce while another core may have plenty.
pub fn background() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `cpus` is a zeroed cpu_set_t (a plain bit set) written by
    // sched_getaffinity for the main thread (its id is the process id) and
    // read by sched_setaffinity for the calling thread (0), each given its
    // size; `param` is a valid, initialised sched_param. Both outlive the
    // calls.
    unsafe {
        let mut cpus: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut cpus) == 0 {
            libc::sched_setaffinity(0, size, &cpus);
        }
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}
