//! `styxd` under the ways a new user or an outside client tries it (issue
//! 10): limits that hold, safe start-up and shutdown, honest figures, logs
//! fit for a file.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use styx_engine::{Key, Outcome, Payload};
use styx_net::{Body, Frame, Status};

fn styxd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_styxd"))
}

/// A daemon started with its stderr captured.
struct Piped {
    child: Child,
    addr: String,
}

impl Piped {
    /// Starts `styxd ARGS` and waits for its "listening" line.
    fn start(args: &[&str]) -> Piped {
        let mut command = Command::new(styxd());
        command.args(args);
        Piped::spawn(command)
    }

    /// Starts `command` (a `styxd`) and waits for its "listening" line.
    fn spawn(mut command: Command) -> Piped {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("styxd starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if !line.starts_with("styxd listening on ") {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "unexpected first line {line:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let addr = line.split_whitespace().nth(3).unwrap().to_string();
        Piped { child, addr }
    }

    /// SIGTERM; the exit status and everything written to stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: kill(2) with the child's own pid and a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut pipe = self.child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut stderr = String::new();
            pipe.read_to_string(&mut stderr).unwrap();
            stderr
        });
        let status = wait(&mut self.child, Duration::from_secs(20));
        (status, reader.join().unwrap())
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "styxd did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `styxd ARGS` that must fail to start: its exit code and stderr.
fn refused(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(styxd())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("styxd starts");
    let status = wait(&mut child, Duration::from_secs(20));
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!stdout.contains("listening"), "it served: {stdout}");
    (status.code().unwrap_or(-1), stderr)
}

