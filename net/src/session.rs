//! The server side of one connection, sans I/O: bytes in, requests for
//! the engine and answers out.
//!
//! A server reads a socket however it likes and hands the bytes to
//! [`Session::receive`], which takes one frame at a time: it decodes it,
//! does the handshake (HELLO first, a version both sides speak, WELCOME
//! with the server's limits), answers what needs no engine (PING, STATUS,
//! MAP, PLACEMENT, LAYOUT, every error) and turns REQUEST and GET into the engine's requests
//! ([`Received::Request`]); a GET becomes a call of the operator's built-in
//! `__get`. The server submits those and hands each outcome back to
//! [`Session::answer`] (a GET's is turned into a STATE frame). Answers
//! queue in the session; [`Session::write`] encodes them for the socket a
//! chunk at a time and [`Session::written`] says the socket took them.
//! What the session needs from its server (the application, STATUS's
//! figures, the map, whether it is stopping) it asks through [`Server`].
//!
//! Invariants:
//! - Every frame read gets exactly one answer (an ERROR at worst). A frame
//!   is *owed* from the moment it is decoded until its answer has been
//!   written ([`Session::owed`]): at the engine, queued, or being written.
//!   With `in_flight_max` owed the session takes no input
//!   ([`Session::wants_input`]): a client that never reads is held at its
//!   limit (its socket fills and TCP stops it) and costs the server at most
//!   one partial frame and `in_flight_max` answers.
//! - Requests at the engine are bounded by bytes too: with
//!   `input_bytes_max` of their frames there the session takes no input.
//! - Answers are bounded by bytes too: with half of `output_bytes_max`
//!   queued the session takes no input. Past `output_bytes_max`
//!   ([`Session::is_over_limit`]) the server gives the client a while to
//!   read (a burst of large answers is no fault); if it reads less than
//!   `output_bytes_max` meanwhile, the server drops the session
//!   ([`Session::drop_answers`]): its queued answers are freed, those
//!   still at the engine are dropped as they come, and the server closes
//!   the connection without writing more. Answers dropped stay owed, like
//!   those a stopped engine abandons, until the server forgets the session.
//! - A correlation id is owed at most once at a time: a frame reusing the
//!   corr of one whose answer has not left the queue (at the engine, or
//!   queued) is the fatal `DUPLICATE_CORR` (with corr 0: it answers no one
//!   frame), so no corr is answered twice.
//!   Once [`Session::write`] took the answer its corr is free: the client
//!   may have read it already, and a new answer with it can only go out
//!   after the old one.
//! - A fatal error (framing lost, no handshake, no common version, a
//!   duplicate correlation id) closes this session only: its ERROR is
//!   queued, the session takes no more input, and the server closes the
//!   socket once the queued answers are written and those still at the
//!   engine have come and gone out ([`Session::awaits_engine`]; a client
//!   that half-closes is served the same way). Before WELCOME any
//!   malformed frame closes the session too; after it, one that is not
//!   fatal is answered with an ERROR and the session goes on.
//! - Nothing here blocks, reads a clock or touches a socket, so every rule
//!   is tested without one (the handshake's deadline is the server's).

use crate::error::{ErrorCode, error_frame};
use crate::frame::{
    Body, Frame, LAYOUT_SHARDS_MAX, Layout, MEMBERS_LEFT_MAX, Map, Members, PLACEMENT_MOVED_MAX, Placement, Status,
    VERSION_MAX, VERSION_MIN, Welcome, negotiate,
};
use crate::limits::Limits;
use crate::{Decoder, MAP_OPERATORS_MAX, convert, encode, encoded_len};
// hashbrown's default hasher: seeded per table (corrs are the client's to
// pick) and much cheaper than SipHash, at two lookups per request.
use hashbrown::hash_map::Entry;
use hashbrown::{HashMap, HashSet};
use std::collections::VecDeque;
use styx_engine::{Address, App, GET_FUNCTION, Outcome, PAYLOAD_LEN_MAX, Payload, Tid};

/// What a session asks of the server it belongs to.
pub trait Server {
    /// The application requests are resolved against.
    fn app(&self) -> &App;
    /// The server's name and version, sent in WELCOME.
    fn name(&self) -> &str;
    /// What MAP answers.
    fn map(&self) -> &Map;
    /// What PLACEMENT answers, now: the partitions off the default rule by
    /// the server's current partition map.
    fn placement(&self) -> Placement;
    /// What LAYOUT answers, now: which node runs which shard. By default
    /// the layout of what MAP answers ([`Map::layout`]).
    fn layout(&self) -> Layout {
        self.map().layout()
    }
    /// What MEMBERS answers, now: the nodes that left the cluster. By
    /// default none, at the layout's version.
    fn members(&self) -> Members {
        Members {
            version: self.layout().version,
            left: Vec::new(),
        }
    }
    /// Whether the server is draining: new requests get `SHUTTING_DOWN`.
    fn is_shutting_down(&self) -> bool;
    /// Whether the server runs no shard (a node of a cluster that is a
    /// spare: it answers MAP, LAYOUT, MEMBERS and STATUS, and has no engine to run
    /// a request): requests get `SHUTTING_DOWN` too — they did not run and
    /// belong on a node LAYOUT names.
    fn runs_no_shard(&self) -> bool {
        false
    }
    /// What STATUS answers, now.
    fn status(&self) -> Status;
}

