//! Process facts a benchmark reports: CPU time and peak memory.

/// CPU time (user + system) of the calling thread, in µs.
pub fn thread_cpu_us() -> u64 {
    rusage_us(libc::RUSAGE_THREAD)
}

/// CPU time (user + system) of the whole process, in µs.
pub fn process_cpu_us() -> u64 {
    rusage_us(libc::RUSAGE_SELF)
}

fn rusage_us(who: libc::c_int) -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a full `rusage` into the pointer it is given;
    // the buffer is zero-initialised and only read after a successful call.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: the call succeeded, so the struct is initialised.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The process's peak resident set size so far, in bytes (VmHWM).
pub fn peak_rss_bytes() -> u64 {
    status_kb("VmHWM:") * 1024
}

/// The process's current resident set size, in bytes (VmRSS).
pub fn rss_bytes() -> u64 {
    status_kb("VmRSS:") * 1024
}

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