fn status(c: &mut Conn) -> Status {
    let corr = c.send(Body::Status);
    loop {
        let f = c.recv().expect("STATUS answered");
        if f.corr == corr {
            let Body::StatusReply(s) = f.body else { panic!("{f:?}") };
            return s;
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised name: state is the 3rd field overall.
    let rest = &text[text.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn http(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_client_that_never_reads_is_held_at_its_in_flight_limit() {
    let dir = data_dir("harden-in-flight");
    let limit = 1024;
    let d = Daemon::start(
        styxd(),
        &dir,
        &[
            "--shards",
            "1",
            "--fsync",
            "none",
            "--in-flight-max",
            &limit.to_string(),
        ],
    );
    let pid = d.child.id();
    let mut flood = d.connect();
    let n = 1_000_000u32;
    let mut wire = Vec::with_capacity(n as usize * 40);
    for i in 0..n {
        let f = Frame {
            corr: 100 + i,
            body: Body::Get {
                operator: "account".into(),
                key: Key::from(u64::from(i % 1000)),
            },
        };
        styx_net::encode(&f, &mut wire).unwrap();
    }
    let total = wire.len();
    let rss_before = rss_kib(pid);
    let written = Arc::new(AtomicUsize::new(0));
    let mut out = flood.stream.try_clone().unwrap();
    let progress = written.clone();
    let writer = std::thread::spawn(move || {
        for chunk in wire.chunks(64 << 10) {
            out.write_all(chunk).unwrap();
            progress.fetch_add(chunk.len(), Ordering::Relaxed);
        }
    });
    // Nobody reads the answers: the daemon must stop reading the flood
    // once it owes `limit` of them (the client's writes then block).
    let mut watcher = d.connect();
    let mut in_flight_max = 0;
    let (mut last, mut last_change) = (0, Instant::now());
    let began = Instant::now();
    while last_change.elapsed() < Duration::from_millis(1500) && began.elapsed() < Duration::from_secs(60) {
        in_flight_max = in_flight_max.max(status(&mut watcher).in_flight);
        let now = written.load(Ordering::Relaxed);
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let rss_growth_mib = rss_kib(pid).saturating_sub(rss_before) / 1024;
    eprintln!(
        "written {} of {} MiB; in flight at most {in_flight_max}; RSS grew {rss_growth_mib} MiB",
        last >> 20,
        total >> 20
    );
    // The flood's answers owed, and the watcher's own STATUS.
    assert!(in_flight_max > 0);
    assert!(
        in_flight_max as usize <= limit + 1,
        "{in_flight_max} in flight, over {limit}"
    );
    assert!(
        rss_growth_mib < 40,
        "the daemon grew {rss_growth_mib} MiB holding answers nobody reads"
    );
    // Reading drains everything, each GET answered once.
    let mut seen = vec![false; n as usize];
    for _ in 0..n {
        let f = flood.recv().expect("an answer");
        assert!(matches!(f.body, Body::State { value: None }), "{f:?}");
        let i = (f.corr - 100) as usize;
        assert!(!std::mem::replace(&mut seen[i], true), "corr {} answered twice", f.corr);
    }
    writer.join().unwrap();
    assert_eq!(status(&mut watcher).in_flight, 1, "only the STATUS asking");
}

#[test]
fn one_address_for_clients_and_metrics_is_refused() {
    let dir = data_dir("harden-same-address");
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (code, stderr) = refused(&[
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        &addr,
        "--metrics",
        &addr,
        "--shards",
        "1",
    ]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("--listen and --metrics name the same address, {addr}")),
        "{stderr}"
    );
    assert!(!stderr.contains("another styxd"), "{stderr}");
}

#[test]
fn a_second_daemon_on_an_occupied_port_refuses_to_start() {
    let first = Daemon::start(styxd(), &data_dir("harden-port-first"), &["--shards", "1"]);
    let second_dir = data_dir("harden-port-second");
    let (code, stderr) = refused(&[
        "--data-dir",
        second_dir.to_str().unwrap(),
        "--listen",
        &first.addr,
        "--metrics",
        "off",
        "--shards",
        "1",
    ]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains(&first.addr), "{stderr}");
    assert!(stderr.contains("another styxd serves this address"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.child.id())), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The first daemon still serves alone.
    let mut c = first.connect();
    let f = c.call(0, 0, "account", "deposit", Key::from(1u64), Payload::encode(&5i64));
    assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");

    // Any other process on the port: named from /proc.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    let (code, stderr) = refused(&[
        "--data-dir",
        second_dir.to_str().unwrap(),
        "--listen",
        &addr,
        "--metrics",
        "off",
    ]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("another process already listens"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", std::process::id())), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_address_that_cannot_be_bound_is_an_error_not_a_panic() {
    let dir = data_dir("harden-bind");
    // 192.0.2.0/24 is reserved for documentation: never a local address.
    for (listen, metrics) in [("192.0.2.1:7400", "off"), ("127.0.0.1:0", "192.0.2.1:7401")] {
        let (code, stderr) = refused(&[
            "--data-dir",
            dir.to_str().unwrap(),
            "--listen",
            listen,
            "--metrics",
            metrics,
        ]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("192.0.2.1"), "{stderr}");
        assert!(stderr.contains("cannot listen"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn the_metrics_endpoint_caps_its_connections_and_closes_idle_ones() {
    let d = Daemon::start(styxd(), &data_dir("harden-http"), &["--shards", "1"]);
    let metrics = d.metrics.clone().unwrap();
    let idle: Vec<TcpStream> = (0..styx_runtime::server::HTTP_CONNECTIONS_MAX)
        .map(|_| TcpStream::connect(&metrics).unwrap())
        .collect();
    // Once the server has taken them all (on a loaded machine that may
    // take a while), one more is answered 503 at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let began = Instant::now();
        let busy = http(&metrics, "/health");
        if busy.starts_with("HTTP/1.1 503") {
            assert!(began.elapsed() < Duration::from_secs(2));
            break;
        }
        assert!(Instant::now() < deadline, "never refused: {busy}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(idle);
    // Once the server has seen them close (its thread may be parked, and
    // the machine busy), /health answers again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = http(&metrics, "/health");
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused 5 s after the idle connections closed: {answer}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A connection that never sends its request is closed in time.
    let mut silent = TcpStream::connect(&metrics).unwrap();
    let limit = styx_runtime::server::HTTP_REQUEST_TIMEOUT + Duration::from_secs(3);
    silent.set_read_timeout(Some(limit)).unwrap();
    let began = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(silent.read(&mut buf).expect("closed by the server, not timed out"), 0);
    assert!(began.elapsed() < limit);
}

/// A client that trickles bytes without ever completing a HELLO is closed
/// once the handshake's deadline passes, however often it writes (a slot
/// of the connection limit must not be held that way).
#[test]
fn a_handshake_trickled_a_byte_at_a_time_is_closed_at_its_deadline() {
    let d = Daemon::start(styxd(), &data_dir("harden-trickle"), &["--shards", "1"]);
    let mut c = TcpStream::connect(&d.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let began = Instant::now();
    let limit = styx_runtime::server::HANDSHAKE_TIMEOUT + Duration::from_secs(4);
    // A HELLO's header, one byte every second: it never completes.
    let header = [200u8, 0, 0, 0, 1, 1, 9, 0, 0, 0];
    let mut closed = false;
    for byte in header.iter().cycle() {
        let mut buf = [0u8; 64];
        match c.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
        assert!(began.elapsed() < limit, "still open after {:?}", began.elapsed());
        if c.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(900));
    }
    assert!(closed);
    assert!(
        began.elapsed() >= styx_runtime::server::HANDSHAKE_TIMEOUT - Duration::from_secs(1),
        "closed before the deadline: {:?}",
        began.elapsed()
    );
}

#[test]
fn failing_accepts_on_the_metrics_endpoint_do_not_spin() {
    // A daemon with few file descriptors left: once they are used up by
    // idle HTTP clients, every accept fails (EMFILE) until one closes.
    let probe = Daemon::start(
        styxd(),
        &data_dir("harden-emfile-probe"),
        &["--shards", "1", "--snapshot-interval-ms", "0"],
    );
    let fds = std::fs::read_dir(format!("/proc/{}/fd", probe.child.id()))
        .unwrap()
        .count() as u64;
    drop(probe);
    let dir = data_dir("harden-emfile");
    let limit = fds + 6;
    let mut cmd = Command::new(styxd());
    cmd.args(["--data-dir", dir.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log", "error"])
        .args(["--shards", "1", "--snapshot-interval-ms", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("styxd listening on "), "{line:?}");
    let metrics = line
        .split("(metrics ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .to_string();
    let pid = child.id();
    let _idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(&metrics).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let (before, began) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let ticks_per_s = (cpu_ticks(pid) - before) as f64 / began.elapsed().as_secs_f64();
    let hz = 100.0; // USER_HZ on Linux.
    eprintln!(
        "{fds} fds at rest; CPU {:.0}% while accepts fail",
        ticks_per_s / hz * 100.0
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(ticks_per_s < 0.5 * hz, "{:.0}% CPU", ticks_per_s / hz * 100.0);
}

#[test]
fn profiling_a_tpcc_run_reports_every_stage() {
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["bench", "tpcc", "--shards", "2", "--duration", "1", "--warmup", "0"])
        .args(["--no-serial", "--quiet", "--json", "--in-flight", "4"])
        .env("STYX_PROFILE", "1")
        .output()
        .expect("styx runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("stage busy/idle %"), "{stderr}");
    assert!(stderr.contains("exec3"), "{stderr}");
}

#[test]
fn status_rates_cover_the_last_second() {
    let d = Daemon::start(styxd(), &data_dir("harden-rates"), &["--shards", "1"]);
    let mut c = d.connect();
    let n = 3000;
    for k in 0..n {
        c.send(request(
            0,
            0,
            "account",
            "deposit",
            Key::from(k % 100),
            Payload::encode(&1i64),
        ));
    }
    for _ in 0..n {
        let f = c.recv().unwrap();
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    }
    let busy = status(&mut c);
    assert!(busy.committed >= n, "{busy:?}");
    assert!(busy.committed_per_s > 0 && busy.epochs_per_s > 0, "{busy:?}");
    // Quiet for more than a second: nothing happened in the last one
    // (averages since the start would never come to 0). Polled: the
    // samples are taken by a task a loaded machine may run late.
    std::thread::sleep(Duration::from_millis(1500));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let quiet = status(&mut c);
        assert!(quiet.committed >= n, "{quiet:?}");
        if (quiet.committed_per_s, quiet.aborted_per_s, quiet.epochs_per_s) == (0, 0, 0) {
            break;
        }
        assert!(Instant::now() < deadline, "rates after 6.5 s of quiet: {quiet:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn logs_off_a_terminal_have_no_colour_codes_and_json_lines_parse() {
    for format in ["text", "json"] {
        let dir = data_dir(&format!("harden-logs-{format}"));
        let d = Piped::start(&[
            "--data-dir",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "off",
            "--shards",
            "1",
            "--log",
            "info",
            "--log-format",
            format,
        ]);
        let mut c = Conn::connect(&d.addr);
        c.call(0, 0, "account", "deposit", Key::from(1u64), Payload::encode(&1i64));
        let (status, stderr) = d.stop();
        assert!(status.success(), "{stderr}");
        assert!(!stderr.contains('\x1b'), "escape codes in:\n{stderr}");
        assert!(stderr.contains("serving"), "{stderr}");
        if format == "json" {
            for line in stderr.lines() {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not JSON: {line:?}"));
                assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
            }
        }
    }
}

#[test]
fn sigterm_stops_cleanly_every_time() {
    let dir = data_dir("harden-sigterm");
    let args: Vec<String> = [
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--metrics",
        "off",
        "--shards",
        "2",
        "--log",
        "warn",
        "--snapshot-interval-ms",
        "20",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for round in 0..12u64 {
        let d = Piped::start(&args);
        let mut c = Conn::connect(&d.addr);
        for k in 0..200u64 {
            c.send(request(
                0,
                0,
                "account",
                "deposit",
                Key::from(k),
                Payload::encode(&1i64),
            ));
        }
        for _ in 0..200 {
            c.recv().unwrap();
        }
        // Stop right as snapshots are being written and committed.
        std::thread::sleep(Duration::from_millis(round * 7 % 40));
        let (status, stderr) = d.stop();
        assert!(status.success(), "round {round}: {status}\n{stderr}");
        assert!(!stderr.contains("panicked"), "round {round}:\n{stderr}");
    }
}

/// A parked shard that the machine did not run for a while says so: a
/// host stall shows in the daemon's log, not only in its clients' tails.
/// Stopping the process (SIGSTOP) for 0.6 s is such a stall.
#[test]
fn a_shard_the_machine_did_not_run_warns_that_it_woke_late() {
    let dir = data_dir("late_wake");
    let d = Piped::start(&[
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--metrics",
        "off",
        "--log",
        "warn",
        "--shards",
        "2",
    ]);
    let pid = d.child.id() as i32;
    // Idle by now: its shards are parked on their timers.
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) with the child's own pid and valid signals.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(600));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // Its parked shards wake ≥ 0.4 s after their timers (a quiet park is
    // at most 0.2 s) and warn as soon as they run again.
    std::thread::sleep(Duration::from_millis(1000));
    let (_, stderr) = d.stop();
    assert!(
        stderr.contains("woke") && stderr.contains("after its timer"),
        "no late-wake warning; stderr:\n{stderr}"
    );
}

/// 1 000 pages of whole partitions (~3 000 accounts, ~75 KB each): ~75 MB
/// of answers, pipelined on one connection.
fn scans(n: u32) -> Vec<u8> {
    let mut wire = Vec::new();
    for i in 0..n {
        let f = Frame {
            corr: 100 + i,
            body: Body::Request(styx_net::Request {
                client: 0,
                seq: 0,
                ack: 0,
                operator: "account".into(),
                function: styx_engine::SCAN_FUNCTION.into(),
                target: styx_engine::Address::Partition(i % 64),
                args: Payload::encode(&(None::<Vec<u8>>, styx_engine::SCAN_LIMIT_MAX)),
            }),
        };
        styx_net::encode(&f, &mut wire).unwrap();
    }
    wire
}

#[test]
fn a_client_that_leaves_too_many_answers_unread_is_closed_alone() {
    let dir = data_dir("harden-output-bytes");
    let bound = styx_net::OUTPUT_BYTES_MAX_FLOOR;
    let d = Daemon::start(
        styxd(),
        &dir,
        &[
            "--shards",
            "1",
            "--fsync",
            "none",
            "--preload",
            "ycsbt",
            "--keys",
            "200000",
            "--output-bytes-max",
            &bound.to_string(),
        ],
    );
    let n = 1_000u32;
    // A client that reads is never cut off, though its answers come in
    // bursts of tens of MB, far past the bound.
    let mut reader = d.connect();
    reader.stream.write_all(&scans(n)).unwrap();
    for _ in 0..n {
        let f = reader.recv().expect("every answer, to a client that reads");
        assert!(matches!(f.body, Body::Committed { .. }), "{f:?}");
    }
    // One that reads nothing is dropped once its answers were past the
    // bound for `OUTPUT_STALL` with its socket taking (next to) nothing.
    let mut hog = d.connect();
    hog.stream.write_all(&scans(n)).unwrap();
    std::thread::sleep(styx_runtime::server::OUTPUT_STALL + Duration::from_secs(3));
    // What the kernel had taken before, then the end.
    let mut answered = 0;
    while let Some(f) = hog.recv() {
        assert!(matches!(f.body, Body::Committed { .. }), "{f:?}");
        answered += 1;
    }
    assert!(answered < n, "all {n} answers were kept for a client that did not read");
    // Nobody else noticed: a new client is served, nothing is owed but its
    // own STATUS, and the metrics count the connection dropped.
    let mut c = d.connect();
    let f = c.call(7, 1, "account", "deposit", Key::from(3u64), Payload::encode(&5i64));
    assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    assert_eq!(status(&mut c).in_flight, 1);
    let metrics = d.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("styx_connections_dropped_total") && l.ends_with(" 1")),
        "{metrics}"
    );
}

/// A client that hangs up with requests still running holds its
/// connection's slot until they end (their answers dropped): one that
/// hangs up and dials again in a loop holds no more of the server than
/// one that stays (`connections_max` × its limits).
#[test]
fn a_connection_closed_with_requests_running_holds_its_slot_until_they_end() {
    let dir = data_dir("harden-closed-running");
    // Two transactions an epoch: an epoch starts at once with two
    // waiting; one alone waits 1 s for more.
    let d = Daemon::start(
        styxd(),
        &dir,
        &[
            "--shards",
            "1",
            "--fsync",
            "epoch",
            "--preload",
            "ycsbt",
            "--keys",
            "100",
            "--connections-max",
            "1",
            "--epoch-txns-max",
            "2",
            "--epoch-gather-us",
            "1000000",
        ],
    );
    let committed = || -> u64 {
        d.http_get("/metrics")
            .lines()
            .filter(|l| l.starts_with("styx_transactions_committed_total"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let before = committed();
    let mut a = d.connect();
    // The client hangs up with a reset (the server reads what came
    // before it).
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) on the stream's own descriptor with a valid
    // option value of the size given.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&a.stream),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    // An epoch starts now: the next one alone waits a second from now.
    let f = a.call(9, 1, "account", "deposit", Key::from(9u64), Payload::encode(&5i64));
    assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    // Three requests in one write, then the reset at once: the first two
    // run in an epoch at once and their answers cannot be written, while
    // the third waits for the next epoch.
    let n = 3;
    let mut wire = Vec::new();
    for client in 1..=n {
        let body = request(
            client,
            1,
            "account",
            "deposit",
            Key::from(client),
            Payload::encode(&5i64),
        );
        styx_net::encode(
            &Frame {
                corr: 100 + client as u32,
                body,
            },
            &mut wire,
        )
        .unwrap();
    }
    a.stream.write_all(&wire).unwrap();
    drop(a);
    let began = Instant::now();
    let mut refusals = 0;
    loop {
        assert!(began.elapsed() < Duration::from_secs(20), "never served again");
        let mut s = TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = Vec::new();
        let body = Body::Hello {
            version_min: 1,
            version_max: 1,
            client: "test".into(),
        };
        styx_net::encode(&Frame { corr: 1, body }, &mut hello).unwrap();
        s.write_all(&hello).unwrap();
        let mut decoder = styx_net::Decoder::new(styx_net::FRAME_LEN_MAX);
        let mut buf = vec![0u8; 4096];
        let answer = loop {
            let n = s.read(&mut buf).expect("an answer to HELLO");
            assert!(n > 0, "closed without an answer");
            if let Some(f) = decoder.decode(&mut &buf[..n]) {
                break f.unwrap();
            }
        };
        match answer.body {
            Body::Welcome(_) => break,
            Body::Error { code, .. } if code == styx_net::ErrorCode::TOO_MANY_CONNECTIONS => refusals += 1,
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Served only once none of the three runs any more.
    let ran = committed() - before - 1;
    eprintln!("refused {refusals} times; served after {:?}", began.elapsed());
    assert!(refusals > 0, "a slot that was free at once");
    assert_eq!(
        ran,
        n,
        "served again with {} of the hung-up client's requests still running",
        n - ran
    );
}

/// The usual soft limit on open files, 1 024, is the default
/// `connections_max` alone: clients holding every connection would leave
/// the node no file for its logs, snapshots and links. `styxd` raises its
/// limit to the hard limit, and warns when even that is too low.
#[test]
fn styxd_raises_its_open_file_limit_and_warns_when_it_is_too_low() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) with a valid resource and a live rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    let hard = limit.rlim_max;
    // (A machine whose hard limit is below what styxd needs by default
    // only checks the warning.)
    for (case, hard) in [("ample", hard), ("low", hard.min(512))] {
        if case == "ample" && hard < 4096 {
            continue;
        }
        let dir = data_dir(&format!("harden-nofile-{case}"));
        let mut command = Command::new(styxd());
        command.args([
            "--data-dir",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "off",
            "--shards",
            "1",
            "--log",
            "warn",
        ]);
        let lowered = libc::rlimit {
            rlim_cur: 256,
            rlim_max: hard,
        };
        // SAFETY: setrlimit(2) between fork and exec: async-signal-safe,
        // touching only a value copied into the closure.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let d = Piped::spawn(command);
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.child.id())).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
        let soft: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
        assert_eq!(soft, [hard.to_string(), hard.to_string()], "{case}: {line}");
        let (status, stderr) = d.stop();
        assert!(status.success(), "{stderr}");
        let warned = stderr.contains("may open fewer files than connections_max");
        assert_eq!(warned, case == "low", "{case}: {stderr}");
    }
}
