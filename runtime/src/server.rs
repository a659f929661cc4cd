//! The TCP front of a shard: client connections speaking the wire protocol
//! (`docs/protocol.md`), and the HTTP endpoint for `/metrics` and `/health`.
//!
//! Every shard listens on the same port (SO_REUSEPORT: the kernel spreads
//! connections over shards). A connection has a reader task and a writer
//! task on its shard's executor; they meet the shard loop in a shared,
//! single-threaded [`Hub`]: readers queue requests there and wake the loop,
//! the loop's [`TcpFrontend`] submits them to the shard and hands each
//! outcome back to its connection.
//!
//! The protocol is not here: each connection's state is a sans-I/O
//! [`Session`] (`styx_net::session`: handshake, GET translation, answers,
//! the bound on answers owed). This module only moves bytes between a
//! socket and its session, requests and outcomes between sessions and the
//! shard, and wakes whoever waits.
//!
//! Limits hold per connection and per server (connections). A connection
//! owes at most `in_flight_max` answers at a time (see the session); at the
//! limit the reader reads nothing more: the socket's receive buffer fills
//! and TCP stops the client, and one slow or stalled client only ever
//! stalls itself. A connection's memory is thus bounded by its limits: one
//! read chunk, one partial frame (`frame_len_max`), `in_flight_max`
//! answers (and `output_bytes_max` of them queued), `input_bytes_max` of
//! requests at the shard, one write chunk. A framing error closes only
//! its connection, after an ERROR frame.

use crate::Frontend;
use crate::metrics::{Metrics, ShardMetrics};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use styx_engine::{App, Outcome, Reply, Shard, Token};
use styx_net::frame::Status;
use styx_net::{ErrorCode, Limits, Map, Received, Session, error_frame};

/// Bytes a connection reads from its socket at a time.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Bytes of encoded answers a connection hands its socket at a time (more
/// when one answer is larger).
const WRITE_CHUNK_BYTES: usize = 64 << 10;
/// A connection that has not completed its HELLO this long after it was
/// accepted is closed (however the bytes trickle in).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with more than `output_bytes_max` of answers queued for
/// this long, whose socket took less than `output_bytes_max` meanwhile, is
/// dropped: its answers are freed and it is closed (`Stall`).
pub const OUTPUT_STALL: Duration = Duration::from_secs(10);
/// A shard warns of dropped connections at most this often.
const DROP_WARN_INTERVAL: Duration = Duration::from_secs(10);
/// After a failed accept (out of file descriptors, say) a listener waits
/// this long before the next: the failure usually lasts, and retrying at
/// once would spin a core.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
/// A listener whose accepts keep failing says so at most this often.
const ACCEPT_WARN_INTERVAL: Duration = Duration::from_secs(1);
/// HTTP connections (`/metrics`, `/health`) served at once; one more is
/// answered 503 and closed.
pub const HTTP_CONNECTIONS_MAX: usize = 64;
/// An HTTP client has this long to send its request head.
pub const HTTP_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most an HTTP exchange (head read, answer written) may take.
pub const HTTP_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);
/// A client past `HTTP_CONNECTIONS_MAX` has this long to send its request
/// head before it gets its 503 anyway.
const HTTP_BUSY_DRAIN: Duration = Duration::from_millis(200);
/// Bytes of an HTTP request head read at most.
const HTTP_HEAD_LEN_MAX: usize = 4096;
/// How often the totals behind STATUS's rates are sampled (each sample
/// wakes shard 0's executor: an idle daemon's CPU is mostly such wake-ups).
const RATE_SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
/// The window STATUS's rates are taken over.
const RATE_WINDOW: Duration = Duration::from_secs(1);
/// Samples kept: one window's worth and the one just before it.
const RATE_SAMPLES_MAX: usize = (RATE_WINDOW.as_millis() / RATE_SAMPLE_INTERVAL.as_millis()) as usize + 2;

/// What the server of every shard shares.
pub struct ServerShared {
    pub app: Arc<App>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    /// Set to stop: new requests get `SHUTTING_DOWN`, in-flight ones finish.
    pub shutdown: Arc<AtomicBool>,
    /// Connections open, or closed with requests still at the engine
    /// (they hold their slot until those come back), all shards together.
    pub connections: AtomicUsize,
    /// Shards still loading their snapshot or replaying their log: until
    /// it is 0, `/health` answers 503 "recovering" (connections are
    /// accepted and their requests wait).
    pub recovering: AtomicUsize,
    pub started: std::time::Instant,
    pub server_name: String,
    /// This node's id in the cluster (0 alone).
    pub node: u16,
    /// The id of this node's first shard (it samples the node's rates).
    pub first_shard: styx_engine::ShardId,
    /// What MAP answers: the cluster's nodes and the operators' partitions.
    pub map: styx_net::Map,
    /// What LAYOUT answers: which node runs which shard.
    pub layout: styx_net::Layout,
    /// What MEMBERS answers (at LAYOUT's version): the nodes that left
    /// the cluster, ascending.
    pub left: Vec<u16>,
    /// Why serving stopped before it began (a listener could not start):
    /// set by [`ServerShared::fail`].
    pub failure: Mutex<Option<String>>,
    /// Recent totals, for STATUS's rates over the last second.
    pub rates: Rates,
}

