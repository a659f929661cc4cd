//! The client library against a fake server in the same executor.
//!
//! The fake server speaks the protocol with the codec and keeps a tiny
//! table: outcomes by (client, seq), so a resent request gets the answer of
//! its one run, and a count of runs per (client, seq), so a test can prove
//! none ran twice. Its functions: `add` (adds an i64 to the key's total,
//! returns `(arg, total)`), `fail` (aborts), `hang` (never answers). It can
//! hold answers and send them in reverse order, drop connections in the
//! middle of a pipeline, refuse requests as OVERLOADED, and refuse the
//! handshake.

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};
use styx_engine::{Abort, AbortKind, Address, Key, Payload, TypedRequest};
use styx_net::client::{Client, ConnectOptions, Connection, Error, Options, Outcome, Ran};
use styx_net::{
    Body, Decoder, ErrorCode, FRAME_LEN_MAX, Frame, Layout, Map, MapNode, MapOperator, Members, Request, Status,
    Welcome, encode, error_frame,
};

/// Runs `f` on a fresh glommio executor.
fn run<G, F, T>(f: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(f)
        .expect("an executor")
        .join()
        .expect("the executor ran")
}

#[derive(Clone)]
struct Config {
    welcome: Welcome,
    /// Answer once this many frames are held, or when the client is quiet
    /// for a millisecond.
    hold: usize,
    /// Answer each batch in reverse order of arrival.
    reverse: bool,
    /// Drop this many connections, each after receiving `drop_after`
    /// requests: first run them all, then answer only half.
    drops: usize,
    drop_after: usize,
    /// Refuse each (client, seq) this many times with OVERLOADED first.
    overloaded: u32,
    /// Answer HELLO with this error, from this connection on (1: all).
    refuse_handshake: Option<ErrorCode>,
    refuse_handshake_from: usize,
    /// Connections up to this one answer WELCOME, then nothing (a server
    /// gone without closing: a host lost, a network cut).
    silent: usize,
    /// Answer LAYOUT with this; `None`: as a server older than LAYOUT
    /// (`UNKNOWN_FRAME_TYPE`). MAP answers two nodes of two shards each.
    layout: Option<Layout>,
    /// Answer MEMBERS with this; `None`: as a server older than MEMBERS.
    members: Option<Members>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            welcome: Welcome {
                version: 1,
                frame_len_max: FRAME_LEN_MAX as u32,
                in_flight_max: 1024,
                payload_len_max: 1 << 20,
                server: "fake".to_string(),
            },
            hold: 1,
            reverse: false,
            drops: 0,
            drop_after: 0,
            overloaded: 0,
            refuse_handshake: None,
            refuse_handshake_from: 1,
            silent: 0,
            layout: None,
            members: None,
        }
    }
}

#[derive(Default)]
struct State {
    /// Final answers (COMMITTED or ABORTED) by (client, seq).
    outcomes: HashMap<(u64, u64), Body>,
    /// Runs of each (client, seq): must never exceed 1.
    runs: HashMap<(u64, u64), u32>,
    refusals: HashMap<(u64, u64), u32>,
    ack_max: HashMap<u64, u64>,
    totals: HashMap<Vec<u8>, i64>,
    next_tid: u64,
    connections: usize,
    /// Connections dropped on purpose.
    dropped: usize,
    requests: usize,
    /// Requests answered from the table: resends.
    resent: usize,
    forgotten: usize,
    /// The most frames received and not yet answered on one connection.
    in_flight_peak: usize,
    /// Batches answered out of order.
    reordered: usize,
}

struct Fake {
    config: Config,
    state: RefCell<State>,
}

/// Starts a fake server on 127.0.0.1 in this executor.
fn fake(config: Config) -> (SocketAddr, Rc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = Rc::new(Fake {
        config,
        state: RefCell::new(State::default()),
    });
    let server = fake.clone();
    glommio::spawn_local(async move {
        loop {
            let stream = listener.accept().await.unwrap();
            glommio::spawn_local(serve(server.clone(), stream)).detach();
        }
    })
    .detach();
    (addr, fake)
}

