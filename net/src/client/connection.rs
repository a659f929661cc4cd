//! One connection to a server: handshake, pipelining, batched writes.
//!
//! After HELLO/WELCOME, two tasks on the caller's glommio executor own the
//! socket's two directions:
//! - the **writer** waits for the outbox to fill, swaps it out and writes it
//!   whole: every frame queued while the previous write was in progress
//!   goes out in one syscall (batching without a timer, so a lone call pays
//!   no delay);
//! - the **reader** decodes answers as they arrive and hands each to the
//!   call waiting on its correlation id, in whatever order they come.
//!
//! A call takes one of `in_flight_max` slots (the least of the server's and
//! the client's limits), picks a free corr, encodes its frame into the
//! outbox and waits for its answer. The slot is released by the reader
//! when the answer arrives, not when the call stops waiting: a call dropped
//! by its deadline still has its frame at the server, which counts it.
//!
//! Bounds: at most `in_flight_max` frames await an answer, so the outbox
//! holds at most that many frames, each at most the server's
//! `frame_len_max` (checked before anything is queued); the reader holds
//! one read chunk and at most one partial frame.
//!
//! When the connection dies (EOF, an I/O error, a fatal ERROR, a protocol
//! violation, [`Connection::close`], or the last handle dropped), every
//! pending call fails at once with [`Error::ConnectionLost`] and every
//! later one too; nothing waits for a timeout.

use super::Outcome;
use super::error::Error;
use super::sync::{Answer, Slots};
use crate::decode::Decoder;
use crate::encode::{encode, encoded_len};
use crate::error::ErrorCode;
use crate::frame::{
    Body, Frame, FrameType, Layout, Map, Members, Placement, Request, Status, VERSION_MAX, VERSION_MIN, Welcome,
};
use crate::limits::{FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, IN_FLIGHT_MAX, PEER_NAME_LEN_MAX};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::Task;
use glommio::net::TcpStream;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use styx_engine::{Key, PAYLOAD_LEN_MAX};

/// Bytes the reader asks the socket for at a time.
const READ_CHUNK_LEN: usize = 64 << 10;

/// A write buffer larger than this is released once its batch is out, so
/// an idle connection stays small after a burst of large frames.
const BATCH_RETAINED_MAX: usize = 256 << 10;

/// How a connection introduces itself and how much it keeps in flight.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The client's name and version in HELLO, for the server's logs; at
    /// most [`PEER_NAME_LEN_MAX`] bytes.
    pub name: String,
    /// The most frames awaiting an answer; the server's `in_flight_max`
    /// caps it further.
    pub in_flight_max: usize,
    /// TCP connect and handshake together must finish within this.
    pub connect_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            name: concat!("styx-net ", env!("CARGO_PKG_VERSION")).to_string(),
            in_flight_max: 1024,
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// Counters of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames queued for the server.
    pub frames_sent: u64,
    /// Socket writes; each carries every frame queued since the one before.
    pub writes: u64,
    /// Answers received.
    pub answers: u64,
    /// The most frames that awaited an answer at once.
    pub in_flight_peak: u64,
}

/// A pipelined connection to a Styx server, on the current glommio
/// executor. Cheap to clone; the clones share the connection, which closes
/// when the last is dropped.
///
/// It sends each frame once: it neither reconnects nor retries (that is
/// [`Client`](super::Client)'s job) and has no deadlines but the connect
/// timeout (wrap calls in `glommio::future::timeout` for one).
///
/// ```no_run
/// use styx_net::client::{ConnectOptions, Connection};
///
/// glommio::LocalExecutor::default().run(async {
///     let conn = Connection::connect("127.0.0.1:7000", &ConnectOptions::default()).await?;
///     println!("{} takes {} frames in flight", conn.welcome().server, conn.in_flight_max());
///     println!("round trip {:?}", conn.ping().await?);
///     Ok::<(), styx_net::client::Error>(())
/// })
/// .unwrap();
/// ```
#[derive(Clone)]
pub struct Connection {
    shared: Rc<Shared>,
    _tasks: Rc<Tasks>,
}

struct Shared {
    peer: SocketAddr,
    welcome: Welcome,
    frame_len_max: usize,
    payload_len_max: usize,
    in_flight_max: usize,
    stream: RefCell<TcpStream>,
    /// One unit per frame that may await an answer.
    slots: Slots,
    /// The calls awaiting an answer, by corr.
    pending: RefCell<HashMap<u32, Pending>>,
    next_corr: Cell<u32>,
    /// Encoded frames the writer has not taken yet.
    outbox: RefCell<Vec<u8>>,
    /// The writer, parked on an empty outbox.
    writer: Cell<Option<Waker>>,
    /// Why the connection closed; `None` while open.
    closed: RefCell<Option<String>>,
    stats: Cell<Stats>,
    pings: Cell<u64>,
}