impl ServerShared {
    /// Stops the server for `reason` (the first reason given is kept): every
    /// shard's frontend drains and the run ends; the daemon reports it.
    pub fn fail(&self, reason: String) {
        self.failure.lock().expect("failure lock").get_or_insert(reason);
        self.shutdown.store(true, Relaxed);
    }

    /// Why the server stopped, if it failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }
}

/// What every connection's session asks of the server.
impl styx_net::Server for ServerShared {
    fn app(&self) -> &App {
        &self.app
    }

    fn name(&self) -> &str {
        &self.server_name
    }

    fn map(&self) -> &Map {
        &self.map
    }

    fn layout(&self) -> styx_net::Layout {
        self.layout.clone()
    }

    fn members(&self) -> styx_net::Members {
        styx_net::Members {
            version: self.layout.version,
            left: self.left.clone(),
        }
    }

    /// From the local shard with the newest published map (all shards
    /// switch moves at the same epoch; a shard publishes within a
    /// millisecond of its switch).
    fn placement(&self) -> styx_net::Placement {
        let newest = self
            .metrics
            .shards
            .iter()
            .max_by_key(|s| s.map_version.load(Relaxed))
            .expect("a node has a shard");
        newest.placement(self.map.shards, self.map.operators.len())
    }

    fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Relaxed)
    }

    fn status(&self) -> Status {
        status(self)
    }
}

/// Totals at one moment: what a rate is the difference of.
#[derive(Clone, Copy, Debug)]
struct Totals {
    at: Instant,
    committed: u64,
    aborted: u64,
    epochs: u64,
}

impl Totals {
    fn now(m: &Metrics) -> Totals {
        Totals {
            at: Instant::now(),
            committed: m.total(|s| &s.committed),
            aborted: m.total(|s| &s.aborted),
            epochs: m.shards.iter().map(|s| s.epochs.load(Relaxed)).max().unwrap_or(0),
        }
    }
}

/// Totals sampled every `RATE_SAMPLE_INTERVAL` (by a task on the node's
/// first shard), so that STATUS reports rates over the last second rather
/// than averages since the start.
#[derive(Debug)]
pub struct Rates {
    samples: Mutex<VecDeque<Totals>>,
}

impl Rates {
    /// Starts from the totals `metrics` holds now (they outlive a cluster
    /// round; the rates start over with the round).
    pub fn new(metrics: &Metrics) -> Rates {
        Rates {
            samples: Mutex::new(VecDeque::from([Totals::now(metrics)])),
        }
    }

    fn sample(&self, metrics: &Metrics) {
        let now = Totals::now(metrics);
        let mut s = self.samples.lock().expect("rates lock");
        // Keep exactly one sample a window old or older: the rates' base.
        while s.len() >= 2 && now.at.duration_since(s[1].at) >= RATE_WINDOW {
            s.pop_front();
        }
        s.push_back(now);
        assert!(s.len() <= RATE_SAMPLES_MAX, "{} rate samples", s.len());
    }

    /// Commits, aborts and epochs per second since the newest sample at
    /// least a window old (since the start while the server is younger).
    fn per_second(&self, now: &Totals) -> (u64, u64, u64) {
        let s = self.samples.lock().expect("rates lock");
        let base = s
            .iter()
            .rev()
            .find(|t| now.at.duration_since(t.at) >= RATE_WINDOW)
            .or(s.front())
            .copied()
            .expect("a first sample");
        let secs = now.at.duration_since(base.at).as_secs_f64().max(1e-3);
        let rate = |a: u64, b: u64| (a.saturating_sub(b) as f64 / secs).round() as u64;
        (
            rate(now.committed, base.committed),
            rate(now.aborted, base.aborted),
            rate(now.epochs, base.epochs),
        )
    }
}

/// A request on its way from a connection to the shard.
struct Inbound {
    conn: u64,
    corr: u32,
    request: styx_engine::Request,
}

/// One connection's side of the hub: its session and who waits on it.
struct Conn {
    session: Session,
    writer: Option<Waker>,
    reader: Option<Waker>,
    /// The writer and the reader while they wait on their socket: woken
    /// only once the session is over `output_bytes_max` or dropped, so
    /// answers that come meanwhile do not disturb them.
    on_drop: [Option<Waker>; 2],
}

impl Conn {
    fn new(limits: &Limits) -> Conn {
        Conn {
            session: Session::new(limits),
            writer: None,
            reader: None,
            on_drop: [None, None],
        }
    }