async fn send(stream: &mut TcpStream, frames: &[Frame]) -> bool {
    let mut out = Vec::new();
    for frame in frames {
        encode(frame, &mut out).unwrap();
    }
    stream.write_all(&out).await.is_ok()
}

async fn serve(fake: Rc<Fake>, mut stream: TcpStream) {
    let config = &fake.config;
    let connection = {
        let mut state = fake.state.borrow_mut();
        state.connections += 1;
        state.connections
    };
    let mut decoder = Decoder::new(FRAME_LEN_MAX);
    let mut buf = vec![0u8; 64 << 10];
    let mut frames = Vec::new();
    // HELLO, then WELCOME (or the refusal).
    while frames.is_empty() {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        let mut input = &buf[..n];
        while let Some(frame) = decoder.decode(&mut input) {
            frames.push(frame.unwrap());
        }
    }
    let hello = frames.remove(0);
    assert!(matches!(hello.body, Body::Hello { .. }), "{hello:?}");
    if let Some(code) = config
        .refuse_handshake
        .filter(|_| connection >= config.refuse_handshake_from)
    {
        send(&mut stream, &[error_frame(0, code, "go away")]).await;
        return;
    }
    let welcome = Frame {
        corr: 0,
        body: Body::Welcome(config.welcome.clone()),
    };
    if !send(&mut stream, &[welcome]).await {
        return;
    }
    if connection <= config.silent {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        return;
    }
    let mut held = frames;
    let mut hung = Vec::new();
    let mut received = 0;
    loop {
        let read = if held.is_empty() {
            stream.read(&mut buf).await
        } else {
            match glommio::future::timeout(Duration::from_millis(1), stream.read(&mut buf)).await {
                Ok(read) => read,
                Err(_) => {
                    // Quiet: answer what is held.
                    if !answer(&fake, &mut stream, &mut held, &mut hung).await {
                        return;
                    }
                    continue;
                }
            }
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut input = &buf[..n];
        while let Some(frame) = decoder.decode(&mut input) {
            let frame = frame.unwrap();
            if matches!(frame.body, Body::Request(_)) {
                received += 1;
                fake.state.borrow_mut().requests += 1;
            }
            held.push(frame);
            let mut state = fake.state.borrow_mut();
            state.in_flight_peak = state.in_flight_peak.max(held.len() + hung.len());
        }
        if connection <= config.drops && received >= config.drop_after {
            // Run everything held, answer half, hang up.
            let answers: Vec<Frame> = held.iter().filter_map(|f| reply(&fake, f)).collect();
            fake.state.borrow_mut().dropped += 1;
            send(&mut stream, &answers[..answers.len() / 2]).await;
            return;
        }
        if held.len() >= config.hold && !answer(&fake, &mut stream, &mut held, &mut hung).await {
            return;
        }
    }
}

/// Answers every held frame, in reverse order if configured.
async fn answer(fake: &Fake, stream: &mut TcpStream, held: &mut Vec<Frame>, hung: &mut Vec<Frame>) -> bool {
    if fake.config.reverse {
        held.reverse();
        if held.len() > 1 {
            fake.state.borrow_mut().reordered += 1;
        }
    }
    let mut answers = Vec::new();
    for frame in held.drain(..) {
        match reply(fake, &frame) {
            Some(answer) => answers.push(answer),
            None => hung.push(frame),
        }
    }
    send(stream, &answers).await
}

/// The answer to one frame; `None` for one that hangs.
fn reply(fake: &Fake, frame: &Frame) -> Option<Frame> {
    let mut state = fake.state.borrow_mut();
    let body = match &frame.body {
        Body::Ping { data } => Body::Pong { data: *data },
        Body::Status => Body::StatusReply(Status {
            shards: 1,
            committed: state.next_tid,
            ..Status::default()
        }),
        Body::Map => Body::MapReply(fake_map()),
        Body::Layout => match &fake.config.layout {
            Some(l) => Body::LayoutReply(l.clone()),
            None => return Some(error_frame(frame.corr, ErrorCode::UNKNOWN_FRAME_TYPE, "no LAYOUT here")),
        },
        Body::Members => match &fake.config.members {
            Some(m) => Body::MembersReply(m.clone()),
            None => {
                return Some(error_frame(
                    frame.corr,
                    ErrorCode::UNKNOWN_FRAME_TYPE,
                    "no MEMBERS here",
                ));
            }
        },
        Body::Get { key, .. } => Body::State {
            value: state.totals.get(key.as_bytes()).map(|t| t.to_le_bytes().to_vec()),
        },
        Body::Request(request) => {
            return run_request(&fake.config, &mut state, request).map(|body| Frame { corr: frame.corr, body });
        }
        other => panic!("the client sent {other:?}"),
    };
    Some(Frame { corr: frame.corr, body })
}

/// What the fake answers MAP: two nodes, shards 0 and 1 on the first by
/// their ranges, 2 and 3 on the second.
fn fake_map() -> Map {
    let node = |first_shard, client: &str| MapNode {
        first_shard,
        shards: 2,
        client: client.into(),
    };
    Map {
        node: 0,
        shards: 4,
        nodes: vec![node(0, "a:1"), node(2, "b:1")],
        operators: vec![MapOperator {
            name: "counter".into(),
            partitions: 8,
        }],
        placed: None,
    }
}

fn run_request(config: &Config, state: &mut State, request: &Request) -> Option<Body> {
    if request.function == "hang" {
        return None;
    }
    let id = (request.client, request.seq);
    let ack_max = state.ack_max.entry(request.client).or_insert(0);
    assert!(
        request.ack <= request.seq,
        "ack {} past seq {}",
        request.ack,
        request.seq
    );
    if request.seq < *ack_max {
        state.forgotten += 1;
        return Some(error_frame(0, ErrorCode::SEQ_FORGOTTEN, "seq below the ack").body);
    }
    *ack_max = (*ack_max).max(request.ack);
    if let Some(outcome) = state.outcomes.get(&id) {
        state.resent += 1;
        return Some(outcome.clone());
    }
    let refusals = state.refusals.entry(id).or_insert(0);
    if *refusals < config.overloaded {
        *refusals += 1;
        return Some(error_frame(0, ErrorCode::OVERLOADED, "busy").body);
    }
    *state.runs.entry(id).or_insert(0) += 1;
    state.next_tid += 1;
    let tid = state.next_tid;
    let outcome = match request.function.as_str() {
        "add" => {
            let Address::Entity(key) = &request.target else {
                panic!("add on a partition")
            };
            let arg: i64 = request.args.decode().unwrap();
            let total = state.totals.entry(key.as_bytes().to_vec()).or_insert(0);
            *total += arg;
            Body::Committed {
                tid,
                result: Payload::encode(&(arg, *total)),
            }
        }
        "fail" => Body::Aborted {
            tid,
            abort: Abort::new("no"),
        },
        other => panic!("no function {other}"),
    };
    state.outcomes.insert(id, outcome.clone());
    Some(outcome)
}

fn options() -> Options {
    Options {
        timeout: Duration::from_secs(5),
        backoff_min: Duration::from_millis(1),
        backoff_max: Duration::from_millis(20),
        ..Options::default()
    }
}

/// Starts `n` calls of `add` (key i % 10, argument i) as tasks and returns
/// their results in order.
async fn add_all(client: &Client, n: i64) -> Vec<Result<(i64, i64), Error>> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            glommio::spawn_local(async move {
                client
                    .call_typed::<i64, (i64, i64)>("counter", (i % 10) as u64, "add", &i)
                    .await
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await);
    }
    results
}