/// What [`Session::receive`] made of the input.
#[derive(Debug, PartialEq)]
pub enum Received {
    /// The input is used up inside a frame (or was empty): read more.
    More,
    /// A frame was read and its answer queued (after a fatal error the
    /// session is closing: see [`Session::is_closing`]).
    Answered,
    /// A frame was read that the engine must run: submit `request`, and
    /// hand its outcome to [`Session::answer`] with `corr`.
    Request { corr: u32, request: styx_engine::Request },
}

/// What a request at the engine asked for, to shape its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    /// A REQUEST: answered COMMITTED or ABORTED.
    Run,
    /// A GET: answered STATE.
    Get,
}

/// One connection's protocol state; see the module comment.
#[derive(Debug)]
pub struct Session {
    decoder: Decoder,
    frame_len_max: usize,
    in_flight_max: usize,
    welcomed: bool,
    /// Requests at the engine, by correlation id, with their frames' bytes.
    at_engine: HashMap<u32, (Asked, usize)>,
    /// Their bytes, summed.
    in_bytes: usize,
    input_bytes_max: usize,
    /// Answers waiting for the socket, each with whether its corr is owed
    /// (in `answered`; not so for the errors of frames that did not decode).
    out: VecDeque<(Frame, bool)>,
    /// Corrs whose answers are queued.
    answered: HashSet<u32>,
    /// Their encoded bytes.
    out_bytes: usize,
    output_bytes_max: usize,
    /// Answers dropped, unwritten: the queue went past `output_bytes_max`.
    dropped: usize,
    is_dropped: bool,
    /// Answers taken by [`Session::write`] that the socket has not taken yet.
    writing: usize,
    closing: bool,
    /// The engine will answer nothing more (it stopped): a closing
    /// session does not wait for the requests still at it.
    abandoned: bool,
}

impl Session {
    /// A session of a server with `limits` (valid: see [`Limits::validate`]).
    pub fn new(limits: &Limits) -> Session {
        Session {
            decoder: Decoder::new(limits.frame_len_max),
            frame_len_max: limits.frame_len_max,
            in_flight_max: limits.in_flight_max,
            welcomed: false,
            at_engine: HashMap::new(),
            in_bytes: 0,
            input_bytes_max: limits.input_bytes_max,
            out: VecDeque::new(),
            answered: HashSet::new(),
            out_bytes: 0,
            output_bytes_max: limits.output_bytes_max,
            dropped: 0,
            is_dropped: false,
            writing: 0,
            closing: false,
            abandoned: false,
        }
    }

    /// Whether the handshake is done (a server gives a connection a
    /// deadline for its HELLO).
    pub fn is_welcomed(&self) -> bool {
        self.welcomed
    }

    /// Whether the session ends once its queued answers are written: it
    /// takes no more input.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Ends the session: no more input; the answers queued still go out,
    /// and those of the requests still at the engine once they come
    /// ([`Session::awaits_engine`]).
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Ends the session for good: the engine stopped and will answer none
    /// of the requests still at it (they stay owed, unwritten).
    pub fn abandon(&mut self) {
        self.closing = true;
        self.abandoned = true;
    }

    /// Whether answers are still to come from the engine: a closing session
    /// (its client half-closed, or sent a fatal frame after requests) waits
    /// for them before its socket closes.
    pub fn awaits_engine(&self) -> bool {
        !self.is_dropped && self.holds_engine()
    }

    /// Whether requests of the session are at the engine, which will
    /// answer them: they hold their memory there whatever became of the
    /// client, so its connection holds its slot (`connections_max`) until
    /// they come back, and a client that reconnects in a loop holds no
    /// more than the limits of its open connections.
    pub fn holds_engine(&self) -> bool {
        !self.abandoned && !self.at_engine.is_empty()
    }

    /// Whether the session was dropped ([`Session::drop_answers`]): the
    /// server closes the socket now, without writing (nothing is queued).
    pub fn is_dropped(&self) -> bool {
        self.is_dropped
    }

    /// Whether more than `output_bytes_max` of answers are queued.
    pub fn is_over_limit(&self) -> bool {
        self.out_bytes > self.output_bytes_max
    }

    /// Drops the session, its client having left more than
    /// `output_bytes_max` unread for too long (or its socket being closed
    /// already): its queued answers are freed, those still at the engine
    /// dropped as they come (all stay owed), and it takes no more input.
    pub fn drop_answers(&mut self) {
        self.dropped += self.out.len();
        self.out = VecDeque::new();
        self.answered = HashSet::new();
        self.out_bytes = 0;
        self.is_dropped = true;
        self.closing = true;
    }

    /// Frames read whose answers have not been written yet (dropped ones
    /// included): what `in_flight_max` bounds.
    pub fn owed(&self) -> usize {
        self.at_engine.len() + self.out.len() + self.writing + self.dropped
    }

    /// Whether the session takes input now: it is open, owes fewer than
    /// `in_flight_max` answers (a frame read gets one more), has less than
    /// `input_bytes_max` of requests at the engine (one more frame may
    /// pass it) and less than half of `output_bytes_max` queued.
    pub fn wants_input(&self) -> bool {
        !self.closing
            && self.owed() < self.in_flight_max
            && self.in_bytes < self.input_bytes_max
            && self.out_bytes < self.output_bytes_max / 2
    }

    /// Bytes of the frames of the requests at the engine: what
    /// `input_bytes_max` bounds.
    pub fn at_engine_bytes(&self) -> usize {
        self.in_bytes
    }

    /// Queues the answer to a frame with `frame`'s corr, which stays owed
    /// until [`Session::write`] takes the answer.
    fn queue(&mut self, frame: Frame) {
        self.enqueue(frame, true);
    }

