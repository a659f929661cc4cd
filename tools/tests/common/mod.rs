//! Test support: start the real `styxd` binary and talk to it with a small
//! blocking client built on the protocol codec.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use styx_engine::{Address, Key, Outcome, Payload, Tid};
use styx_net::{Body, Decoder, Frame, Request};

/// A running daemon.
pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub metrics: Option<String>,
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub args: Vec<String>,
}

/// A finished command's stdout then stderr, as text.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh data directory under the target directory (on disk, not tmpfs).
pub fn data_dir(name: &str) -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("styxd-tests")
        .join(name);
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    base
}

impl Daemon {
    pub fn start(bin: &Path, dir: &Path, extra: &[&str]) -> Daemon {
        let mut args: Vec<String> = vec![
            "--data-dir".into(),
            dir.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--metrics".into(),
            "127.0.0.1:0".into(),
            "--log".into(),
            "warn".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Daemon::spawn(bin.to_path_buf(), dir.to_path_buf(), args)
    }

    fn spawn(bin: PathBuf, dir: PathBuf, args: Vec<String>) -> Daemon {
        let mut child = Command::new(&bin)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("styxd starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("styxd listening on "),
            "unexpected first line: {line:?}"
        );
        let addr = line.split_whitespace().nth(3).unwrap().to_string();
        let metrics = line
            .split("(metrics ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .filter(|m| *m != "off")
            .map(str::to_string);
        Daemon {
            child,
            addr,
            metrics,
            dir,
            bin,
            args,
        }
    }

    /// Starts the same daemon again on the same data directory.
    pub fn restart(&self) -> Daemon {
        Daemon::spawn(self.bin.clone(), self.dir.clone(), self.args.clone())
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) with the child's own pid and a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "styxd did not stop within 20 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(&self.addr)
    }

    pub fn http_get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(self.metrics.as_ref().expect("metrics on")).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking connection: send frames, read frames.
pub struct Conn {
    pub stream: TcpStream,
    decoder: Decoder,
    buf: Vec<u8>,
    next_corr: u32,
    pending: std::collections::VecDeque<Frame>,
}

impl Conn {
    pub fn connect(addr: &str) -> Conn {
        Conn::try_connect(addr).expect("WELCOME")
    }

    /// Connects and says HELLO; `None` if the server is not there or
    /// closes the connection before its WELCOME (a node between runs).
    pub fn try_connect(addr: &str) -> Option<Conn> {
        let stream = TcpStream::connect(addr).ok()?;
        // A node tearing a run down may take a connection and never read
        // it: give up on its WELCOME soon.
        stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut c = Conn {
            stream,
            decoder: Decoder::new(styx_net::FRAME_LEN_MAX),
            buf: vec![0; 1 << 16],
            next_corr: 1,
            pending: Default::default(),
        };
        let corr = c.send_checked(Body::Hello {
            version_min: 1,
            version_max: 1,
            client: "test".into(),
        })?;
        let w = c.try_recv()?;
        assert_eq!(w.corr, corr);
        assert!(matches!(w.body, Body::Welcome(_)), "{w:?}");
        c.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Some(c)
    }

    fn send_checked(&mut self, body: Body) -> Option<u32> {
        let corr = self.next_corr;
        self.next_corr += 1;
        let mut out = Vec::new();
        styx_net::encode(&Frame { corr, body }, &mut out).unwrap();
        self.stream.write_all(&out).ok()?;
        Some(corr)
    }

    pub fn send(&mut self, body: Body) -> u32 {
        let corr = self.next_corr;
        self.next_corr += 1;
        self.send_frame(&Frame { corr, body });
        corr
    }

    pub fn send_frame(&mut self, f: &Frame) {
        let mut out = Vec::new();
        styx_net::encode(f, &mut out).unwrap();
        // A server that closed the connection shows in `recv`.
        if let Err(e) = self.stream.write_all(&out) {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ),
                "write: {e}"
            );
        }
    }

    /// The next frame, or `None` when the server closed the connection or
    /// the read timed out.
    pub fn try_recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Some(f);
            }
            let n = match self.stream.read(&mut self.buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            let mut input = &self.buf[..n];
            while let Some(r) = self.decoder.decode(&mut input) {
                self.pending.push_back(r.expect("the server sends valid frames"));
            }
        }
    }

    /// The next frame, or `None` when the server closed the connection.
    pub fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Some(f);
            }
            let n = match self.stream.read(&mut self.buf) {
                Ok(0) => return None,
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return None;
                }
                Err(e) => panic!("read: {e}"),
            };
            let mut input = &self.buf[..n];
            while let Some(r) = self.decoder.decode(&mut input) {
                self.pending.push_back(r.expect("the server sends valid frames"));
            }
        }
    }

    /// Runs one request and returns its answer.
    pub fn call(&mut self, client: u64, seq: u64, op: &str, function: &str, key: Key, args: Payload) -> Frame {
        let corr = self.send(request(client, seq, op, function, key, args));
        let f = self.recv().expect("an answer");
        assert_eq!(f.corr, corr);
        f
    }
}

/// A REQUEST body.
pub fn request(client: u64, seq: u64, op: &str, function: &str, key: Key, args: Payload) -> Body {
    Body::Request(Request {
        client,
        seq,
        ack: 0,
        operator: op.into(),
        function: function.into(),
        target: Address::Entity(key),
        args,
    })
}

/// Deposits `amount` into each of `accounts` as exactly-once client 1
/// (account `k` its seq `k + 1`), pipelined (a call each would wait for an
/// epoch's fsync), and checks every deposit committed.
pub fn deposit_all(c: &mut Conn, accounts: std::ops::Range<u64>, amount: i64) {
    for k in accounts.clone() {
        c.send(request(
            1,
            k + 1,
            "account",
            "deposit",
            Key::from(k),
            Payload::encode(&amount),
        ));
    }
    for _ in accounts {
        let f = c.recv().expect("an answer");
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    }
}

/// Asserts that each of `accounts` holds `start`: accounts that only sat
/// in their partitions, none lost or doubled by a move.
pub fn assert_untouched(c: &mut Conn, accounts: std::ops::Range<u64>, start: i64) {
    for k in accounts.clone() {
        c.send(Body::Get {
            operator: "account".into(),
            key: Key::from(k),
        });
    }
    for k in accounts {
        let f = c.recv().unwrap();
        let Body::State { value } = f.body else { panic!("{f:?}") };
        let balance = value.map(|v| i64::from_le_bytes(v.try_into().unwrap()));
        assert_eq!(balance, Some(start), "account {k}, which only sat in its partition");
    }
}

/// The outcome an answer carries (panics on anything else).
pub fn outcome(f: &Frame) -> (Tid, Outcome) {
    f.body.outcome().unwrap_or_else(|| panic!("not an outcome: {f:?}"))
}