/// Every call got its own argument back, every seq ran exactly once, and
/// the totals are the sums of the arguments.
fn check_exactly_once(fake: &Fake, client_id: u64, results: &[Result<(i64, i64), Error>]) {
    let n = results.len() as i64;
    for (i, result) in results.iter().enumerate() {
        let (arg, _) = result.as_ref().unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(*arg, i as i64, "call {i} got another call's answer");
    }
    let state = fake.state.borrow();
    assert_eq!(state.runs.len(), results.len(), "every call ran");
    for seq in 1..=n as u64 {
        assert_eq!(state.runs.get(&(client_id, seq)), Some(&1), "seq {seq} ran once");
    }
    for k in 0..10i64 {
        let expected: i64 = (0..n).filter(|i| i % 10 == k).sum();
        assert_eq!(
            state.totals[&(k as u64).to_be_bytes().to_vec()],
            expected,
            "total of key {k}"
        );
    }
}

#[test]
fn handshake_records_the_server_limits() {
    run(|| async {
        let (addr, _fake) = fake(Config {
            welcome: Welcome {
                version: 1,
                frame_len_max: 8192,
                in_flight_max: 7,
                payload_len_max: 3000,
                server: "fake 0.1".to_string(),
            },
            ..Config::default()
        });
        let conn = Connection::connect(addr, &ConnectOptions::default()).await.unwrap();
        assert_eq!(conn.welcome().server, "fake 0.1");
        assert_eq!(conn.welcome().version, 1);
        assert_eq!(
            (conn.frame_len_max(), conn.in_flight_max(), conn.payload_len_max()),
            (8192, 7, 3000)
        );
        assert_eq!(conn.peer(), addr);
        let fewer = ConnectOptions {
            in_flight_max: 3,
            ..ConnectOptions::default()
        };
        assert_eq!(Connection::connect(addr, &fewer).await.unwrap().in_flight_max(), 3);

        // A refusal is returned at once, not retried.
        let (addr, _fake) = fake(Config {
            refuse_handshake: Some(ErrorCode::UNSUPPORTED_VERSION),
            ..Config::default()
        });
        let err = Connection::connect(addr, &ConnectOptions::default())
            .await
            .err()
            .unwrap();
        assert_eq!(err.code(), Some(ErrorCode::UNSUPPORTED_VERSION), "{err}");
        let start = Instant::now();
        let err = Client::connect(addr, options()).await.err().unwrap();
        assert!(matches!(err, Error::Handshake { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(1));

        // Nobody listening: retried until the deadline, which names the cause.
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let nobody = closed.local_addr().unwrap();
        drop(closed);
        let quick = Options {
            timeout: Duration::from_millis(100),
            ..options()
        };
        let err = Client::connect(nobody, quick).await.err().unwrap();
        assert!(
            matches!(&err, Error::Timeout { last: Some(last), sent: false, .. } if last.contains("cannot connect")),
            "{err}"
        );
        assert!(
            !err.outcome_unknown() && err.to_string().contains("did not run"),
            "{err}"
        );
    });
}

#[test]
fn a_thousand_pipelined_calls_answered_out_of_order() {
    run(|| async {
        let (addr, fake) = fake(Config {
            hold: 64,
            reverse: true,
            ..Config::default()
        });
        let client = Client::connect(addr, options()).await.unwrap();
        let results = add_all(&client, 1000).await;
        check_exactly_once(&fake, client.id(), &results);
        {
            let state = fake.state.borrow();
            assert!(state.reordered > 0, "the server answered out of order");
            assert!(state.in_flight_peak > 1, "calls were pipelined");
            assert_eq!((state.connections, state.resent), (1, 0));
        }
        let stats = client.connection().await.unwrap().stats();
        assert_eq!((stats.frames_sent, stats.answers), (1000, 1000));
        assert!(stats.writes < stats.frames_sent / 4, "writes were batched: {stats:?}");
        assert_eq!(client.ack(), 1001);
        assert_eq!(client.next_seq(), 1001);
    });
}

#[test]
fn in_flight_limit_is_respected() {
    run(|| async {
        let mut config = Config {
            hold: 8,
            reverse: true,
            ..Config::default()
        };
        config.welcome.in_flight_max = 8;
        let (addr, fake) = fake(config);
        let client = Client::connect(addr, options()).await.unwrap();
        let results = add_all(&client, 200).await;
        check_exactly_once(&fake, client.id(), &results);
        assert_eq!(
            fake.state.borrow().in_flight_peak,
            8,
            "the server saw at most 8 in flight, and 8"
        );
        assert_eq!(client.connection().await.unwrap().stats().in_flight_peak, 8);
    });
}

#[test]
fn dropped_connections_are_reopened_and_requests_resent_with_their_seqs() {
    run(|| async {
        let (addr, fake) = fake(Config {
            hold: 16,
            reverse: true,
            drops: 3,
            drop_after: 100,
            ..Config::default()
        });
        let client = Client::connect(addr, options()).await.unwrap();
        let results = add_all(&client, 500).await;
        check_exactly_once(&fake, client.id(), &results);
        let state = fake.state.borrow();
        // How many drops depends on how the stream was cut into reads, but
        // the first leaves at least 200 calls unanswered, so a second follows.
        assert!(state.dropped >= 2, "dropped {}", state.dropped);
        assert_eq!(state.connections, state.dropped + 1, "one reconnection per drop");
        assert!(state.resent > 0, "some resent requests had run before the drop");
        assert!(state.requests > 500, "requests were resent");
    });
}

/// A request sent on a connection that dropped, whose resend then fails
/// with an error that alone would mean "it did not run" (the server came
/// back refusing the handshake): the request may have run, so the caller
/// must not be told it is safe to send again under a new seq.
#[test]
fn a_resend_that_fails_does_not_hide_that_the_request_was_sent() {
    run(|| async {
        let (addr, fake) = fake(Config {
            drops: 1,
            drop_after: 1,
            refuse_handshake: Some(ErrorCode::UNSUPPORTED_VERSION),
            refuse_handshake_from: 2,
            ..Config::default()
        });
        let client = Client::connect(addr, options()).await.unwrap();
        let e = client
            .call_typed::<i64, (i64, i64)>("counter", 1u64, "add", &5i64)
            .await
            .unwrap_err();
        assert_eq!(fake.state.borrow().runs.values().sum::<u32>(), 1, "it ran");
        assert_eq!(e.ran(), Ran::Unknown, "{e}");
        assert!(e.outcome_unknown(), "{e}");
        assert!(e.to_string().contains("UNSUPPORTED_VERSION"), "{e}");
    });
}

/// A server that stops answering without closing: the call past its
/// deadline forgets the silent connection, so the next one connects again.
#[test]
fn a_connection_silent_for_a_whole_deadline_is_replaced() {
    run(|| async {
        let (addr, fake) = fake(Config {
            silent: 1,
            ..Config::default()
        });
        let client = Client::connect(addr, options())
            .await
            .unwrap()
            .with_timeout(Duration::from_millis(300));
        let e = client
            .call_typed::<i64, (i64, i64)>("counter", 1u64, "add", &5i64)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { sent: true, .. }), "{e}");
        let ok = client
            .call_typed::<i64, (i64, i64)>("counter", 2u64, "add", &7i64)
            .await;
        assert_eq!(ok.unwrap(), (7, 7));
        assert_eq!(fake.state.borrow().connections, 2);
    });
}