    /// Queues an answer, its corr owed if `owed_corr` (a dropped session
    /// drops it).
    fn enqueue(&mut self, frame: Frame, owed_corr: bool) {
        if self.is_dropped {
            self.dropped += 1;
            return;
        }
        if owed_corr {
            self.answered.insert(frame.corr);
        }
        self.out_bytes += encoded_len(&frame);
        self.out.push_back((frame, owed_corr));
    }

    /// Whether answers wait for [`Session::write`].
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Takes bytes from the front of `input` until one frame is read, and
    /// serves it; leaves the rest of `input` for the next call.
    ///
    /// # Panics
    /// If called while the session does not want input.
    pub fn receive(&mut self, input: &mut &[u8], server: &impl Server) -> Received {
        assert!(self.wants_input(), "input offered to a session that does not take it");
        let Some(decoded) = self.decoder.decode(input) else {
            // The decoder keeps the part of a frame it was given.
            assert!(input.is_empty(), "the decoder takes all input before asking for more");
            return Received::More;
        };
        let received = match decoded {
            Ok(frame) => self.serve(frame, server),
            Err(e) if !e.is_fatal() && self.is_welcomed() => {
                // The frame was read whole: its corr is owed like any other.
                if self.is_owed(e.corr()) {
                    self.refuse_unowed(duplicate_corr(e.corr()))
                } else {
                    self.queue(e.to_frame());
                    Received::Answered
                }
            }
            Err(e) => {
                // Not owed by corr: framing is lost (corr 0) or the session
                // closes.
                self.enqueue(e.to_frame(), false);
                // Before WELCOME any error closes the session: a first
                // frame that does not decode is no HELLO (section 2: the
                // first frame is HELLO, or the connection ends).
                if e.is_fatal() || !self.is_welcomed() {
                    self.closing = true;
                }
                Received::Answered
            }
        };
        assert!(
            self.owed() <= self.in_flight_max,
            "a session owes {} answers, over in_flight_max",
            self.owed()
        );
        received
    }

    /// Serves one well-framed frame.
    fn serve(&mut self, frame: Frame, server: &impl Server) -> Received {
        let corr = frame.corr;
        if !self.welcomed {
            return self.handshake(frame, server);
        }
        if self.is_owed(corr) {
            return self.refuse_unowed(duplicate_corr(corr));
        }
        // What the frame holds at the engine, if it asks it to run something.
        let len = encoded_len(&frame);
        let answer = match frame.body {
            Body::Ping { data } => Frame {
                corr,
                body: Body::Pong { data },
            },
            Body::Status => Frame {
                corr,
                body: Body::StatusReply(server.status()),
            },
            Body::Map if server.map().operators.len() > MAP_OPERATORS_MAX => error_frame(
                corr,
                ErrorCode::INTERNAL,
                &format!(
                    "the application has {} operators, more than MAP lists ({MAP_OPERATORS_MAX})",
                    server.map().operators.len(),
                ),
            ),
            Body::Map => Frame {
                corr,
                body: Body::MapReply(server.map().clone()),
            },
            Body::Placement => {
                let placement = server.placement();
                let moved: usize = placement.moved.iter().map(Vec::len).sum();
                if moved > PLACEMENT_MOVED_MAX || placement.moved.len() > MAP_OPERATORS_MAX {
                    error_frame(
                        corr,
                        ErrorCode::INTERNAL,
                        &format!(
                            "{moved} partitions of {} operators moved, more than PLACEMENT lists \
                             ({PLACEMENT_MOVED_MAX} partitions, {MAP_OPERATORS_MAX} operators)",
                            placement.moved.len()
                        ),
                    )
                } else {
                    Frame {
                        corr,
                        body: Body::PlacementReply(placement),
                    }
                }
            }
            Body::Layout => {
                let layout = server.layout();
                if layout.node_of.len() > LAYOUT_SHARDS_MAX {
                    error_frame(
                        corr,
                        ErrorCode::INTERNAL,
                        &format!(
                            "{} shards, more than LAYOUT lists ({LAYOUT_SHARDS_MAX})",
                            layout.node_of.len()
                        ),
                    )
                } else {
                    Frame {
                        corr,
                        body: Body::LayoutReply(layout),
                    }
                }
            }
            Body::Members => {
                let members = server.members();
                if members.left.len() > MEMBERS_LEFT_MAX {
                    error_frame(
                        corr,
                        ErrorCode::INTERNAL,
                        &format!(
                            "{} nodes left, more than MEMBERS lists ({MEMBERS_LEFT_MAX})",
                            members.left.len()
                        ),
                    )
                } else {
                    Frame {
                        corr,
                        body: Body::MembersReply(members),
                    }
                }
            }
            Body::Request(_) | Body::Get { .. } if server.is_shutting_down() => error_frame(
                corr,
                ErrorCode::SHUTTING_DOWN,
                "the server is shutting down; retry elsewhere",
            ),
            Body::Request(_) | Body::Get { .. } if server.runs_no_shard() => error_frame(
                corr,
                ErrorCode::SHUTTING_DOWN,
                "this node runs no shard (a spare): send the request to a node LAYOUT names",
            ),
            Body::Request(req) => match req.resolve(corr, server.app()) {
                Ok(request) => return self.admit(corr, Asked::Run, request, len),
                Err(e) => e.to_frame(),
            },
            Body::Get { operator, key } => match convert::resolve_operator(corr, server.app(), &operator) {
                Ok(op) => {
                    let app = server.app();
                    let function = app
                        .resolve(app.operator_info(op).name(), GET_FUNCTION)
                        .expect("every operator has __get");
                    let request = styx_engine::Request {
                        function,
                        address: Address::Entity(key),
                        args: Payload::EMPTY,
                        client: None,
                    };
                    return self.admit(corr, Asked::Get, request, len);
                }
                Err(e) => e.to_frame(),
            },
            Body::Hello { .. } => error_frame(corr, ErrorCode::UNEXPECTED_FRAME, "HELLO after the handshake"),
            _ => error_frame(
                corr,
                ErrorCode::UNEXPECTED_FRAME,
                "a server-to-client frame sent by the client",
            ),
        };
        self.queue(answer);
        Received::Answered
    }

