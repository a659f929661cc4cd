//! A spare's client port.
//!
//! A node of a cluster that runs no shard in a round (`shards = 0` in the
//! cluster file, or it handed every shard away) has no engine and so no
//! shard frontend, yet clients must reach it: MAP lists it, `styx bench`
//! and `styx` connect to every node, and an operator asks it LAYOUT and
//! STATUS. So while it is a spare a thread accepts on its client port and
//! serves each connection on a thread of its own through the sans-I/O
//! session the shards' frontends use (`styx_net::Session`): HELLO, PING,
//! MAP, LAYOUT, MEMBERS, STATUS and PLACEMENT are answered as any node answers
//! them; REQUEST and GET get `SHUTTING_DOWN` (they did not run; a node
//! LAYOUT names runs them). Its metrics port, if it has one, answers
//! `/health`, `/metrics` (no shard's series) and `/schema`. Plain
//! blocking threads: a spare serves a few connections, and has no
//! executor to serve them on.
//!
//! When a round gives the node shards, [`SpareFront::stop`] closes the
//! listener before the shards' frontends bind the port and shuts each
//! connection down (its thread, blocked on it, ends at once); its client
//! dials again and reaches an engine.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use styx_engine::App;
use styx_net::frame::{Layout, Map, Placement, Status};
use styx_net::{ErrorCode, Limits, Received, Session, error_frame};
use styx_runtime::Metrics;
use styx_runtime::server::{HANDSHAKE_TIMEOUT, HTTP_CONNECTIONS_MAX, HTTP_REQUEST_TIMEOUT, http_response};

/// How long a busy metrics exchange waits to write its 503.
const TICK: Duration = Duration::from_millis(50);
/// Bytes read from a socket, and answers written to it, at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// What a spare answers: the cluster as its round sees it.
pub(crate) struct SpareServer {
    pub app: Arc<App>,
    pub name: String,
    pub map: Map,
    pub layout: Layout,
    /// The nodes that left the cluster, ascending (MEMBERS).
    pub left: Vec<u16>,
    /// The counters of the shards that ran on this node before (STATUS's
    /// totals, PLACEMENT's newest map): none if it never ran one.
    pub metrics: Arc<Metrics>,
    pub started: Instant,
    pub shutdown: Arc<AtomicBool>,
}