#[test]
fn a_dead_connection_fails_every_pending_call_at_once() {
    run(|| async {
        let (addr, _fake) = fake(Config {
            hold: 100,
            drops: 1,
            drop_after: 5,
            ..Config::default()
        });
        let conn = Connection::connect(addr, &ConnectOptions::default()).await.unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (1..=5u64)
            .map(|seq| {
                let conn = conn.clone();
                glommio::spawn_local(async move {
                    conn.request(Request {
                        client: 9,
                        seq,
                        ack: 1,
                        operator: "counter".into(),
                        function: "hang".into(),
                        target: Address::Entity(seq.into()),
                        args: Payload::EMPTY,
                    })
                    .await
                })
            })
            .collect();
        for task in tasks {
            let err = task.await.unwrap_err();
            assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
            assert!(err.outcome_unknown());
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(conn.is_closed());
        assert!(conn.close_reason().unwrap().contains("closed the connection"));
        assert!(matches!(conn.ping().await, Err(Error::ConnectionLost { .. })));
    });
}

#[test]
fn overloaded_requests_are_retried() {
    run(|| async {
        let (addr, fake) = fake(Config {
            overloaded: 3,
            ..Config::default()
        });
        let client = Client::connect(addr, options()).await.unwrap();
        let results = add_all(&client, 50).await;
        check_exactly_once(&fake, client.id(), &results);
        let state = fake.state.borrow();
        assert!(state.refusals.values().all(|&n| n == 3));
        assert_eq!(state.requests, 50 * 4);
    });
}

#[test]
fn a_call_past_its_deadline_times_out_with_an_unknown_outcome() {
    run(|| async {
        let (addr, _fake) = fake(Config::default());
        let client = Client::connect(addr, options()).await.unwrap();
        let quick = client.with_timeout(Duration::from_millis(100));
        let start = Instant::now();
        let err = quick.call("counter", 1u64, "hang", Payload::EMPTY).await.unwrap_err();
        let waited = start.elapsed();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(err.outcome_unknown());
        assert!(err.to_string().contains("outcome is unknown"), "{err}");
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // The client goes on, and acknowledges the abandoned seq.
        let (arg, total): (i64, i64) = client.call_typed("counter", 1u64, "add", &5i64).await.unwrap();
        assert_eq!((arg, total), (5, 5));
        assert_eq!(client.ack(), 3);
    });
}

#[test]
fn an_oversized_request_is_refused_before_sending() {
    run(|| async {
        let mut config = Config::default();
        config.welcome.frame_len_max = 4096;
        config.welcome.payload_len_max = 1 << 20;
        let (addr, fake) = fake(config);
        let client = Client::connect(addr, options()).await.unwrap();
        let big = Payload::from_vec(vec![7; 5000]);
        let err = client.call("counter", 1u64, "add", big).await.unwrap_err();
        assert!(matches!(err, Error::FrameTooLarge { max: 4096, .. }), "{err}");
        assert!(err.to_string().contains("nothing was sent"));

        let mut config = Config::default();
        config.welcome.payload_len_max = 100;
        let (addr2, fake2) = self::fake(config);
        let client2 = Client::connect(addr2, options()).await.unwrap();
        let err = client2
            .call("counter", 1u64, "add", Payload::from_vec(vec![7; 101]))
            .await
            .unwrap_err();
        assert_eq!(err, Error::ArgsTooLarge { len: 101, max: 100 });

        assert_eq!((fake.state.borrow().requests, fake2.state.borrow().requests), (0, 0));
        // The connection is fine for what fits.
        assert_eq!(
            client
                .call_typed::<i64, (i64, i64)>("counter", 1u64, "add", &1)
                .await
                .unwrap(),
            (1, 1)
        );
    });
}

#[test]
fn seq_forgotten_is_returned_not_retried() {
    run(|| async {
        let (addr, fake) = fake(Config::default());
        let id = Options {
            client_id: Some(77),
            ..options()
        };
        let first = Client::connect(addr, id.clone()).await.unwrap();
        for i in 0..3 {
            first
                .call_typed::<i64, (i64, i64)>("counter", 1u64, "add", &i)
                .await
                .unwrap();
        }
        // A second client with the same id starts again at seq 1: below the ack.
        let second = Client::connect(addr, id).await.unwrap();
        let err = second
            .call("counter", 1u64, "add", Payload::encode(&1i64))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::SEQ_FORGOTTEN), "{err}");
        // This copy did not run, but the first client's seq 1 did: the
        // error cannot tell the caller whether its request ran.
        assert!(err.outcome_unknown() && !err.answer_lost(), "{err}");
        assert_eq!(err.ran(), styx_net::client::Ran::Unknown);
        let state = fake.state.borrow();
        assert_eq!((state.forgotten, state.requests), (1, 4));
    });
}