struct Pending {
    sent: FrameType,
    answer: Rc<Answer<Result<Body, Error>>>,
}

/// The reader and writer tasks; dropping them (with the last handle)
/// closes the connection and cancels both.
struct Tasks {
    shared: Rc<Shared>,
    _reader: Task<()>,
    _writer: Task<()>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.shared.close("the connection was dropped".to_string());
    }
}

impl Connection {
    /// Connects to the first address of `addr` that accepts, says HELLO and
    /// waits for WELCOME. Must run on a glommio executor, which will run the
    /// connection's tasks.
    pub async fn connect(addr: impl ToSocketAddrs, options: &ConnectOptions) -> Result<Connection, Error> {
        let mut last = None;
        for peer in resolve(addr)? {
            match Connection::connect_to(peer, options).await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("resolve returns at least one address"))
    }

    /// Connects to `peer`, within `options.connect_timeout`.
    pub(crate) async fn connect_to(peer: SocketAddr, options: &ConnectOptions) -> Result<Connection, Error> {
        assert!(options.in_flight_max >= 1, "in_flight_max must be at least 1");
        let connect_error = |reason: String| Error::Connect {
            addr: peer.to_string(),
            reason,
        };
        let attempt = async {
            let mut stream = TcpStream::connect(peer)
                .await
                .map_err(|e| connect_error(e.to_string()))?;
            // The writer batches by itself; Nagle would only add latency.
            stream.set_nodelay(true).map_err(|e| connect_error(e.to_string()))?;
            let (welcome, decoder, leftover) = handshake(&mut stream, peer, &options.name).await?;
            Ok::<_, Error>((stream, welcome, decoder, leftover))
        };
        let (stream, welcome, decoder, leftover) =
            match glommio::future::timeout(options.connect_timeout, attempt).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(connect_error(format!(
                        "no WELCOME within {:?} (connect_timeout)",
                        options.connect_timeout
                    )));
                }
            };
        let in_flight_max = (welcome.in_flight_max as usize).min(options.in_flight_max);
        let shared = Rc::new(Shared {
            peer,
            frame_len_max: welcome.frame_len_max as usize,
            payload_len_max: (welcome.payload_len_max as usize).min(PAYLOAD_LEN_MAX),
            in_flight_max,
            welcome,
            stream: RefCell::new(stream),
            slots: Slots::new(in_flight_max),
            pending: RefCell::new(HashMap::with_capacity(in_flight_max.min(4096))),
            next_corr: Cell::new(1),
            outbox: RefCell::new(Vec::new()),
            writer: Cell::new(None),
            closed: RefCell::new(None),
            stats: Cell::new(Stats::default()),
            pings: Cell::new(0),
        });
        let reader = glommio::spawn_local(read_loop(shared.clone(), decoder, leftover));
        let writer = glommio::spawn_local(write_loop(shared.clone()));
        Ok(Connection {
            _tasks: Rc::new(Tasks {
                shared: shared.clone(),
                _reader: reader,
                _writer: writer,
            }),
            shared,
        })
    }

    /// Sends one client frame (any but HELLO: PING, STATUS, MAP,
    /// PLACEMENT, LAYOUT, MEMBERS, REQUEST or GET) and waits for
    /// its answer. An ERROR answer is returned as [`Error::Server`]. Waits
    /// for an in-flight slot first.
    ///
    /// Dropping the future stops the wait, not the frame: once queued it is
    /// sent and its answer discarded.
    pub async fn send(&self, body: Body) -> Result<Body, Error> {
        let sent = body.frame_type();
        if !matches!(
            sent,
            FrameType::Ping
                | FrameType::Status
                | FrameType::Map
                | FrameType::Placement
                | FrameType::Layout
                | FrameType::Members
                | FrameType::Request
                | FrameType::Get
        ) {
            return Err(Error::Unsendable { frame_type: sent });
        }
        let shared = &*self.shared;
        let mut frame = Frame { corr: 0, body };
        let len = encoded_len(&frame);
        if len > shared.frame_len_max {
            return Err(Error::FrameTooLarge {
                len,
                max: shared.frame_len_max,
            });
        }
        if let Body::Request(request) = &frame.body
            && request.args.len() > shared.payload_len_max
        {
            return Err(Error::ArgsTooLarge {
                len: request.args.len(),
                max: shared.payload_len_max,
            });
        }
        shared.check_open()?;
        if shared.slots.acquire().await.is_err() {
            return Err(shared.lost());
        }
        // From here to the insertion into `pending` nothing awaits, so the
        // slot cannot leak.
        if let Err(e) = shared.check_open() {
            shared.slots.release();
            return Err(e);
        }
        let answer = Answer::new();
        {
            let mut pending = shared.pending.borrow_mut();
            frame.corr = shared.free_corr(&pending);
            if let Err(e) = encode(&frame, &mut shared.outbox.borrow_mut()) {
                shared.slots.release();
                return Err(Error::Encode(e));
            }
            pending.insert(
                frame.corr,
                Pending {
                    sent,
                    answer: answer.clone(),
                },
            );
            assert!(
                pending.len() <= shared.in_flight_max,
                "more frames in flight than slots"
            );
            let mut stats = shared.stats.get();
            stats.frames_sent += 1;
            stats.in_flight_peak = stats.in_flight_peak.max(pending.len() as u64);
            shared.stats.set(stats);
        }
        if let Some(writer) = shared.writer.take() {
            writer.wake();
        }
        match answer.wait().await {
            Ok(Body::Error { code, message }) => Err(Error::Server { code, message }),
            other => other,
        }
    }

    /// Sends a REQUEST once and returns its outcome. Exactly-once across
    /// reconnects is the caller's: retry with the same client id and seq
    /// (or use [`Client`](super::Client), which does).
    pub async fn request(&self, request: Request) -> Result<Outcome, Error> {
        match self.send(Body::Request(request)).await? {
            Body::Committed { tid, result } => Ok(Outcome::Committed { tid, result }),
            Body::Aborted { tid, abort } => Ok(Outcome::Aborted { tid, abort }),
            other => unreachable!("the reader let a {:?} answer a REQUEST", other.frame_type()),
        }
    }

    /// Reads one entity's state: the engine's encoding of the operator's
    /// state type, or `None` if the entity does not exist.
    pub async fn get(&self, operator: &str, key: impl Into<Key>) -> Result<Option<Vec<u8>>, Error> {
        let body = Body::Get {
            operator: operator.to_string(),
            key: key.into(),
        };
        match self.send(body).await? {
            Body::State { value } => Ok(value),
            other => unreachable!("the reader let a {:?} answer a GET", other.frame_type()),
        }
    }

    /// The engine's status.
    pub async fn status(&self) -> Result<Status, Error> {
        match self.send(Body::Status).await? {
            Body::StatusReply(status) => Ok(status),
            other => unreachable!("the reader let a {:?} answer a STATUS", other.frame_type()),
        }
    }

    /// Where the engine's shards and partitions are (MAP, then LAYOUT):
    /// every node of a cluster, the shards each holds and where clients
    /// reach it, and each operator's partition count — what a client needs
    /// to send a request to the node of its root. The shards are placed by
    /// the server's LAYOUT ([`Map::placed`]); a server older than LAYOUT
    /// answers `UNKNOWN_FRAME_TYPE` and MAP's ranges place them. A server
    /// older than MAP answers `UNKNOWN_FRAME_TYPE` to it too; treat it as
    /// one node holding every shard.
    pub async fn map(&self) -> Result<Map, Error> {
        let map = match self.send(Body::Map).await? {
            Body::MapReply(map) => map,
            other => unreachable!("the reader let a {:?} answer a MAP", other.frame_type()),
        };
        match self.layout().await? {
            Some(layout) => map.with_layout(&layout).map_err(|reason| Error::Protocol {
                reason: format!("LAYOUT does not fit MAP: {reason}"),
            }),
            None => Ok(map),
        }
    }

    /// Which nodes left the cluster (MEMBERS); `None` from a server older
    /// than MEMBERS (`UNKNOWN_FRAME_TYPE`), which says nothing of them.
    pub async fn members(&self) -> Result<Option<Members>, Error> {
        match self.send(Body::Members).await {
            Ok(Body::MembersReply(m)) => Ok(Some(m)),
            Ok(other) => unreachable!("the reader let a {:?} answer a MEMBERS", other.frame_type()),
            Err(Error::Server { code, .. }) if code == ErrorCode::UNKNOWN_FRAME_TYPE => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Which node runs which shard (LAYOUT); `None` from a server older
    /// than LAYOUT (`UNKNOWN_FRAME_TYPE`), whose MAP ranges place them.
    pub async fn layout(&self) -> Result<Option<Layout>, Error> {
        match self.send(Body::Layout).await {
            Ok(Body::LayoutReply(l)) => Ok(Some(l)),
            Ok(other) => unreachable!("the reader let a {:?} answer a LAYOUT", other.frame_type()),
            Err(Error::Server { code, .. }) if code == ErrorCode::UNKNOWN_FRAME_TYPE => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Which partitions live off the default rule now (PLACEMENT): with
    /// [`Connection::map`] it places every entity where the server's
    /// partition map does, so requests go to the node of their root after
    /// `styx rebalance` moved it (a request sent elsewhere is forwarded, so
    /// a stale placement costs a hop, never a refusal). A server older than
    /// PLACEMENT answers `UNKNOWN_FRAME_TYPE`: nothing moved, as far as it
    /// tells; this returns the default rule then.
    pub async fn placement(&self) -> Result<Placement, Error> {
        match self.send(Body::Placement).await {
            Ok(Body::PlacementReply(p)) => Ok(p),
            Ok(other) => unreachable!("the reader let a {:?} answer a PLACEMENT", other.frame_type()),
            Err(Error::Server { code, .. }) if code == ErrorCode::UNKNOWN_FRAME_TYPE => Ok(Placement::default()),
            Err(e) => Err(e),
        }
    }

    /// One PING: the round trip, queueing behind earlier frames included.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let data = self.shared.pings.get().wrapping_add(1);
        self.shared.pings.set(data);
        let start = Instant::now();
        match self.send(Body::Ping { data }).await? {
            Body::Pong { data: echo } if echo == data => Ok(start.elapsed()),
            Body::Pong { data: echo } => Err(Error::Protocol {
                reason: format!("PONG echoed {echo}, the PING carried {data}"),
            }),
            other => unreachable!("the reader let a {:?} answer a PING", other.frame_type()),
        }
    }

    /// The server's WELCOME: its version, limits and name.
    pub fn welcome(&self) -> &Welcome {
        &self.shared.welcome
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    /// The largest frame the server reads, header included.
    pub fn frame_len_max(&self) -> usize {
        self.shared.frame_len_max
    }

    /// The largest arguments the server takes.
    pub fn payload_len_max(&self) -> usize {
        self.shared.payload_len_max
    }

    /// Frames this connection keeps in flight at most: the least of the
    /// server's `in_flight_max` and [`ConnectOptions::in_flight_max`].
    pub fn in_flight_max(&self) -> usize {
        self.shared.in_flight_max
    }

    /// Frames awaiting an answer now.
    pub fn in_flight(&self) -> usize {
        self.shared.pending.borrow().len()
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats.get()
    }

    /// Whether the connection has closed; its calls fail from then on.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.borrow().is_some()
    }

    /// Why the connection closed, if it has.
    pub fn close_reason(&self) -> Option<String> {
        self.shared.closed.borrow().clone()
    }

    /// Closes the connection: pending calls fail with
    /// [`Error::ConnectionLost`] (their requests may or may not have run).
    pub fn close(&self) {
        self.shared.close("closed by the client".to_string());
    }

    /// Whether both handles share one connection.
    pub fn same(&self, other: &Connection) -> bool {
        Rc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Shared {
    fn check_open(&self) -> Result<(), Error> {
        match &*self.closed.borrow() {
            None => Ok(()),
            Some(reason) => Err(Error::ConnectionLost { reason: reason.clone() }),
        }
    }

    fn lost(&self) -> Error {
        Error::ConnectionLost {
            reason: self.closed.borrow().clone().unwrap_or_else(|| "closed".to_string()),
        }
    }

    /// A corr no pending frame uses: a counter from 1, wrapping, skipping 0
    /// (the corr of connection-level errors) and corrs still in flight.
    fn free_corr(&self, pending: &HashMap<u32, Pending>) -> u32 {
        assert!(
            pending.len() < IN_FLIGHT_MAX,
            "a free corr among {} in flight",
            pending.len()
        );
        loop {
            let corr = self.next_corr.get();
            self.next_corr.set(corr.wrapping_add(1));
            if corr != 0 && !pending.contains_key(&corr) {
                return corr;
            }
        }
    }

    /// Closes the connection once, for `reason`: fails every pending call,
    /// drops unsent frames, and wakes both tasks so they end.
    fn close(&self, reason: String) {
        {
            let mut closed = self.closed.borrow_mut();
            if closed.is_some() {
                return;
            }
            *closed = Some(reason.clone());
        }
        self.slots.close();
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        for (_, call) in pending {
            call.answer.fill(Err(Error::ConnectionLost { reason: reason.clone() }));
        }
        self.outbox.borrow_mut().clear();
        // The reader sleeps in recv: shutting the socket down wakes it with
        // EOF. The stream is only borrowed inside a poll, never across one.
        if let Ok(stream) = self.stream.try_borrow() {
            let _ = stream.poll_shutdown(&mut Context::from_waker(Waker::noop()), Shutdown::Both);
        }
        if let Some(writer) = self.writer.take() {
            writer.wake();
        }
    }

    /// Feeds `bytes` to the decoder and dispatches every complete frame.
    /// Returns whether the connection is still open.
    fn receive(&self, decoder: &mut Decoder, mut bytes: &[u8]) -> bool {
        while let Some(result) = decoder.decode(&mut bytes) {
            match result {
                Ok(frame) => self.dispatch(frame),
                Err(e) if e.is_fatal() => self.close(format!("the server sent undecodable bytes: {e}")),
                Err(e) => match self.take_pending(e.corr()) {
                    Some(call) => call.answer.fill(Err(Error::Protocol {
                        reason: format!("the answer does not decode: {e}"),
                    })),
                    None => self.close(format!("the server sent an undecodable frame: {e}")),
                },
            }
            if self.closed.borrow().is_some() {
                return false;
            }
        }
        true
    }

    /// The pending call `corr`, removed, its slot released.
    fn take_pending(&self, corr: u32) -> Option<Pending> {
        let call = self.pending.borrow_mut().remove(&corr)?;
        self.slots.release();
        let mut stats = self.stats.get();
        stats.answers += 1;
        self.stats.set(stats);
        Some(call)
    }

    fn dispatch(&self, frame: Frame) {
        let got = frame.body.frame_type();
        let Some(call) = self.take_pending(frame.corr) else {
            let reason = match frame.body {
                Body::Error { code, message } => format!("the server sent {code}: {message}"),
                _ => format!(
                    "the server sent a {got:?} frame with corr {} that no frame awaits",
                    frame.corr
                ),
            };
            self.close(reason);
            return;
        };
        if !answers(call.sent, got) {
            let reason = format!("a {got:?} frame answered a {:?} frame", call.sent);
            call.answer.fill(Err(Error::Protocol { reason: reason.clone() }));
            self.close(format!("the server broke the protocol: {reason}"));
            return;
        }
        let fatal = match &frame.body {
            Body::Error { code, message } if code.is_fatal() => Some(format!("the server sent {code}: {message}")),
            _ => None,
        };
        call.answer.fill(Ok(frame.body));
        if let Some(reason) = fatal {
            self.close(reason);
        }
    }
}

/// Whether a frame of type `got` may answer one of type `sent`.
fn answers(sent: FrameType, got: FrameType) -> bool {
    use FrameType::*;
    got == Error
        || matches!(
            (sent, got),
            (Ping, Pong)
                | (Status, StatusReply)
                | (Map, MapReply)
                | (Placement, PlacementReply)
                | (Layout, LayoutReply)
                | (Members, MembersReply)
                | (Request, Committed | Aborted)
                | (Get, State)
        )
}

/// Every socket address of `addr`; at least one.
pub(crate) fn resolve(addr: impl ToSocketAddrs) -> Result<Vec<SocketAddr>, Error> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::Resolve { reason: e.to_string() })?
        .collect();
    if addrs.is_empty() {
        return Err(Error::Resolve {
            reason: "no address".to_string(),
        });
    }
    Ok(addrs)
}

/// HELLO, then WELCOME: the server's limits, the decoder to go on with, and
/// any bytes read past the WELCOME.
async fn handshake(stream: &mut TcpStream, peer: SocketAddr, name: &str) -> Result<(Welcome, Decoder, Vec<u8>), Error> {
    let lost = |what: &str, e: std::io::Error| Error::ConnectionLost {
        reason: format!("{what} {peer}: {e}"),
    };
    let hello = Frame {
        corr: 0,
        body: Body::Hello {
            version_min: VERSION_MIN,
            version_max: VERSION_MAX,
            client: name.to_string(),
        },
    };
    let mut bytes = Vec::new();
    encode(&hello, &mut bytes).map_err(Error::Encode)?;
    stream
        .write_all(&bytes)
        .await
        .map_err(|e| lost("sending HELLO to", e))?;
    let mut decoder = Decoder::new(FRAME_LEN_MAX);
    let mut buf = vec![0u8; 4096];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| lost("waiting for WELCOME from", e))?;
        if n == 0 {
            return Err(Error::ConnectionLost {
                reason: format!("{peer} closed the connection before WELCOME"),
            });
        }
        let mut input = &buf[..n];
        let Some(result) = decoder.decode(&mut input) else {
            continue;
        };
        let frame = result.map_err(|e| Error::Protocol {
            reason: format!("the answer to HELLO does not decode: {e}"),
        })?;
        return match frame.body {
            Body::Welcome(welcome) => {
                check_welcome(&welcome)?;
                Ok((welcome, decoder, input.to_vec()))
            }
            Body::Error { code, message } => Err(Error::Handshake {
                addr: peer.to_string(),
                code,
                message,
            }),
            other => Err(Error::Protocol {
                reason: format!("a {:?} frame answered HELLO", other.frame_type()),
            }),
        };
    }
}