impl styx_net::Server for SpareServer {
    fn app(&self) -> &App {
        &self.app
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn map(&self) -> &Map {
        &self.map
    }

    fn layout(&self) -> Layout {
        self.layout.clone()
    }

    fn members(&self) -> styx_net::Members {
        styx_net::Members {
            version: self.layout.version,
            left: self.left.clone(),
        }
    }

    /// The newest partition map a shard published here, if one ran here
    /// (clients keep the newest they hear of); the default rule if none.
    fn placement(&self) -> Placement {
        match self
            .metrics
            .shards
            .iter()
            .max_by_key(|s| s.map_version.load(Ordering::Relaxed))
        {
            Some(newest) => newest.placement(self.map.shards, self.map.operators.len()),
            None => Placement {
                version: 0,
                moved: vec![Vec::new(); self.map.operators.len()],
            },
        }
    }

    fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    fn runs_no_shard(&self) -> bool {
        true
    }

    fn status(&self) -> Status {
        let m = &self.metrics;
        Status {
            shards: 0,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            committed: m.total(|s| &s.committed),
            aborted: m.total(|s| &s.aborted),
            connections: CONNECTIONS.load(Ordering::Relaxed) as u32,
            ..Status::default()
        }
    }
}

/// Connections a spare serves now (one spare per process).
static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// One connection counted in [`CONNECTIONS`] while it lives (a panic
/// included).
struct Counted;

impl Counted {
    fn new() -> Counted {
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The listeners while the node is a spare: its client port and, if it
/// has one, its metrics port.
pub(crate) struct SpareFront {
    /// What the connections answer: the latest round's.
    server: Arc<Mutex<Arc<SpareServer>>>,
    stop: Arc<AtomicBool>,
    acceptors: Vec<Acceptor>,
    /// The client connections open, each a handle to shut it down with at
    /// the stop (their threads block on them, never polling).
    open: Arc<Mutex<Open>>,
}

/// Client connections by a number of their own.
#[derive(Default)]
struct Open {
    next: u64,
    streams: std::collections::HashMap<u64, TcpStream>,
}

/// A connection listed in [`Open`] while its thread lives.
struct Listed {
    open: Arc<Mutex<Open>>,
    id: u64,
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Ok(mut o) = self.open.lock() {
            o.streams.remove(&self.id);
        }
    }
}

impl SpareFront {
    /// Listens on `addr` (the node's client port) and `metrics` (its
    /// metrics port, if any) and serves `server`.
    pub fn start(
        addr: SocketAddr,
        metrics: Option<SocketAddr>,
        server: Arc<SpareServer>,
        limits: Limits,
    ) -> std::io::Result<SpareFront> {
        let server = Arc::new(Mutex::new(server));
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Open::default()));
        let mut front = SpareFront {
            server: server.clone(),
            stop: stop.clone(),
            acceptors: Vec::new(),
            open: open.clone(),
        };
        let (s, st) = (server.clone(), stop.clone());
        front.acceptors.push(Acceptor::start("styx-spare", addr, move |stream| {
            if CONNECTIONS.load(Ordering::Relaxed) >= limits.connections_max {
                refuse(stream);
                return;
            }
            let Ok(handle) = stream.try_clone() else {
                return;
            };
            let id = {
                let mut o = open.lock().expect("open connections");
                o.next += 1;
                let id = o.next;
                o.streams.insert(id, handle);
                id
            };
            let (server, stop, limits) = (s.clone(), st.clone(), limits.clone());
            let counted = Counted::new();
            let spawned = std::thread::Builder::new().name("styx-spare-conn".into()).spawn({
                let open = open.clone();
                move || {
                    let _counted = counted;
                    // Unlisted however the thread ends (a panic included):
                    // its handle closes the socket too.
                    let _listed = Listed { open, id };
                    serve(stream, &server, &stop, &limits);
                }
            });
            if let Err(e) = spawned {
                open.lock().expect("open connections").streams.remove(&id);
                tracing::warn!("a spare cannot serve a connection: {e}");
            }
        })?);
        if let Some(m) = metrics {
            let s = server.clone();
            let open = Arc::new(AtomicUsize::new(0));
            front
                .acceptors
                .push(Acceptor::start("styx-spare-http", m, move |mut stream| {
                    // An exchange each on a thread of its own, bounded in
                    // time; past the runtime's limit, busy.
                    if open.load(Ordering::Relaxed) >= HTTP_CONNECTIONS_MAX {
                        let _ = stream.set_write_timeout(Some(TICK));
                        let busy = http_response("503 Service Unavailable", "text/plain", "busy\n");
                        let _ = stream.write_all(&busy);
                        return;
                    }
                    let current = s.lock().expect("spare server").clone();
                    open.fetch_add(1, Ordering::Relaxed);
                    let gone = open.clone();
                    let spawned = std::thread::Builder::new()
                        .name("styx-spare-http-conn".into())
                        .spawn(move || {
                            http_exchange(stream, &current);
                            gone.fetch_sub(1, Ordering::Relaxed);
                        });
                    if spawned.is_err() {
                        open.fetch_sub(1, Ordering::Relaxed);
                    }
                })?);
        }
        tracing::info!(%addr, ?metrics, "a spare: serving MAP, LAYOUT and STATUS on the client port");
        Ok(front)
    }

    /// Where the client port (`0`) or the metrics port (`1`) listens.
    #[cfg(test)]
    fn addr_of(&self, i: usize) -> SocketAddr {
        self.acceptors[i]
            .socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("an IP listener")
    }

    /// A new round, still a spare: answer from it.
    pub fn update(&self, server: Arc<SpareServer>) {
        *self.server.lock().expect("spare server") = server;
    }

    /// Closes the listeners and shuts every client connection down: its
    /// thread, blocked reading or writing it, ends at once.
    pub fn stop(mut self) {
        self.close();
    }