#[test]
fn aborts_reads_status_and_ping() {
    run(|| async {
        let (addr, _fake) = fake(Config::default());
        let client = Client::connect(addr, options()).await.unwrap();
        match client.call("counter", "x", "fail", Payload::EMPTY).await.unwrap() {
            Outcome::Aborted { abort, .. } => {
                assert_eq!((abort.kind(), abort.message()), (AbortKind::User, "no"));
            }
            other => panic!("{other:?}"),
        }
        let err = client
            .call_typed::<(), ()>("counter", "x", "fail", &())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Aborted {
                    kind: AbortKind::User,
                    ..
                }
            ),
            "{err}"
        );
        let outcome = client
            .call("counter", "x", "add", Payload::encode(&4i64))
            .await
            .unwrap();
        assert!(outcome.is_committed());
        let err = outcome.decode::<String>().unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err}");
        assert_eq!(
            client.get("counter", "x").await.unwrap(),
            Some(4i64.to_le_bytes().to_vec())
        );
        assert_eq!(client.get("counter", "y").await.unwrap(), None);
        assert_eq!(client.status().await.unwrap().committed, 3);
        assert!(client.ping().await.unwrap() < Duration::from_secs(1));
        // Keys: a u64 is its big-endian bytes, a string its bytes.
        client
            .call("counter", 3u64, "add", Payload::encode(&1i64))
            .await
            .unwrap();
        assert_eq!(
            client.get("counter", &[0u8, 0, 0, 0, 0, 0, 0, 3][..]).await.unwrap(),
            Some(1i64.to_le_bytes().to_vec())
        );
    });
}

