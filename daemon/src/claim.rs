//! A daemon's claim on the addresses it listens on.
//!
//! Every shard listens on the client port with SO_REUSEPORT, so that the
//! kernel spreads connections over the shards. The same option would let
//! a second daemon (of the same user) bind that port too, and the kernel
//! would then split clients between two databases. So before any shard
//! binds, the daemon claims each address:
//!
//! 1. an exclusive lock on a file named after the address, in the temporary
//!    directory, held until the daemon exits: two daemons starting at the
//!    same moment cannot both pass, and the loser names the winner (the
//!    file holds its pid and data directory);
//! 2. a bind without SO_REUSEPORT, closed at once: it fails when any other
//!    socket listens on the port, whoever opened it (the process is named
//!    from `/proc` when it can be found there).
//!
//! A lock file that cannot be opened (another user's) leaves the check to
//! the bind.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

/// Held while the daemon serves: dropping it releases the addresses.
#[derive(Debug)]
pub struct Claim {
    _locks: Vec<File>,
}

/// Claims `addrs` (`what` names each in messages, e.g. "--listen") for a
/// daemon with its data in `data_dir`; an error says who holds one.
pub fn claim(addrs: &[(&str, SocketAddr)], data_dir: &Path) -> Result<Claim, String> {
    let mut locks = Vec::with_capacity(addrs.len());
    for &(what, addr) in addrs {
        assert!(addr.port() != 0, "{what} {addr}: a port is chosen before it is claimed");
        if let Some(lock) = lock(what, addr, data_dir)? {
            locks.push(lock);
        }
        probe(what, addr)?;
    }
    Ok(Claim { _locks: locks })
}

/// The lock file of `addr`.
fn lock_path(addr: SocketAddr) -> PathBuf {
    std::env::temp_dir().join(format!("styxd-{}-{}.lock", addr.ip(), addr.port()))
}

fn lock(what: &str, addr: SocketAddr, data_dir: &Path) -> Result<Option<File>, String> {
    let path = lock_path(addr);
    let Ok(mut file) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    else {
        return Ok(None);
    };
    let deadline = std::time::Instant::now() + ORPHAN_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                // A holder that is gone (kill -9) keeps its lock until the
                // kernel tears its io_uring down, like its listener (see
                // `probe`): wait for that, not for a live daemon.
                if holder_is_gone(&holder) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                let holder = holder.trim();
                let holder = if holder.is_empty() { "a daemon starting" } else { holder };
                return Err(format!(
                    "{what} {addr}: another styxd serves this address ({holder}); stop it or choose another address"
                ));
            }
            Err(TryLockError::Error(e)) => return Err(format!("{what} {addr}: cannot lock {}: {e}", path.display())),
        }
    }
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    // Best effort: the lock, not its contents, is the claim.
    let _ = file
        .set_len(0)
        .and_then(|()| writeln!(file, "pid {}, data in {}", std::process::id(), dir.display()));
    Ok(Some(file))
}

/// Whether a lock file's text names a process (`pid N, …`) that no longer
/// exists. An empty or unreadable text is a daemon starting: not gone.
fn holder_is_gone(holder: &str) -> bool {
    let pid = holder
        .strip_prefix("pid ")
        .and_then(|r| r.split(',').next())
        .and_then(|p| p.parse::<u32>().ok());
    pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// How long a start waits for the listener of a dead process to go away.
const ORPHAN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn probe(what: &str, addr: SocketAddr) -> Result<(), String> {
    let deadline = std::time::Instant::now() + ORPHAN_WAIT;
    loop {
        match TcpListener::bind(addr) {
            Ok(listener) => {
                drop(listener);
                return Ok(());
            }
            // Connections of a process that died (kill -9) linger in
            // FIN_WAIT on the port and fail this bind too; only a listener
            // is a claim.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && listening_inodes(addr.port()).is_empty() => {
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => match listener_of(addr.port()) {
                Some(who) => {
                    return Err(format!(
                        "{what} {addr}: another process already listens on this address ({who}); stop it or choose another address"
                    ));
                }
                // A listener no process holds: a process that just died,
                // whose io_uring still references its socket until the
                // kernel tears the ring down. The kernel would hand it
                // connections that nobody accepts: wait until it is gone.
                None if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                None => {
                    return Err(format!(
                        "{what} {addr}: a socket no process holds still listens on this address {}s after start (a process that died moments ago?); try again, or choose another address",
                        ORPHAN_WAIT.as_secs()
                    ));
                }
            },
            Err(e) => return Err(format!("{what} {addr}: cannot listen on this address: {e}")),
        }
    }
}

/// The process listening on TCP `port`, as "pid N, NAME", if `/proc` shows it.
fn listener_of(port: u16) -> Option<String> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
                let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                return Some(format!("pid {pid}, {}", name.trim()));
            }
        }
    }
    None
}

/// The sockets listening on TCP `port` (any address), as `socket:[INODE]`.
fn listening_inodes(port: u16) -> Vec<String> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let listening = *state == "0A";
            let on_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port);
            if listening && on_port && *inode != "0" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    inodes
}

/// Held by the tests that claim ports picked free: one of them claims
/// hundreds, and another test's port picked in between may be among them
/// (a claim that then fails names the other test's lock).
#[cfg(test)]
pub(crate) fn one_claiming_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_in_use_is_refused_with_its_listener_named() {
        let _one = one_claiming_test_at_a_time();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        let dir = std::env::temp_dir();
        let e = claim(&[("--listen", addr)], &dir).unwrap_err();
        assert!(e.contains("another process already listens"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(other);
        let held = claim(&[("--listen", addr)], &dir).unwrap();
        // A second claim while the first is held: the lock names the holder.
        let e = claim(&[("--listen", addr)], &dir).unwrap_err();
        assert!(e.contains("another styxd serves this address"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        claim(&[("--listen", addr)], &dir).unwrap();
    }

    #[test]
    fn a_lock_left_by_a_process_that_is_gone_is_waited_for() {
        let _one = one_claiming_test_at_a_time();
        let addr: SocketAddr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let path = lock_path(addr);
        let mut held = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        held.lock().unwrap();
        // As a daemon killed with -9 leaves it while the kernel still holds its files.
        writeln!(held, "pid 4000000000, data in /nowhere").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(held);
        });
        claim(&[("--listen", addr)], &std::env::temp_dir()).expect("the dead holder's lock is waited for");
        release.join().unwrap();
        assert!(holder_is_gone("pid 4000000000, data in /nowhere"));
        assert!(!holder_is_gone(&format!("pid {}, data in /x", std::process::id())));
        assert!(!holder_is_gone(""), "a daemon starting is not gone");
    }
}