    fn close(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for a in &mut self.acceptors {
            a.stop();
        }
        self.acceptors.clear();
        // No connection is accepted any more: every one is listed here.
        for s in self.open.lock().expect("open connections").streams.values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for SpareFront {
    fn drop(&mut self) {
        self.close();
    }
}

/// A listener and the thread accepting on it.
struct Acceptor {
    /// The listener's socket, to wake the blocking accept with a shutdown.
    socket: socket2::Socket,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Listens on `addr` and hands each connection to `on_accept` on a
    /// thread named `name`, until [`Acceptor::stop`].
    fn start(
        name: &str,
        addr: SocketAddr,
        mut on_accept: impl FnMut(TcpStream) + Send + 'static,
    ) -> std::io::Result<Acceptor> {
        let socket = listen(addr)?;
        let listener: TcpListener = socket.try_clone()?.into();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            let mut warned: Option<Instant> = None;
            for stream in listener.incoming() {
                match stream {
                    Ok(s) => on_accept(s),
                    // Shut down (`stop`; Linux): EINVAL from now on.
                    Err(e) if e.kind() == ErrorKind::InvalidInput => return,
                    Err(e) => {
                        // Out of descriptors, say: it usually lasts.
                        if warned.is_none_or(|w| w.elapsed() >= Duration::from_secs(1)) {
                            tracing::warn!("a spare's accept failed: {e}");
                            warned = Some(Instant::now());
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })?;
        Ok(Acceptor {
            socket,
            thread: Some(thread),
        })
    }

    /// Wakes the accept (on Linux a shutdown of the listening socket makes
    /// it fail with EINVAL, in the thread's dup of it too) and waits for
    /// the thread, which only accepts (each connection is served on a
    /// thread of its own, never waited for); the listener closes with it.
    fn stop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A listener on `addr` whose sockets share the port with the shards'
/// frontends' (`SO_REUSEPORT`, as glommio binds them): a connection the
/// spare accepted, or its `TIME_WAIT`, must not keep them from binding
/// once the node runs shards again.
fn listen(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket)
}

/// A connection past the spare's limit: told so, and closed.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(TICK));
    let mut out = Vec::new();
    let _ = styx_net::encode(
        &error_frame(
            0,
            ErrorCode::TOO_MANY_CONNECTIONS,
            "the server holds its maximum of connections",
        ),
        &mut out,
    );
    let _ = stream.write_all(&out);
}

/// One connection, until it closes, its session closes or the front stops.
fn serve(mut stream: TcpStream, server: &Mutex<Arc<SpareServer>>, stop: &AtomicBool, limits: &Limits) {
    let _ = stream.set_nodelay(true);
    // A client that does not read holds its thread this long at most.
    let _ = stream.set_write_timeout(Some(styx_runtime::server::OUTPUT_STALL));
    let mut session = Session::new(limits);
    let handshake_by = Instant::now() + HANDSHAKE_TIMEOUT;
    // Reads block (no wake-ups while the client is silent): until the
    // handshake's deadline, then for as long as it takes; the stop shuts
    // the connection down, which ends them.
    let mut welcomed = false;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut out = Vec::with_capacity(CHUNK_BYTES);
    loop {
        if flush(&mut stream, &mut session, &mut out).is_err() {
            return;
        }
        if session.is_closing() || stop.load(Ordering::SeqCst) {
            return;
        }
        if session.is_welcomed() {
            if !welcomed && stream.set_read_timeout(None).is_err() {
                return;
            }
            welcomed = true;
        } else {
            let left = handshake_by.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                return;
            }
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => return,
        };
        let current = server.lock().expect("spare server").clone();
        let mut input = &buf[..n];
        while !input.is_empty() && !session.is_closing() {
            // Answers owed up to the session's limit: written before it
            // takes more (every one is answered here, at once).
            if !session.wants_input() && flush(&mut stream, &mut session, &mut out).is_err() {
                return;
            }
            match session.receive(&mut input, &*current) {
                Received::More => break,
                Received::Answered => {}
                // A spare's session answers every request itself
                // (`runs_no_shard`).
                Received::Request { corr, .. } => unreachable!("a spare was asked to run request {corr}"),
            }
        }
    }
}

/// Writes every answer the session holds.
fn flush(stream: &mut TcpStream, session: &mut Session, out: &mut Vec<u8>) -> std::io::Result<()> {
    while session.has_output() {
        out.clear();
        let n = session.write(out, CHUNK_BYTES);
        stream.write_all(out)?;
        session.written(n);
    }
    Ok(())
}

/// A spare's metrics port: `/health` answers that it serves (as a spare),
/// `/metrics` the series of no shard (the shards that ran here report on
/// their nodes now), `/schema` the application's.
fn http_exchange(mut stream: TcpStream, server: &SpareServer) {
    // The head within `HTTP_REQUEST_TIMEOUT` in all, however it trickles.
    let by = Instant::now() + HTTP_REQUEST_TIMEOUT;
    let _ = stream.set_write_timeout(Some(HTTP_REQUEST_TIMEOUT));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < 4096 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let none = Metrics {
        shards: Vec::new(),
        ids: Vec::new(),
    };
    let (status, body, kind) = match path {
        "/metrics" => ("200 OK", none.render(), "text/plain; version=0.0.4"),
        "/health" if server.shutdown.load(Ordering::Relaxed) => {
            ("503 Service Unavailable", "stopping\n".into(), "text/plain")
        }
        "/health" => ("200 OK", "ok (a spare: no shard)\n".into(), "text/plain"),
        "/schema" => ("200 OK", server.app.schema().to_json(), "application/json"),
        _ => (
            "404 Not Found",
            "try /metrics, /health or /schema\n".into(),
            "text/plain",
        ),
    };
    let _ = stream.write_all(&http_response(status, kind, &body));
}

#[cfg(test)]
mod tests {
    use super::*;
    use styx_net::{Body, Decoder, Frame, VERSION_MAX, VERSION_MIN};

    /// The spare tests one at a time: they count the process's spare
    /// connections and their threads.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The voluntary context switches of this process's threads named
    /// `name`, summed, and how many there are.
    fn switches_of(name: &str) -> (u64, usize) {
        let (mut switches, mut threads) = (0, 0);
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let path = task.path();
            let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
                continue;
            };
            if comm.trim_end() != name {
                continue;
            }
            let Ok(status) = std::fs::read_to_string(path.join("status")) else {
                continue;
            };
            if let Some(n) = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
            {
                switches += n;
                threads += 1;
            }
        }
        (switches, threads)
    }