    fn wake_writer(&mut self) {
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// Says an answer was queued: the writer has work, and if the queue is
    /// past `output_bytes_max` the writer's stall watch starts.
    fn answered(&mut self) {
        self.wake_writer();
        if self.session.is_over_limit() || self.session.is_dropped() {
            self.wake_watches();
        }
    }

    fn wake_watches(&mut self) {
        for w in self.on_drop.iter_mut().filter_map(Option::take) {
            w.wake();
        }
    }

    /// Ends the connection once its queued answers are written.
    fn close(&mut self) {
        self.session.close();
        self.wake_writer();
    }
}

/// Where connection tasks and the shard loop meet (one per shard).
pub struct Hub {
    inbox: VecDeque<Inbound>,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    loop_waker: Option<Waker>,
    /// The server of the round the shard serves now (its connections answer
    /// MAP, LAYOUT and STATUS from it, and count in it).
    shared: Arc<ServerShared>,
}

/// A shard's connections while it changes rounds on its executor (it stopped
/// for a handover and stays on this node): the next round's frontend of the
/// shard takes them up, with the requests they sent meanwhile and the
/// answers the shard still owes them.
struct Parked {
    shard: styx_engine::ShardId,
    /// The listeners that fed it: they go on feeding it until then.
    slots: Vec<Slot>,
    hub: Rc<RefCell<Hub>>,
    tokens: HashMap<Token, (u64, u32)>,
    next_token: Token,
    metrics: Arc<ShardMetrics>,
}

thread_local! {
    /// This executor's parked connections, by shard.
    static PARKED: RefCell<Vec<Parked>> = const { RefCell::new(Vec::new()) };
}

/// The shard loop's side: submits requests, routes replies.
pub struct TcpFrontend {
    hub: Rc<RefCell<Hub>>,
    shared: Arc<ServerShared>,
    /// Engine token → (connection, correlation id).
    tokens: HashMap<Token, (u64, u32)>,
    next_token: Token,
    metrics: Arc<ShardMetrics>,
    /// This shard finished recovery (and said so in `recovering`).
    serving: bool,
    /// The executor's listeners this frontend serves (see [`Kept`]): let go
    /// at the end.
    slots: Vec<Slot>,
    /// Tasks of this frontend only (the sampling of STATUS's rates).
    tasks: Vec<glommio::Task<()>>,
}

/// Where a listener sends what it accepts: the round's server and, for the
/// client port, a shard's hub and counters.
#[derive(Clone)]
struct Target {
    shared: Arc<ServerShared>,
    hub: Rc<RefCell<Hub>>,
    metrics: Arc<ShardMetrics>,
}

/// A listener's target: `None` while no frontend of its executor serves it
/// (from a frontend's end until the executor's next round takes it up or
/// closes it): a connection accepted then is closed at once, and its
/// client dials again.
type Slot = Rc<RefCell<Option<Target>>>;

/// A listener an executor keeps across the rounds of a run
/// ([`crate::run_rounds`]) while a shard of the executor uses it: a
/// frontend that ends lets go of it, the next one on the executor takes it
/// up. It is not closed at every round's end, where an accept is in
/// flight: glommio's accept is an io_uring operation, and one cancelled
/// after a connection arrived completes with a socket nobody owns — a
/// client that connected and waits for its WELCOME for ever (seen at every
/// handover while every frontend ended and started again, and the executor
/// blocked between rounds). Those the shards that left used are closed at
/// the round's end ([`close_idle_listeners`]), the rest at the executor's
/// end ([`close_listeners`]): a connection arriving in that instant is
/// still stranded.
struct Kept {
    addr: SocketAddr,
    http: bool,
    slot: Slot,
    /// The task that owns the listener: dropped (cancelled) when the
    /// executor ends ([`close_listeners`]).
    task: glommio::Task<()>,
}

thread_local! {
    /// This executor's listeners (its thread is the executor's).
    static KEPT: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

/// Serves `target` from a listener on `addr` this executor keeps and no
/// frontend serves now, or from one bound now (`http`: the HTTP endpoint,
/// else the client port).
fn attach(addr: SocketAddr, http: bool, target: &Target) -> Result<Slot, crate::Error> {
    let idle = KEPT.with_borrow(|kept| {
        kept.iter()
            .find(|k| k.addr == addr && k.http == http && k.slot.borrow().is_none())
            .map(|k| k.slot.clone())
    });
    if let Some(slot) = idle {
        *slot.borrow_mut() = Some(target.clone());
        return Ok(slot);
    }
    let listener = TcpListener::bind(addr).map_err(|e| crate::Error::Listen {
        addr,
        reason: std::io::Error::from(e).to_string(),
    })?;
    let slot: Slot = Rc::new(RefCell::new(Some(target.clone())));
    let task = if http {
        glommio::spawn_local(http_loop(listener, slot.clone()))
    } else {
        glommio::spawn_local(accept_loop(listener, slot.clone()))
    };
    KEPT.with_borrow_mut(|kept| {
        kept.push(Kept {
            addr,
            http,
            slot: slot.clone(),
            task,
        })
    });
    Ok(slot)
}

/// Closes this executor's listeners that no frontend serves (the shards
/// that used them left it at a handover). The executor goes on running, so
/// the accept in flight is cancelled at once; one left open would turn away
/// its share of the port's new connections for as long as no shard comes.
pub(crate) fn close_idle_listeners() {
    KEPT.with_borrow_mut(|kept| kept.retain(|k| k.slot.borrow().is_some()));
}

/// Closes this executor's listeners and the connections parked on it: its
/// rounds are over. The executor must run a little after this (a pass of
/// its ring) for the sockets to close.
pub(crate) fn close_listeners() {
    for p in PARKED.take() {
        abandon(&p.hub);
    }
    for k in KEPT.take() {
        k.slot.borrow_mut().take();
        drop(k.task);
    }
}

/// An HTTP listener this executor keeps and no frontend serves, if any.
fn idle_http() -> Option<Slot> {
    KEPT.with_borrow(|kept| {
        kept.iter()
            .find(|k| k.http && k.slot.borrow().is_none())
            .map(|k| k.slot.clone())
    })
}

impl TcpFrontend {
    /// Starts the shard's listener (and, given `http`, the HTTP endpoint;
    /// on the node's first shard, the sampling of STATUS's rates) and
    /// returns the frontend for the shard loop. `listen` must name a real
    /// port (the daemon resolves port 0 before the shards bind). A listener
    /// that cannot bind is an error; the caller then stops the server with
    /// [`ServerShared::fail`] and runs the shard with [`TcpFrontend::idle`].
    pub fn start(
        shard: &Shard,
        shared: Arc<ServerShared>,
        listen: SocketAddr,
        http: Option<SocketAddr>,
    ) -> Result<TcpFrontend, crate::Error> {
        let mut frontend = TcpFrontend::idle(shard, shared.clone());
        frontend.take_parked(shard.id());
        let target = Target {
            shared: shared.clone(),
            hub: frontend.hub.clone(),
            metrics: frontend.metrics.clone(),
        };
        // A listener that cannot start: the connections taken up from the
        // last round are answered no more (and let go of their slots).
        let attached = |addr, http| attach(addr, http, &target).inspect_err(|_| abandon(&frontend.hub));
        frontend.slots.push(attached(listen, false)?);
        match http {
            Some(addr) => frontend.slots.push(attached(addr, true)?),
            // This executor's shard that served the node's HTTP endpoint
            // is no longer the node's first (a shard with a lower id
            // arrived elsewhere) but stayed: its listener serves this
            // round too (the port is the node's, whichever shard answers).
            None => {
                if let Some(slot) = idle_http() {
                    *slot.borrow_mut() = Some(target);
                    frontend.slots.push(slot);
                }
            }
        }
        if shard.id() == shared.first_shard {
            frontend.tasks.push(glommio::spawn_local(sample_rates(shared)));
        }
        Ok(frontend)
    }

    /// A frontend that listens nowhere: for a shard whose listener could
    /// not start, so that it can take part in the run until it stops.
    pub fn idle(shard: &Shard, shared: Arc<ServerShared>) -> TcpFrontend {
        let metrics = shared.metrics.of(shard.id()).clone();
        TcpFrontend {
            hub: Rc::new(RefCell::new(Hub {
                inbox: VecDeque::new(),
                conns: HashMap::new(),
                next_conn: 0,
                loop_waker: None,
                shared: shared.clone(),
            })),
            shared,
            tokens: HashMap::new(),
            next_token: 1,
            metrics,
            serving: false,
            slots: Vec::new(),
            tasks: Vec::new(),
        }
    }

    /// Takes up the connections the last round of `shard` parked here, if
    /// any (and they counted in the same counters).
    fn take_parked(&mut self, shard: styx_engine::ShardId) {
        let parked = PARKED.with_borrow_mut(|parked| {
            let i = parked.iter().position(|p| p.shard == shard)?;
            Some(parked.swap_remove(i))
        });
        let Some(p) = parked else { return };
        // Free for this round's frontends to take up (this one first).
        for slot in &p.slots {
            slot.borrow_mut().take();
        }
        if !Arc::ptr_eq(&p.metrics, &self.metrics) {
            // Other counters: its gauges would not balance. The clients
            // dial again, as after any round.
            abandon(&p.hub);
            return;
        }
        {
            let mut hub = p.hub.borrow_mut();
            self.shared.connections.fetch_add(hub.conns.len(), Relaxed);
            hub.shared = self.shared.clone();
        }
        self.hub = p.hub;
        self.tokens = p.tokens;
        self.next_token = p.next_token;
    }
}

/// Closes every connection of `hub`: the shard answers nothing more, the
/// sockets close once what is queued is written (the clients retry
/// elsewhere).
fn abandon(hub: &RefCell<Hub>) {
    for c in hub.borrow_mut().conns.values_mut() {
        c.session.abandon();
        c.wake_writer();
    }
}

/// Samples the totals behind STATUS's rates until cancelled.
async fn sample_rates(shared: Arc<ServerShared>) {
    loop {
        glommio::timer::sleep(RATE_SAMPLE_INTERVAL).await;
        shared.rates.sample(&shared.metrics);
    }
}

/// Waits after a failed accept, saying so at most every
/// `ACCEPT_WARN_INTERVAL`.
async fn accept_failed(what: &str, e: &dyn std::fmt::Display, warned: &mut Option<Instant>) {
    if warned.is_none_or(|t| t.elapsed() >= ACCEPT_WARN_INTERVAL) {
        tracing::warn!(error = %e, "{what}: accept failed; retrying every {ACCEPT_RETRY:?}");
        *warned = Some(Instant::now());
    }
    glommio::timer::sleep(ACCEPT_RETRY).await;
}

impl Frontend for TcpFrontend {
    type Output = ();

    fn pump(&mut self, shard: &mut Shard, _now_us: u64) -> bool {
        if shard.is_replaying() {
            // Recovery first: requests wait until the log is replayed.
            return false;
        }
        if !self.serving {
            self.serving = true;
            self.shared.recovering.fetch_sub(1, Relaxed);
            tracing::info!(
                shard = shard.id(),
                since_start_ms = self.shared.started.elapsed().as_secs_f64() * 1e3,
                "recovered: serving"
            );
        }
        let inbound: Vec<Inbound> = self.hub.borrow_mut().inbox.drain(..).collect();
        if inbound.is_empty() {
            return false;
        }
        for i in inbound {
            let token = self.next_token;
            self.next_token += 1;
            match shard.submit(token, i.request) {
                Ok(()) => {
                    self.tokens.insert(token, (i.conn, i.corr));
                }
                Err(abort) => {
                    // It did not run: tid 0.
                    self.metrics.rejected.fetch_add(1, Relaxed);
                    if let Some(c) = self.hub.borrow_mut().conns.get_mut(&i.conn) {
                        c.session.answer(i.corr, 0, &Outcome::Aborted(abort));
                        c.answered();
                    }
                }
            }
        }
        true
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, _now_us: u64) {
        let mut hub = self.hub.borrow_mut();
        for r in replies.drain(..) {
            let Some((conn, corr)) = self.tokens.remove(&r.token) else {
                continue;
            };
            // A connection that is gone is owed nothing.
            if let Some(c) = hub.conns.get_mut(&conn) {
                c.session.answer(corr, r.tid, &r.outcome);
                c.answered();
            }
        }
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut hub = self.hub.borrow_mut();
        // While the shard replays, waiting requests are not work for the
        // loop (`pump` leaves them): a loop woken by them would never sleep
        // and starve the I/O that replay across nodes waits for.
        if hub.inbox.is_empty() || !self.serving {
            hub.loop_waker = Some(cx.waker().clone());
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    fn is_done(&self) -> bool {
        self.shared.shutdown.load(Relaxed) && self.tokens.is_empty() && self.hub.borrow().inbox.is_empty()
    }

    fn finish(self, shard: &Shard) {
        drop(self.tasks);
        // Stopped for a handover and staying on this node: its connections
        // wait here for its next round (the listeners keep feeding them).
        if shard.is_departing()
            && shard.layout().node_of(shard.id()) == self.shared.node
            && !self.shared.shutdown.load(Relaxed)
        {
            PARKED.with_borrow_mut(|parked| {
                parked.push(Parked {
                    shard: shard.id(),
                    slots: self.slots,
                    hub: self.hub,
                    tokens: self.tokens,
                    next_token: self.next_token,
                    metrics: self.metrics,
                })
            });
            return;
        }
        for slot in &self.slots {
            slot.borrow_mut().take();
        }
        abandon(&self.hub);
    }
}

async fn accept_loop(listener: TcpListener, slot: Slot) {
    let mut warned = None;
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                accept_failed("client listener", &e, &mut warned).await;
                continue;
            }
        };
        // No shard serves it now: closed, the client dials again.
        let Some(Target { hub, metrics: m, .. }) = slot.borrow().clone() else {
            continue;
        };
        // Counted in the server its hub serves now (a parked hub is taken
        // up by the next round's).
        let shared = hub.borrow().shared.clone();
        let _ = stream.set_nodelay(true);
        if shared.connections.fetch_add(1, Relaxed) >= shared.limits.connections_max {
            shared.connections.fetch_sub(1, Relaxed);
            glommio::spawn_local(refuse(stream)).detach();
            continue;
        }
        m.connections.fetch_add(1, Relaxed);
        m.connections_total.fetch_add(1, Relaxed);
        let id = {
            let mut h = hub.borrow_mut();
            h.next_conn += 1;
            let id = h.next_conn;
            h.conns.insert(id, Conn::new(&shared.limits));
            id
        };
        let (hub, shared, m) = (hub.clone(), shared.clone(), m.clone());
        glommio::spawn_local(async move {
            serve(id, stream, hub.clone(), shared.clone(), m.clone()).await;
            released(&hub, id).await;
            if let Some(c) = hub.borrow_mut().conns.remove(&id) {
                // Answers never written (the connection died) are owed no more.
                m.frames_owed.fetch_sub(c.session.owed() as u64, Relaxed);
            }
            hub.borrow().shared.connections.fetch_sub(1, Relaxed);
            m.connections.fetch_sub(1, Relaxed);
        })
        .detach();
    }
}

/// Waits, its socket closed, until none of a connection's requests is at
/// the engine (or the engine stopped and answers none): they hold their
/// memory there until they come back, and so the connection holds its
/// slot. Without it a client that hangs up and dials again in a loop could
/// hold any number of `in_flight_max` and `input_bytes_max` at the engine.
/// Their answers are dropped as they come (and stay owed until then).
async fn released(hub: &Rc<RefCell<Hub>>, id: u64) {
    if let Some(c) = hub.borrow_mut().conns.get_mut(&id).filter(|c| c.session.holds_engine()) {
        c.session.drop_answers();
    }
    futures_lite::future::poll_fn(|cx| {
        let mut h = hub.borrow_mut();
        match h.conns.get_mut(&id) {
            Some(c) if c.session.holds_engine() => {
                // Woken by each answer (`Conn::answered`) and by `abandon`.
                c.writer = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    })
    .await;
}

async fn refuse(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let frame = error_frame(
        0,
        ErrorCode::TOO_MANY_CONNECTIONS,
        "the server has too many connections; retry later",
    );
    if styx_net::encode(&frame, &mut buf).is_ok() {
        let _ = stream.write_all(&buf).await;
        let _ = stream.flush().await;
    }
    let _ = stream.close().await;
}

/// Runs one connection until it closes.
async fn serve(id: u64, stream: TcpStream, hub: Rc<RefCell<Hub>>, shared: Arc<ServerShared>, m: Arc<ShardMetrics>) {
    let (reader, writer) = futures_lite::io::split(stream);
    let write_task = glommio::spawn_local(write_loop(
        id,
        writer,
        hub.clone(),
        m.clone(),
        shared.limits.output_bytes_max,
    ));
    read_loop(id, reader, &hub, &m).await;
    if let Some(c) = hub.borrow_mut().conns.get_mut(&id) {
        c.close();
    }
    write_task.await;
}

/// Reads the socket into the session, a frame at a time, and queues the
/// requests it yields for the shard; returns when the connection ends or
/// the session closes.
async fn read_loop(
    id: u64,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
    hub: &Rc<RefCell<Hub>>,
    metrics: &ShardMetrics,
) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    // Bytes read and not handed to the session yet: `buf[start..end]`.
    let (mut start, mut end) = (0, 0);
    // One deadline for the whole handshake, not per read: a byte every
    // few seconds must not hold a connection (and a slot) without HELLO.
    let handshake_by = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        // Back-pressure: a session owing `in_flight_max` answers (or with
        // `input_bytes_max` of requests at the shard, or half of
        // `output_bytes_max` queued) takes no input, so nothing more is
        // read until an answer has been written.
        let welcomed = futures_lite::future::poll_fn(|cx| {
            let mut h = hub.borrow_mut();
            let Some(c) = h.conns.get_mut(&id).filter(|c| !c.session.is_closing()) else {
                return Poll::Ready(None);
            };
            if c.session.wants_input() {
                Poll::Ready(Some(c.session.is_welcomed()))
            } else {
                c.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        let Some(welcomed) = welcomed else {
            return;
        };
        if start == end {
            // A session dropped while the read waits ends it (the client
            // may never send again).
            let dropped = async {
                until(hub, id, 1, Session::is_dropped).await;
                Err(std::io::Error::other("the session was dropped"))
            };
            let read = if welcomed {
                futures_lite::future::or(reader.read(&mut buf), dropped).await
            } else {
                let timeout = async {
                    glommio::timer::sleep(handshake_by.saturating_duration_since(std::time::Instant::now())).await;
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no HELLO"))
                };
                futures_lite::future::or(reader.read(&mut buf), futures_lite::future::or(timeout, dropped)).await
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(n) => (start, end) = (0, n),
            }
        }
        let mut h = hub.borrow_mut();
        let h = &mut *h;
        let Some(c) = h.conns.get_mut(&id) else {
            return;
        };
        // The read above may have waited while the session changed: closed
        // (a shutdown, or the cluster lost a node and the shard stopped) —
        // then the bytes are dropped — or at its limit — then they wait.
        if c.session.is_closing() {
            return;
        }
        if !c.session.wants_input() {
            continue;
        }
        let mut input = &buf[start..end];
        // Every frame read gets exactly one answer (an ERROR at worst):
        // owed from now until the writer has written it. Counted before the
        // session serves it, so that a STATUS counts itself ("frames
        // awaiting an answer"), and taken back if no frame was complete.
        metrics.frames_owed.fetch_add(1, Relaxed);
        let received = c.session.receive(&mut input, &*h.shared);
        start = end - input.len();
        match received {
            // The chunk ended inside a frame; the session keeps its part.
            Received::More => {
                metrics.frames_owed.fetch_sub(1, Relaxed);
                continue;
            }
            Received::Answered => c.answered(),
            Received::Request { corr, request } => {
                h.inbox.push_back(Inbound {
                    conn: id,
                    corr,
                    request,
                });
                if let Some(w) = h.loop_waker.take() {
                    w.wake();
                }
            }
        }
        if c.session.is_closing() {
            c.answered();
            return;
        }
    }
}

fn status(shared: &ServerShared) -> Status {
    let m = &shared.metrics;
    let uptime_ms = shared.started.elapsed().as_millis() as u64;
    let now = Totals::now(m);
    let (committed_per_s, aborted_per_s, epochs_per_s) = shared.rates.per_second(&now);
    Status {
        shards: m.shards.len() as u16,
        epoch: m.shards.iter().map(|s| s.epoch.load(Relaxed)).max().unwrap_or(0),
        uptime_ms,
        committed: now.committed,
        aborted: now.aborted,
        committed_per_s,
        aborted_per_s,
        epochs_per_s,
        connections: shared.connections.load(Relaxed) as u32,
        in_flight: m.total(|s| &s.frames_owed) as u32,
    }
}

/// Writes the session's answers to the socket a chunk at a time; returns
/// when the socket fails or the session is closing with nothing left.
async fn write_loop(
    id: u64,
    mut writer: futures_lite::io::WriteHalf<TcpStream>,
    hub: Rc<RefCell<Hub>>,
    metrics: Arc<ShardMetrics>,
    output_bytes_max: usize,
) {
    let mut buf = Vec::with_capacity(WRITE_CHUNK_BYTES);
    let stall = Stall {
        limit: output_bytes_max as u64,
        written: Cell::new(0),
        window: Cell::new(None),
    };
    loop {
        // The answers taken stay owed (and the reader held back) until the
        // socket has taken their bytes.
        let taken = futures_lite::future::poll_fn(|cx| {
            let mut h = hub.borrow_mut();
            let Some(c) = h.conns.get_mut(&id) else {
                return Poll::Ready(0);
            };
            buf.clear();
            let taken = c.session.write(&mut buf, WRITE_CHUNK_BYTES);
            if !c.session.is_over_limit() {
                // The queue only shrinks here: under the limit again.
                stall.window.set(None);
            }
            // A closing session still writes the answers of the requests
            // at the engine (a client that half-closed reads them).
            if taken > 0 || (c.session.is_closing() && !c.session.awaits_engine()) || c.session.is_dropped() {
                Poll::Ready(taken)
            } else {
                c.writer = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        if taken == 0 {
            break;
        }
        // A client that does not read blocks this write; see `Stall`.
        let write = async {
            let written = writer.write_all(&buf).await.is_ok() && writer.flush().await.is_ok();
            Some(written)
        };
        if futures_lite::future::or(write, stall.watch(&hub, id)).await != Some(true) {
            break;
        }
        stall.written.set(stall.written.get() + buf.len() as u64);
        if let Some(c) = hub.borrow_mut().conns.get_mut(&id) {
            c.session.written(taken);
            metrics.frames_owed.fetch_sub(taken as u64, Relaxed);
            c.wake_reader();
        }
        if buf.capacity() > 2 * WRITE_CHUNK_BYTES {
            // A large answer went out: do not keep its buffer.
            buf = Vec::with_capacity(WRITE_CHUNK_BYTES);
        }
    }
    let dropped = hub.borrow().conns.get(&id).is_some_and(|c| c.session.is_dropped());
    if dropped {
        // Nothing is written to it again: closing would flush into a
        // socket its client does not read. The socket closes once the
        // reader ends too.
        metrics.connections_dropped.fetch_add(1, Relaxed);
        thread_local!(static WARNED: Cell<Option<Instant>> = const { Cell::new(None) });
        if WARNED.get().is_none_or(|t| t.elapsed() >= DROP_WARN_INTERVAL) {
            WARNED.set(Some(Instant::now()));
            tracing::warn!(
                stall_s = OUTPUT_STALL.as_secs(),
                "a client left more than output_bytes_max of answers queued and read less than that in the stall: its connection is closed, its answers dropped (styx_connections_dropped_total counts them)"
            );
        }
    } else {
        let _ = writer.close().await;
    }
    if let Some(c) = hub.borrow_mut().conns.get_mut(&id) {
        c.session.close();
        c.wake_reader();
    }
}

/// A connection's watch for a client that leaves its answers unread. Once
/// its queue is past `output_bytes_max` a window of `OUTPUT_STALL` opens;
/// if the queue is still past it at the window's end and the socket took
/// less than `output_bytes_max` meanwhile, the client is not reading (a
/// socket whose peer reads nothing still takes a trickle, as the kernel
/// compacts its buffers, so "no write finished" would never be seen) and
/// the session is dropped. A client that reads — at `output_bytes_max` per
/// `OUTPUT_STALL`, 6.4 MB/s by default — is never cut off, however large
/// its burst of answers.
struct Stall {
    limit: u64,
    /// Bytes the socket took so far.
    written: Cell<u64>,
    /// The window open: since when, and `written` then.
    window: Cell<Option<(Instant, u64)>>,
}

impl Stall {
    /// Resolves (`None`) once the session is dropped, by this watch or
    /// otherwise; pending while the client keeps up.
    async fn watch(&self, hub: &Rc<RefCell<Hub>>, id: u64) -> Option<bool> {
        loop {
            let (since, written) = match self.window.get() {
                Some(w) => w,
                None => {
                    until(hub, id, 0, |s| s.is_over_limit() || s.is_dropped()).await;
                    if !hub.borrow().conns.get(&id).is_some_and(|c| c.session.is_over_limit()) {
                        return None;
                    }
                    let w = (Instant::now(), self.written.get());
                    self.window.set(Some(w));
                    w
                }
            };
            glommio::timer::sleep((since + OUTPUT_STALL).saturating_duration_since(Instant::now())).await;
            let mut h = hub.borrow_mut();
            let c = h.conns.get_mut(&id)?;
            if c.session.is_dropped() {
                return None;
            }
            if !c.session.is_over_limit() {
                self.window.set(None);
            } else if self.written.get() - written < self.limit {
                c.session.drop_answers();
                c.wake_watches();
                c.wake_reader();
                return None;
            } else {
                // It reads, if slowly: a new window.
                self.window.set(Some((Instant::now(), self.written.get())));
            }
        }
    }
}

/// Resolves once connection `id`'s session is as `ready` says (or the
/// connection is gone), waiting in `Conn::on_drop[slot]` (0: the writer,
/// 1: the reader), which `Conn::answered` wakes once the session is over
/// `output_bytes_max` or dropped.
async fn until(hub: &Rc<RefCell<Hub>>, id: u64, slot: usize, ready: fn(&Session) -> bool) {
    futures_lite::future::poll_fn(|cx| {
        let mut h = hub.borrow_mut();
        match h.conns.get_mut(&id) {
            Some(c) if !ready(&c.session) => {
                if !c.on_drop[slot].as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    c.on_drop[slot] = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    })
    .await
}

/// A minimal HTTP/1.1 endpoint: `GET /metrics` (Prometheus text),
/// `GET /health` and `GET /schema` (the application's schema as JSON). At most `HTTP_CONNECTIONS_MAX` connections at once, each
/// given `HTTP_REQUEST_TIMEOUT` to send its request head.
async fn http_loop(listener: TcpListener, slot: Slot) {
    let open = Rc::new(std::cell::Cell::new(0usize));
    let mut warned = None;
    // The server it last served: while no frontend serves the endpoint (a
    // round's end until the listener is taken up or closed), it answers
    // from that one rather than fail the scrape.
    let mut last: Option<Arc<ServerShared>> = None;
    loop {
        let mut stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                accept_failed("HTTP listener", &e, &mut warned).await;
                continue;
            }
        };
        if let Some(t) = slot.borrow().as_ref() {
            last = Some(t.shared.clone());
        }
        let Some(shared) = last.clone() else {
            continue;
        };
        if open.get() >= HTTP_CONNECTIONS_MAX {
            glommio::spawn_local(async move {
                // Read the request first (briefly): closing with it unread
                // would reset the connection, and the client could lose
                // the 503 or fail writing its request.
                let drain = async {
                    glommio::timer::sleep(HTTP_BUSY_DRAIN).await;
                    None
                };
                let _ = futures_lite::future::or(read_head(&mut stream), drain).await;
                let _ = stream
                    .write_all(&http_response("503 Service Unavailable", "text/plain", "busy\n"))
                    .await;
                let _ = stream.close().await;
            })
            .detach();
            continue;
        }
        open.set(open.get() + 1);
        let (shared, open) = (shared.clone(), open.clone());
        glommio::spawn_local(async move {
            // The head within `HTTP_REQUEST_TIMEOUT`, the whole exchange
            // within `HTTP_EXCHANGE_TIMEOUT`: a client that never reads its
            // answer must not hold a slot (64 such would keep `/health`
            // busy).
            let exchange = async {
                let timeout = async {
                    glommio::timer::sleep(HTTP_REQUEST_TIMEOUT).await;
                    None
                };
                let Some(head) = futures_lite::future::or(read_head(&mut stream), timeout).await else {
                    return;
                };
                let path = head.split_whitespace().nth(1).unwrap_or("");
                let (status, body, kind) = match path {
                    "/metrics" => ("200 OK", shared.metrics.render(), "text/plain; version=0.0.4"),
                    "/health" if shared.shutdown.load(Relaxed) => {
                        ("503 Service Unavailable", "stopping\n".into(), "text/plain")
                    }
                    "/health" if shared.recovering.load(Relaxed) > 0 => {
                        ("503 Service Unavailable", "recovering\n".into(), "text/plain")
                    }
                    "/health" => ("200 OK", "ok\n".into(), "text/plain"),
                    "/schema" => ("200 OK", shared.app.schema().to_json(), "application/json"),
                    _ => (
                        "404 Not Found",
                        "try /metrics, /health or /schema\n".into(),
                        "text/plain",
                    ),
                };
                let _ = stream.write_all(&http_response(status, kind, &body)).await;
            };
            let deadline = glommio::timer::sleep(HTTP_EXCHANGE_TIMEOUT);
            futures_lite::future::or(exchange, async {
                deadline.await;
            })
            .await;
            let _ = futures_lite::future::or(stream.close(), async {
                glommio::timer::sleep(HTTP_REQUEST_TIMEOUT).await;
                Ok(())
            })
            .await;
            open.set(open.get() - 1);
        })
        .detach();
    }
}

/// Reads an HTTP request head (at most `HTTP_HEAD_LEN_MAX` bytes); `None`
/// if the connection ends first.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = vec![0u8; HTTP_HEAD_LEN_MAX];
    let mut len = 0;
    while len < buf.len() {
        match stream.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => len += n,
        }
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// An HTTP/1.1 answer that closes the connection.
pub fn http_response(status: &str, kind: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