#[test]
fn map_places_shards_by_layout_and_by_ranges_where_a_server_has_none() {
    run(|| async {
        // A server older than LAYOUT: MAP's ranges place the shards.
        let (addr, _fake) = fake(Config::default());
        let map = Client::connect(addr, options()).await.unwrap().map().await.unwrap();
        assert_eq!(map.placed, None);
        assert_eq!(map.node_of_shard(1), Some(0));
        assert_eq!(map.shards_of_node(1), [2, 3]);
        // A server that answers LAYOUT: its placement wins.
        let layout = Layout {
            version: 3,
            node_of: vec![1, 0, 1, 0],
        };
        let (addr, _fake) = fake(Config {
            layout: Some(layout.clone()),
            ..Config::default()
        });
        let map = Client::connect(addr, options()).await.unwrap().map().await.unwrap();
        assert_eq!(map.placed.as_ref(), Some(&layout));
        assert_eq!(map.node_of_shard(1), Some(0));
        assert_eq!(map.node_of_shard(0), Some(1));
        assert_eq!(map.shards_of_node(1), [0, 2]);
        // A layout that does not fit the map is the server's error, not a
        // placement to route by.
        let (addr, _fake) = fake(Config {
            layout: Some(Layout {
                version: 1,
                node_of: vec![0, 1, 2, 0],
            }),
            ..Config::default()
        });
        let err = Client::connect(addr, options()).await.unwrap().map().await.unwrap_err();
        assert!(err.to_string().contains("LAYOUT does not fit MAP"), "{err}");
    });
}