    /// Idle clients of a spare cost it nothing: their threads block on
    /// their sockets (they polled a stop flag every 50 ms: 20 wake-ups a
    /// second each, 20 000 for the default `connections_max`), and the
    /// stop still ends them at once, shutting their connections down.
    #[test]
    fn idle_clients_of_a_spare_wake_it_never_and_the_stop_ends_them() {
        let _one = one_at_a_time();
        // The connections of the spare tests before, ending.
        let began = Instant::now();
        while switches_of("styx-spare-conn").1 > 0 || CONNECTIONS.load(Ordering::Relaxed) > 0 {
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "an earlier test's connections stay"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let front = SpareFront::start("127.0.0.1:0".parse().unwrap(), None, server(), Limits::default()).unwrap();
        let addr = front.addr_of(0);
        let mut hello = Vec::new();
        let body = Body::Hello {
            version_min: VERSION_MIN,
            version_max: VERSION_MAX,
            client: "idle".into(),
        };
        styx_net::encode(&Frame { corr: 1, body }, &mut hello).unwrap();
        let mut clients: Vec<TcpStream> = (0..20)
            .map(|_| {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.write_all(&hello).unwrap();
                let mut buf = [0u8; 4096];
                assert!(c.read(&mut buf).unwrap() > 0, "a WELCOME");
                c
            })
            .collect();
        let (before, threads) = switches_of("styx-spare-conn");
        assert_eq!(threads, 20);
        std::thread::sleep(Duration::from_secs(1));
        let (after, _) = switches_of("styx-spare-conn");
        assert!(
            after - before <= 20,
            "{} wake-ups of 20 idle connections in 1 s",
            after - before
        );
        let stopping = Instant::now();
        front.stop();
        for c in &mut clients {
            let mut buf = [0u8; 16];
            assert_eq!(c.read(&mut buf).expect("closed by the spare"), 0);
        }
        while switches_of("styx-spare-conn").1 > 0 || CONNECTIONS.load(Ordering::Relaxed) > 0 {
            assert!(
                stopping.elapsed() < Duration::from_secs(5),
                "connection threads left after the stop"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn server() -> Arc<SpareServer> {
        let mut app = App::new("bank");
        app.operator("account", 4);
        Arc::new(SpareServer {
            app: Arc::new(app),
            name: "spare test".into(),
            map: Map::single(2, "127.0.0.1:1".into(), Vec::new()),
            layout: Layout {
                version: 3,
                node_of: vec![0, 0],
            },
            left: vec![1],
            metrics: Arc::new(Metrics {
                shards: Vec::new(),
                ids: Vec::new(),
            }),
            started: Instant::now(),
            shutdown: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A client that pipelines far past the in-flight limit in one write
    /// (HELLO, 200 PINGs, LAYOUT and a REQUEST, the limit 4) gets every
    /// answer, in order — the request refused as not run, saying why; the
    /// front then stops, closing its port.
    #[test]
    fn a_spare_answers_a_pipeline_past_its_limit_and_stops() {
        let _one = one_at_a_time();
        let limits = Limits {
            in_flight_max: 4,
            ..Limits::default()
        };
        let front = SpareFront::start("127.0.0.1:0".parse().unwrap(), None, server(), limits).unwrap();
        let addr = front.addr_of(0);
        let mut out = Vec::new();
        let hello = Body::Hello {
            version_min: VERSION_MIN,
            version_max: VERSION_MAX,
            client: "test".into(),
        };
        styx_net::encode(&Frame { corr: 1, body: hello }, &mut out).unwrap();
        for corr in 2..202 {
            let ping = Body::Ping { data: u64::from(corr) };
            styx_net::encode(&Frame { corr, body: ping }, &mut out).unwrap();
        }
        styx_net::encode(
            &Frame {
                corr: 202,
                body: Body::Layout,
            },
            &mut out,
        )
        .unwrap();
        let deposit = styx_net::Request {
            client: 9,
            seq: 1,
            ack: 0,
            operator: "account".into(),
            function: "deposit".into(),
            target: styx_engine::Address::Entity(styx_engine::Key::from(1u64)),
            args: styx_engine::Payload::encode(&5i64),
        };
        styx_net::encode(
            &Frame {
                corr: 203,
                body: Body::Request(deposit),
            },
            &mut out,
        )
        .unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(&out).unwrap();
        let mut decoder = Decoder::new(styx_net::FRAME_LEN_MAX);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < 203 {
            let n = c.read(&mut buf).expect("every answer, not a closed connection");
            assert!(n > 0, "closed after {} answers", got.len());
            let mut input = &buf[..n];
            while let Some(f) = decoder.decode(&mut input) {
                got.push(f.expect("a well-formed answer"));
            }
        }
        assert!(matches!(got[0].body, Body::Welcome(_)), "{:?}", got[0]);
        for (i, f) in got[1..201].iter().enumerate() {
            assert_eq!(f.body, Body::Pong { data: i as u64 + 2 });
        }
        assert!(
            matches!(&got[201].body, Body::LayoutReply(l) if l.version == 3),
            "{:?}",
            got[201]
        );
        match &got[202].body {
            Body::Error { code, message } => {
                assert_eq!(*code, ErrorCode::SHUTTING_DOWN);
                assert!(message.contains("runs no shard"), "{message}");
            }
            other => panic!("a request answered {other:?}"),
        }
        assert_eq!(CONNECTIONS.load(Ordering::Relaxed), 1);
        front.stop();
        assert!(TcpStream::connect(addr).is_err(), "the port closed");
    }

    /// The metrics port answers `/health` while a client that sends
    /// nothing holds an exchange, and stopping does not wait for it.
    #[test]
    fn a_spare_answers_health_beside_a_silent_client_and_stops_at_once() {
        let _one = one_at_a_time();
        let front = SpareFront::start(
            "127.0.0.1:0".parse().unwrap(),
            Some("127.0.0.1:0".parse().unwrap()),
            server(),
            Limits::default(),
        )
        .unwrap();
        let http = front.addr_of(1);
        let _silent = TcpStream::connect(http).unwrap();
        let mut c = TcpStream::connect(http).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer)
            .expect("answered before the silent client's timeout");
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("spare"),
            "{answer}"
        );
        let stopping = Instant::now();
        front.stop();
        assert!(stopping.elapsed() < Duration::from_secs(2), "{:?}", stopping.elapsed());
        assert!(TcpStream::connect(http).is_err(), "the metrics port closed");
    }
}