fn check_welcome(welcome: &Welcome) -> Result<(), Error> {
    let protocol = |reason: String| Err(Error::Protocol { reason });
    if !(VERSION_MIN..=VERSION_MAX).contains(&welcome.version) {
        return protocol(format!(
            "WELCOME chose version {}, not one HELLO offered",
            welcome.version
        ));
    }
    if !(FRAME_LEN_MAX_FLOOR..=FRAME_LEN_MAX).contains(&(welcome.frame_len_max as usize)) {
        return protocol(format!(
            "WELCOME announced frame_len_max {}, outside {FRAME_LEN_MAX_FLOOR}..={FRAME_LEN_MAX}",
            welcome.frame_len_max
        ));
    }
    if !(1..=IN_FLIGHT_MAX).contains(&(welcome.in_flight_max as usize)) {
        return protocol(format!(
            "WELCOME announced in_flight_max {}, outside 1..={IN_FLIGHT_MAX}",
            welcome.in_flight_max
        ));
    }
    assert!(welcome.server.len() <= PEER_NAME_LEN_MAX, "the decoder caps names");
    Ok(())
}

/// Reads answers until the connection closes.
async fn read_loop(shared: Rc<Shared>, mut decoder: Decoder, leftover: Vec<u8>) {
    if !shared.receive(&mut decoder, &leftover) {
        return;
    }
    let mut buf = vec![0u8; READ_CHUNK_LEN];
    loop {
        let read = std::future::poll_fn(|cx| {
            let mut stream = shared.stream.borrow_mut();
            Pin::new(&mut *stream).poll_read(cx, &mut buf)
        })
        .await;
        match read {
            Ok(0) => {
                let reason = match decoder.finish() {
                    Ok(()) => format!("{} closed the connection", shared.peer),
                    Err(e) => format!("{} closed the connection inside a frame ({e})", shared.peer),
                };
                shared.close(reason);
                return;
            }
            Ok(n) => {
                if !shared.receive(&mut decoder, &buf[..n]) {
                    return;
                }
            }
            Err(e) => {
                shared.close(format!("reading from {}: {e}", shared.peer));
                return;
            }
        }
    }
}