/// MEMBERS names the nodes that left; a server older than it knows of
/// none (`None`, not an error).
#[test]
fn members_lists_the_nodes_gone_and_none_from_an_older_server() {
    run(|| async {
        let (addr, _fake) = fake(Config::default());
        let c = Connection::connect(addr, &ConnectOptions::default()).await.unwrap();
        assert_eq!(c.members().await.unwrap(), None);
        let members = Members {
            version: 4,
            left: vec![1],
        };
        let (addr, _fake) = fake(Config {
            members: Some(members.clone()),
            ..Config::default()
        });
        let c = Connection::connect(addr, &ConnectOptions::default()).await.unwrap();
        assert_eq!(c.members().await.unwrap(), Some(members));
    });
}

#[test]
fn a_typed_request_is_sent_and_its_result_decoded() {
    run(|| async {
        let (addr, _fake) = fake(Config::default());
        let client = Client::connect(addr, options()).await.unwrap();
        // What an entity's `{Entity}Request` builder returns.
        let add = TypedRequest::<(i64, i64)>::new("counter", "add", Key::from(3u64), &5i64);
        assert_eq!(client.invoke(&add).await.unwrap(), (5, 5));
        assert_eq!(client.invoke(&add).await.unwrap(), (5, 10));
        let fail = TypedRequest::<()>::new("counter", "fail", Key::from(3u64), &());
        let err = client.invoke(&fail).await.unwrap_err();
        assert!(matches!(err, Error::Aborted { .. }), "{err}");
    });
}