    /// The first frame: HELLO with a version both sides speak, or the
    /// session closes.
    fn handshake(&mut self, frame: Frame, server: &impl Server) -> Received {
        let corr = frame.corr;
        let Body::Hello {
            version_min,
            version_max,
            ..
        } = frame.body
        else {
            return self.refuse(error_frame(
                corr,
                ErrorCode::HANDSHAKE_REQUIRED,
                "the first frame must be HELLO",
            ));
        };
        let Some(version) = negotiate(version_min, version_max) else {
            return self.refuse(error_frame(
                corr,
                ErrorCode::UNSUPPORTED_VERSION,
                &format!(
                    "the server speaks versions {VERSION_MIN}..={VERSION_MAX}, the client {version_min}..={version_max}"
                ),
            ));
        };
        self.queue(Frame {
            corr,
            body: Body::Welcome(Welcome {
                version,
                frame_len_max: self.frame_len_max as u32,
                in_flight_max: self.in_flight_max as u32,
                payload_len_max: PAYLOAD_LEN_MAX as u32,
                server: server.name().to_string(),
            }),
        });
        self.welcomed = true;
        Received::Answered
    }

    /// Queues a fatal error and closes.
    fn refuse(&mut self, error: Frame) -> Received {
        self.queue(error);
        self.closing = true;
        Received::Answered
    }

    /// Whether `corr`'s answer is still to leave the queue.
    fn is_owed(&self, corr: u32) -> bool {
        self.at_engine.contains_key(&corr) || self.answered.contains(&corr)
    }

    /// Queues a fatal error about a corr already owed (its first answer
    /// keeps it) and closes.
    fn refuse_unowed(&mut self, error: Frame) -> Received {
        self.enqueue(error, false);
        self.closing = true;
        Received::Answered
    }

    /// Hands `request` to the server for the engine (its corr is owed by
    /// no other frame: `serve` checked).
    /// `bytes` is the length of the frame that asked.
    fn admit(&mut self, corr: u32, asked: Asked, request: styx_engine::Request, bytes: usize) -> Received {
        let Entry::Vacant(v) = self.at_engine.entry(corr) else {
            unreachable!("corr {corr} is owed twice");
        };
        v.insert((asked, bytes));
        self.in_bytes += bytes;
        Received::Request { corr, request }
    }

    /// The engine's outcome of request `corr` (`tid` 0 if it never ran:
    /// refused when submitted); queues its answer.
    ///
    /// # Panics
    /// If `corr` is not at the engine.
    pub fn answer(&mut self, corr: u32, tid: Tid, outcome: &Outcome) {
        let (asked, bytes) = self
            .at_engine
            .remove(&corr)
            .unwrap_or_else(|| panic!("an answer to request {corr}, which is not at the engine"));
        self.in_bytes -= bytes;
        if self.is_dropped {
            self.dropped += 1;
            return;
        }
        let frame = match (asked, outcome) {
            (Asked::Get, Outcome::Committed(state)) => match state.decode::<Option<Vec<u8>>>() {
                Ok(value) => convert::state_frame(corr, value.as_deref()),
                Err(e) => error_frame(corr, ErrorCode::INTERNAL, &format!("GET result: {e}")),
            },
            _ => convert::outcome_frame(corr, tid, outcome),
        };
        self.queue(frame);
    }

    /// Encodes queued answers onto `buf` until it holds `chunk_bytes` or
    /// none is left (one answer may take it past `chunk_bytes`); returns how
    /// many it took. They stay owed until [`Session::written`].
    pub fn write(&mut self, buf: &mut Vec<u8>, chunk_bytes: usize) -> usize {
        let mut taken = 0;
        while buf.len() < chunk_bytes
            && let Some((frame, owed_corr)) = self.out.pop_front()
        {
            self.out_bytes -= encoded_len(&frame);
            if owed_corr {
                self.answered.remove(&frame.corr);
            }
            if let Err(e) = encode(&frame, buf) {
                // Only an answer over the limits can fail here: say so.
                encode(&error_frame(frame.corr, ErrorCode::INTERNAL, &e.to_string()), buf)
                    .expect("an ERROR frame always encodes");
            }
            taken += 1;
        }
        self.writing += taken;
        taken
    }

    /// The socket took the bytes of `n` answers from [`Session::write`].
    ///
    /// # Panics
    /// If fewer than `n` were being written.
    pub fn written(&mut self, n: usize) {
        assert!(self.writing >= n, "wrote more answers than were taken");
        self.writing -= n;
    }
}