/// Writes the outbox, a batch at a time, until the connection closes.
async fn write_loop(shared: Rc<Shared>) {
    let mut batch = Vec::new();
    loop {
        let open = std::future::poll_fn(|cx| {
            if shared.closed.borrow().is_some() {
                return Poll::Ready(false);
            }
            let mut outbox = shared.outbox.borrow_mut();
            if outbox.is_empty() {
                shared.writer.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            std::mem::swap(&mut *outbox, &mut batch);
            Poll::Ready(true)
        })
        .await;
        if !open {
            return;
        }
        let mut written = 0;
        while written < batch.len() {
            let write = std::future::poll_fn(|cx| {
                let mut stream = shared.stream.borrow_mut();
                Pin::new(&mut *stream).poll_write(cx, &batch[written..])
            })
            .await;
            match write {
                Ok(0) => {
                    shared.close(format!("{} takes no more bytes", shared.peer));
                    return;
                }
                Ok(n) => written += n,
                Err(e) => {
                    shared.close(format!("writing to {}: {e}", shared.peer));
                    return;
                }
            }
        }
        let mut stats = shared.stats.get();
        stats.writes += 1;
        shared.stats.set(stats);
        batch.clear();
        if batch.capacity() > BATCH_RETAINED_MAX {
            batch = Vec::new();
        }
    }
}
