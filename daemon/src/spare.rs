//! A spare's client port.
//!
//! A node of a cluster that runs no shard in a round (`shards = 0` in the
//! cluster file, or it handed every shard away) has no engine and so no
//! shard frontend, yet clients must reach it: MAP lists it, `styx bench`
//! and `styx` connect to every node, and an operator asks it LAYOUT and
//! STATUS. So while it is a spare a thread accepts on its client port and
//! serves each connection on a thread of its own through the sans-I/O
//! session the shards' frontends use (`styx_net::Session`): HELLO, PING,
//! MAP, LAYOUT, STATUS and PLACEMENT are answered as any node answers
//! them; REQUEST and GET get `SHUTTING_DOWN` (they did not run; a node
//! LAYOUT names runs them). Plain blocking threads: a spare serves a few
//! connections, and has no executor to serve them on.
//!
//! When a round gives the node shards, [`SpareFront::stop`] closes the
//! listener before the shards' frontends bind the port; each connection's
//! thread sees the stop within [`TICK`] and closes it, and its client
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
use styx_runtime::server::HANDSHAKE_TIMEOUT;

/// How often a connection's thread looks at the stop flag while its client
/// is silent.
const TICK: Duration = Duration::from_millis(50);
/// Bytes read from a socket, and answers written to it, at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// What a spare answers: the cluster as its round sees it.
pub(crate) struct SpareServer {
    pub app: Arc<App>,
    pub name: String,
    pub map: Map,
    pub layout: Layout,
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

/// The listener and its connections while the node is a spare.
pub(crate) struct SpareFront {
    addr: SocketAddr,
    /// What the connections answer: the latest round's.
    server: Arc<Mutex<Arc<SpareServer>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl SpareFront {
    /// Listens on `addr` (the node's client port) and serves `server`.
    pub fn start(addr: SocketAddr, server: Arc<SpareServer>, limits: Limits) -> std::io::Result<SpareFront> {
        let listener = listen(addr)?;
        let addr = listener.local_addr()?;
        let server = Arc::new(Mutex::new(server));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (server.clone(), stop.clone());
        let accept = std::thread::Builder::new()
            .name("styx-spare".into())
            .spawn(move || accept_loop(listener, s, st, limits))?;
        tracing::info!(%addr, "a spare: serving MAP, LAYOUT and STATUS on the client port");
        Ok(SpareFront {
            addr,
            server,
            stop,
            accept: Some(accept),
        })
    }

    /// A new round, still a spare: answer from it.
    pub fn update(&self, server: Arc<SpareServer>) {
        *self.server.lock().expect("spare server") = server;
    }

    /// Closes the listener and every connection, and waits for them.
    pub fn stop(mut self) {
        self.close();
    }

    fn close(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept (it sees the flag and ends).
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        let _ = accept.join();
    }
}

impl Drop for SpareFront {
    fn drop(&mut self) {
        self.close();
    }
}

/// A listener on `addr` whose sockets share the port with the shards'
/// frontends' (`SO_REUSEPORT`, as glommio binds them): a connection the
/// spare accepted, or its `TIME_WAIT`, must not keep them from binding
/// once the node runs shards again.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

fn accept_loop(listener: TcpListener, server: Arc<Mutex<Arc<SpareServer>>>, stop: Arc<AtomicBool>, limits: Limits) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("a spare's accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if CONNECTIONS.load(Ordering::Relaxed) >= limits.connections_max {
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
            continue;
        }
        let (server, stop, limits) = (server.clone(), stop.clone(), limits.clone());
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        match std::thread::Builder::new()
            .name("styx-spare-conn".into())
            .spawn(move || {
                serve(stream, &server, &stop, &limits);
                CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
            }) {
            Ok(_) => {}
            Err(e) => {
                CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!("a spare cannot serve a connection: {e}");
            }
        }
    }
}

/// One connection, until it closes, its session closes or the front stops.
fn serve(mut stream: TcpStream, server: &Mutex<Arc<SpareServer>>, stop: &AtomicBool, limits: &Limits) {
    let _ = stream.set_nodelay(true);
    // A client that does not read holds its thread this long at most.
    let _ = stream.set_write_timeout(Some(styx_runtime::server::OUTPUT_STALL));
    if stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut session = Session::new(limits);
    let handshake_by = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut out = Vec::with_capacity(CHUNK_BYTES);
    loop {
        while session.has_output() {
            out.clear();
            let n = session.write(&mut out, CHUNK_BYTES);
            if stream.write_all(&out).is_err() {
                return;
            }
            session.written(n);
        }
        if session.is_closing() || stop.load(Ordering::SeqCst) {
            return;
        }
        if !session.is_welcomed() && Instant::now() >= handshake_by {
            return;
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