/// The fatal answer to a frame reusing `corr` while it is owed: with corr
/// 0, as it answers the connection, not a frame — with `corr`, a client
/// would take it for the answer to the first frame, which may still
/// commit.
fn duplicate_corr(corr: u32) -> Frame {
    error_frame(
        0,
        ErrorCode::DUPLICATE_CORR,
        &format!("correlation id {corr} is already awaiting an answer"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{MapOperator, Request};
    use crate::{FRAME_LEN_MAX, VERSION};
    use styx_engine::{Abort, FnId, Key};

    struct TestServer {
        app: App,
        map: Map,
        shutting_down: bool,
        spare: bool,
    }

    impl Server for TestServer {
        fn app(&self) -> &App {
            &self.app
        }
        fn name(&self) -> &str {
            "test 1.0"
        }
        fn map(&self) -> &Map {
            &self.map
        }
        fn placement(&self) -> Placement {
            Placement {
                version: 3,
                moved: vec![vec![(1, 0)]],
            }
        }
        fn is_shutting_down(&self) -> bool {
            self.shutting_down
        }
        fn runs_no_shard(&self) -> bool {
            self.spare
        }
        fn status(&self) -> Status {
            Status {
                shards: 2,
                epoch: 7,
                ..Status::default()
            }
        }
    }

    fn server() -> TestServer {
        let mut app = App::new("bank");
        let account = app.operator("account", 4);
        app.function(account, "deposit", |_ctx, amount: i64| async move { Ok(amount) });
        let map = Map::single(
            2,
            "127.0.0.1:7400".into(),
            vec![MapOperator {
                name: "account".into(),
                partitions: 4,
            }],
        );
        TestServer {
            app,
            map,
            shutting_down: false,
            spare: false,
        }
    }

    fn limits(in_flight_max: usize) -> Limits {
        Limits {
            in_flight_max,
            ..Limits::default()
        }
    }

    fn bytes(frames: &[Frame]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            encode(f, &mut out).unwrap();
        }
        out
    }

    fn hello(corr: u32) -> Frame {
        Frame {
            corr,
            body: Body::Hello {
                version_min: VERSION_MIN,
                version_max: VERSION_MAX,
                client: "test".into(),
            },
        }
    }

    fn get(corr: u32, operator: &str, key: u64) -> Frame {
        Frame {
            corr,
            body: Body::Get {
                operator: operator.into(),
                key: Key::from(key),
            },
        }
    }

    fn deposit(corr: u32) -> Frame {
        Frame {
            corr,
            body: Body::Request(Request {
                client: 0,
                seq: 0,
                ack: 0,
                operator: "account".into(),
                function: "deposit".into(),
                target: Address::Entity(Key::from(1u64)),
                args: Payload::encode(&5i64),
            }),
        }
    }

    /// Feeds `input` whole; what each frame became.
    fn feed(s: &mut Session, server: &TestServer, input: &[u8]) -> Vec<Received> {
        let mut input = input;
        let mut out = Vec::new();
        while s.wants_input() {
            match s.receive(&mut input, server) {
                Received::More => break,
                r => out.push(r),
            }
        }
        out
    }

    /// Every answer queued, decoded as a client would.
    fn answers(s: &mut Session) -> Vec<Frame> {
        let mut buf = Vec::new();
        let n = s.write(&mut buf, usize::MAX);
        s.written(n);
        let mut decoder = Decoder::new(FRAME_LEN_MAX);
        let mut input = buf.as_slice();
        let mut frames = Vec::new();
        while let Some(f) = decoder.decode(&mut input) {
            frames.push(f.unwrap());
        }
        assert_eq!(frames.len(), n);
        frames
    }

    fn error_code(f: &Frame) -> ErrorCode {
        match &f.body {
            Body::Error { code, .. } => *code,
            other => panic!("not an ERROR: {other:?}"),
        }
    }

    /// A session past its handshake.
    fn welcomed(server: &TestServer, in_flight_max: usize) -> Session {
        let mut s = Session::new(&limits(in_flight_max));
        assert_eq!(feed(&mut s, server, &bytes(&[hello(1)])), [Received::Answered]);
        answers(&mut s);
        s
    }

    #[test]
    fn a_hello_is_welcomed_with_the_servers_limits() {
        let server = server();
        let mut s = Session::new(&limits(16));
        assert!(!s.is_welcomed());
        assert_eq!(feed(&mut s, &server, &bytes(&[hello(9)])), [Received::Answered]);
        assert!(s.is_welcomed() && !s.is_closing());
        let welcome = answers(&mut s);
        assert_eq!(
            welcome,
            [Frame {
                corr: 9,
                body: Body::Welcome(Welcome {
                    version: VERSION,
                    frame_len_max: FRAME_LEN_MAX as u32,
                    in_flight_max: 16,
                    payload_len_max: PAYLOAD_LEN_MAX as u32,
                    server: "test 1.0".into(),
                }),
            }]
        );
        // Then it serves.
        let ping = Frame {
            corr: 2,
            body: Body::Ping { data: 77 },
        };
        assert_eq!(feed(&mut s, &server, &bytes(&[ping])), [Received::Answered]);
        assert_eq!(answers(&mut s)[0].body, Body::Pong { data: 77 });
    }

    #[test]
    fn a_session_without_a_hello_or_a_common_version_is_refused() {
        let server = server();
        let mut s = Session::new(&limits(16));
        let ping = Frame {
            corr: 3,
            body: Body::Ping { data: 1 },
        };
        // The frame after the refused one is never read.
        assert_eq!(feed(&mut s, &server, &bytes(&[ping, hello(4)])), [Received::Answered]);
        // Nor after a first frame that does not decode.
        let mut unknown = Session::new(&limits(16));
        let mut input = vec![6u8, 0, 0, 0, 1, 0x7e, 10, 0, 0, 0];
        input.extend(bytes(&[hello(6)]));
        assert_eq!(feed(&mut unknown, &server, &input), [Received::Answered]);
        assert!(unknown.is_closing() && !unknown.is_welcomed());
        assert_eq!(error_code(&answers(&mut unknown)[0]), ErrorCode::UNKNOWN_FRAME_TYPE);
        assert!(s.is_closing() && !s.wants_input() && !s.is_welcomed());
        let refused = answers(&mut s);
        assert_eq!(refused.len(), 1);
        assert_eq!(
            (refused[0].corr, error_code(&refused[0])),
            (3, ErrorCode::HANDSHAKE_REQUIRED)
        );

        let mut s = Session::new(&limits(16));
        let future = Frame {
            corr: 5,
            body: Body::Hello {
                version_min: VERSION_MAX + 1,
                version_max: VERSION_MAX + 3,
                client: "from the future".into(),
            },
        };
        assert_eq!(feed(&mut s, &server, &bytes(&[future])), [Received::Answered]);
        assert!(s.is_closing() && !s.is_welcomed());
        assert_eq!(error_code(&answers(&mut s)[0]), ErrorCode::UNSUPPORTED_VERSION);
    }

    #[test]
    fn a_get_becomes_a_call_of_get_and_its_state_a_state_frame() {
        let server = server();
        let mut s = welcomed(&server, 16);
        let got = feed(&mut s, &server, &bytes(&[get(11, "account", 42)]));
        let get_fn: FnId = server.app.resolve("account", GET_FUNCTION).unwrap();
        assert_eq!(
            got,
            [Received::Request {
                corr: 11,
                request: styx_engine::Request {
                    function: get_fn,
                    address: Address::Entity(Key::from(42u64)),
                    args: Payload::EMPTY,
                    client: None,
                },
            }]
        );
        assert_eq!(s.owed(), 1);
        assert!(!s.has_output());
        s.answer(11, 3, &Outcome::Committed(Payload::encode(&Some(vec![1u8, 2, 3]))));
        assert_eq!(
            answers(&mut s),
            [Frame {
                corr: 11,
                body: Body::State {
                    value: Some(vec![1, 2, 3])
                },
            }]
        );
        // An entity that does not exist.
        feed(&mut s, &server, &bytes(&[get(12, "account", 43)]));
        s.answer(12, 4, &Outcome::Committed(Payload::encode(&None::<Vec<u8>>)));
        assert_eq!(answers(&mut s)[0].body, Body::State { value: None });
        // An unknown operator is answered without the engine; the session goes on.
        assert_eq!(
            feed(&mut s, &server, &bytes(&[get(13, "acount", 1)])),
            [Received::Answered]
        );
        assert_eq!(error_code(&answers(&mut s)[0]), ErrorCode::UNKNOWN_OPERATOR);
        assert!(s.wants_input() && s.owed() == 0);
    }

    #[test]
    fn requests_are_resolved_and_their_outcomes_answered() {
        let server = server();
        let mut s = welcomed(&server, 16);
        let got = feed(&mut s, &server, &bytes(&[deposit(21)]));
        let [Received::Request { corr: 21, request }] = got.as_slice() else {
            panic!("{got:?}")
        };
        assert_eq!(request.function, server.app.resolve("account", "deposit").unwrap());
        s.answer(21, 8, &Outcome::Committed(Payload::encode(&5i64)));
        assert_eq!(
            answers(&mut s)[0].body,
            Body::Committed {
                tid: 8,
                result: Payload::encode(&5i64)
            }
        );
        // Refused at submission: it did not run.
        feed(&mut s, &server, &bytes(&[deposit(22)]));
        s.answer(
            22,
            0,
            &Outcome::Aborted(Abort::with_kind(styx_engine::AbortKind::Rejected, "full")),
        );
        assert_eq!(error_code(&answers(&mut s)[0]), ErrorCode::OVERLOADED);
    }

    #[test]
    fn a_malformed_frame_closes_only_its_session() {
        let server = server();
        let mut bad = welcomed(&server, 16);
        let mut good = welcomed(&server, 16);
        // A recoverable error first: an unknown frame type in a well-framed frame.
        let mut unknown = bytes(&[Frame {
            corr: 31,
            body: Body::Ping { data: 0 },
        }]);
        unknown[5] = 0x7e;
        assert_eq!(feed(&mut bad, &server, &unknown), [Received::Answered]);
        assert_eq!(error_code(&answers(&mut bad)[0]), ErrorCode::UNKNOWN_FRAME_TYPE);
        assert!(bad.wants_input());
        // Then framing is lost: a length prefix below the header.
        let mut input = 1u32.to_le_bytes().to_vec();
        input.extend(bytes(&[deposit(32)]));
        assert_eq!(feed(&mut bad, &server, &input), [Received::Answered]);
        assert!(bad.is_closing() && !bad.wants_input());
        assert_eq!(error_code(&answers(&mut bad)[0]), ErrorCode::BAD_LENGTH);
        // The other session goes on.
        let got = feed(&mut good, &server, &bytes(&[deposit(32)]));
        assert!(
            matches!(got.as_slice(), [Received::Request { corr: 32, .. }]),
            "{got:?}"
        );
        good.answer(32, 1, &Outcome::Committed(Payload::encode(&5i64)));
        assert!(matches!(answers(&mut good)[0].body, Body::Committed { .. }));
    }

    #[test]
    fn a_duplicate_correlation_id_is_fatal() {
        let server = server();
        let mut s = welcomed(&server, 16);
        let got = feed(&mut s, &server, &bytes(&[deposit(41), get(41, "account", 1)]));
        assert!(matches!(
            got.as_slice(),
            [Received::Request { corr: 41, .. }, Received::Answered]
        ));
        assert!(s.is_closing());
        assert_eq!(error_code(&answers(&mut s)[0]), ErrorCode::DUPLICATE_CORR);
        // The first one's answer still goes out.
        s.answer(41, 2, &Outcome::Committed(Payload::encode(&5i64)));
        assert_eq!(answers(&mut s).len(), 1);
    }

    #[test]
    fn a_corr_is_owed_until_its_answer_is_written() {
        let server = server();
        let ping = |corr| Frame {
            corr,
            body: Body::Ping { data: 1 },
        };
        // Reused once the answer went out: fine.
        let mut s = welcomed(&server, 16);
        feed(&mut s, &server, &bytes(&[ping(42)]));
        assert_eq!(answers(&mut s).len(), 1);
        let got = feed(&mut s, &server, &bytes(&[deposit(42)]));
        assert!(matches!(got.as_slice(), [Received::Request { corr: 42, .. }]));
        s.answer(42, 2, &Outcome::Committed(Payload::encode(&5i64)));
        // Reused while the answer is queued: fatal, and the first answer
        // still goes out, before the error.
        let mut s = welcomed(&server, 16);
        let got = feed(&mut s, &server, &bytes(&[deposit(43)]));
        assert!(matches!(got.as_slice(), [Received::Request { corr: 43, .. }]));
        s.answer(43, 2, &Outcome::Committed(Payload::encode(&5i64)));
        feed(&mut s, &server, &bytes(&[ping(43)]));
        assert!(s.is_closing());
        let out = answers(&mut s);
        assert!(matches!(out[0].body, Body::Committed { .. }), "{out:?}");
        assert_eq!((out[1].corr, error_code(&out[1])), (0, ErrorCode::DUPLICATE_CORR));
        // Taken for the socket, not yet written: the client may have read
        // it, so the corr is free (its next answer goes out after it).
        let mut s = welcomed(&server, 16);
        feed(&mut s, &server, &bytes(&[ping(44)]));
        let mut buf = Vec::new();
        assert_eq!(s.write(&mut buf, usize::MAX), 1);
        feed(&mut s, &server, &bytes(&[ping(44)]));
        assert!(!s.is_closing());
        s.written(1);
        assert_eq!(answers(&mut s).len(), 1);
        // A frame that does not decode but whose corr is readable is owed
        // by it too: reusing a corr at the engine is fatal there as well.
        let mut s = welcomed(&server, 16);
        feed(&mut s, &server, &bytes(&[deposit(45)]));
        let mut bad = bytes(&[ping(45)]);
        bad[5] = 0x7f; // an unknown frame type
        feed(&mut s, &server, &bad);
        assert!(s.is_closing());
        assert_eq!(error_code(&answers(&mut s)[0]), ErrorCode::DUPLICATE_CORR);
    }

    #[test]
    fn a_session_owing_in_flight_max_answers_takes_no_input() {
        let server = server();
        let mut s = welcomed(&server, 2);
        let input = bytes(&[deposit(51), deposit(52), deposit(53)]);
        let mut rest = input.as_slice();
        assert!(matches!(
            s.receive(&mut rest, &server),
            Received::Request { corr: 51, .. }
        ));
        assert!(matches!(
            s.receive(&mut rest, &server),
            Received::Request { corr: 52, .. }
        ));
        assert!(!s.wants_input(), "two owed of two");
        // Answered but not yet written: still owed.
        s.answer(51, 1, &Outcome::Committed(Payload::encode(&5i64)));
        assert!(!s.wants_input());
        let mut buf = Vec::new();
        assert_eq!(s.write(&mut buf, 1 << 16), 1);
        assert!(!s.wants_input(), "being written is owed");
        s.written(1);
        assert!(s.wants_input());
        assert!(matches!(
            s.receive(&mut rest, &server),
            Received::Request { corr: 53, .. }
        ));
        assert!(rest.is_empty());
    }

    /// A client sending large requests is held by their bytes at the
    /// engine, long before `in_flight_max`: 1 024 requests of 1 MiB would
    /// otherwise be 1 GiB held for one connection.
    #[test]
    fn requests_at_the_engine_are_bounded_by_bytes() {
        let server = server();
        let big = |corr: u32| Frame {
            corr,
            body: Body::Request(Request {
                client: 0,
                seq: 0,
                ack: 0,
                operator: "account".into(),
                function: "deposit".into(),
                target: Address::Entity(Key::from(1u64)),
                args: Payload::from_vec(vec![1u8; 100 << 10]),
            }),
        };
        let len = encoded_len(&big(1));
        let limits = Limits {
            in_flight_max: 64,
            input_bytes_max: 2 * len + len / 2,
            ..Limits::default()
        };
        let mut s = Session::new(&limits);
        feed(&mut s, &server, &bytes(&[hello(1)]));
        assert_eq!(answers(&mut s).len(), 1);
        let input = bytes(&(10..20).map(big).collect::<Vec<_>>());
        let mut rest = input.as_slice();
        // Two and a half frames' worth: the third passes the bound, and
        // the session reads no more though it owes only three answers.
        for corr in 10..13 {
            assert!(s.wants_input(), "before request {corr}");
            assert!(matches!(s.receive(&mut rest, &server), Received::Request { corr: c, .. } if c == corr));
        }
        assert!(!s.wants_input());
        assert_eq!((s.owed(), s.at_engine_bytes()), (3, 3 * len));
        // An answer frees its request's bytes: one more is read.
        s.answer(10, 1, &Outcome::Committed(Payload::encode(&())));
        assert_eq!(s.at_engine_bytes(), 2 * len);
        assert!(s.wants_input());
        assert!(matches!(
            s.receive(&mut rest, &server),
            Received::Request { corr: 13, .. }
        ));
        assert!(!s.wants_input());
        // Every answer frees its request's bytes.
        for corr in 11..14 {
            s.answer(corr, 1, &Outcome::Committed(Payload::encode(&())));
        }
        assert_eq!(s.at_engine_bytes(), 0);
    }

    #[test]
    fn answers_left_unread_are_bounded_by_bytes() {
        let server = server();
        let limits = Limits {
            in_flight_max: 64,
            output_bytes_max: crate::OUTPUT_BYTES_MAX_FLOOR,
            ..Limits::default()
        };
        let mut s = Session::new(&limits);
        feed(&mut s, &server, &bytes(&[hello(1)]));
        assert_eq!(answers(&mut s).len(), 1);
        let input = bytes(&(10..20).map(deposit).collect::<Vec<_>>());
        let mut rest = input.as_slice();
        for corr in 10..20 {
            assert!(matches!(s.receive(&mut rest, &server), Received::Request { corr: c, .. } if c == corr));
        }
        // Answers of ~half a MiB: under half the bound the session reads
        // on; from half it reads nothing more, though it owes only a few.
        let big = Outcome::Committed(Payload::from_vec(vec![7u8; 500 << 10]));
        let mut answered = 0;
        while s.wants_input() {
            s.answer(10 + answered, 1, &big);
            answered += 1;
        }
        assert!(answered >= 2, "{answered}");
        assert!(s.owed() < 64 && !s.is_dropped());
        // One chunk taken by the socket: it is no longer queued.
        let mut buf = Vec::new();
        assert_eq!(s.write(&mut buf, 1), 1);
        s.written(1);
        assert!(s.wants_input(), "below half again");
        // Past the bound: the server's to decide (it gives the client a
        // while to read); dropped, nothing is left to write and the answers
        // still at the engine are dropped as they come; every frame stays
        // owed.
        while !s.is_over_limit() {
            s.answer(10 + answered, 1, &big);
            answered += 1;
        }
        assert!(!s.is_dropped() && !s.wants_input() && s.has_output());
        s.drop_answers();
        assert!(s.is_dropped() && s.is_closing() && !s.wants_input() && !s.has_output() && !s.awaits_engine());
        assert_eq!(s.owed(), 9, "ten read, one written");
        // Its requests still at the engine hold their memory there (the
        // server keeps the connection's slot) until they come back.
        assert!(s.holds_engine());
        while s.holds_engine() {
            s.answer(10 + answered, 1, &big);
            answered += 1;
        }
        assert_eq!(answered, 10, "every request read came back");
        assert_eq!(s.owed(), 9);
        assert_eq!(s.write(&mut buf, 1 << 20), 0);
    }

    #[test]
    fn requests_are_refused_while_the_server_stops() {
        let mut server = server();
        let mut s = welcomed(&server, 16);
        server.shutting_down = true;
        assert_eq!(
            feed(&mut s, &server, &bytes(&[deposit(61), get(62, "account", 1)])),
            [Received::Answered, Received::Answered]
        );
        let codes: Vec<ErrorCode> = answers(&mut s).iter().map(error_code).collect();
        assert_eq!(codes, [ErrorCode::SHUTTING_DOWN, ErrorCode::SHUTTING_DOWN]);
        // What needs no engine is still served.
        let status = Frame {
            corr: 63,
            body: Body::Status,
        };
        feed(
            &mut s,
            &server,
            &bytes(&[
                status,
                Frame {
                    corr: 64,
                    body: Body::Map,
                },
                Frame {
                    corr: 65,
                    body: Body::Placement,
                },
            ]),
        );
        let a = answers(&mut s);
        assert!(matches!(&a[0].body, Body::StatusReply(st) if st.epoch == 7));
        assert!(matches!(&a[1].body, Body::MapReply(m) if m.operators.len() == 1));
        assert_eq!(a[2].body, Body::PlacementReply(server.placement()));
    }

    /// A spare (a node running no shard) refuses what needs an engine as
    /// not run, saying why, and serves the rest.
    #[test]
    fn a_spare_refuses_requests_and_answers_the_rest() {
        let mut server = server();
        server.spare = true;
        let mut s = welcomed(&server, 16);
        let layout = Frame {
            corr: 63,
            body: Body::Layout,
        };
        let members = Frame {
            corr: 64,
            body: Body::Members,
        };
        feed(
            &mut s,
            &server,
            &bytes(&[deposit(61), get(62, "account", 1), layout, members]),
        );
        let a = answers(&mut s);
        for refused in &a[..2] {
            assert_eq!(error_code(refused), ErrorCode::SHUTTING_DOWN);
            assert!(format!("{refused:?}").contains("runs no shard"), "{refused:?}");
        }
        assert!(matches!(&a[2].body, Body::LayoutReply(_)), "{:?}", a[2]);
        // By default no node left, at the layout's version.
        assert_eq!(
            a[3].body,
            Body::MembersReply(Members {
                version: server.layout().version,
                left: Vec::new()
            })
        );
    }

    #[test]
    fn a_frame_split_anywhere_is_read_whole() {
        let server = server();
        let mut s = Session::new(&limits(16));
        let input = bytes(&[hello(1), deposit(2)]);
        let mut got = Vec::new();
        for byte in &input {
            let mut one = std::slice::from_ref(byte);
            match s.receive(&mut one, &server) {
                Received::More => {}
                r => got.push(r),
            }
            assert!(one.is_empty());
        }
        assert!(matches!(
            got.as_slice(),
            [Received::Answered, Received::Request { corr: 2, .. }]
        ));
    }
}
