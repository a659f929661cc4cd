//! The client library: calls over the wire protocol, on glommio.
//!
//! Two layers:
//! - [`Connection`]: one TCP connection after HELLO/WELCOME. Pipelined (many
//!   frames in flight, answers matched by correlation id in any order),
//!   writes batched, `in_flight_max` respected by waiting for a slot, frames
//!   checked against the server's limits before anything is sent. It sends
//!   each frame once.
//! - [`Client`]: exactly-once calls on top. It numbers its requests under
//!   one client id, reconnects when the connection drops and resends the
//!   requests that had no answer with the **same** client id and seq, so
//!   the server runs each at most once and every retry gets the outcome of
//!   that one run (`docs/protocol.md`, section 7). `OVERLOADED` (and
//!   `SHUTTING_DOWN`: the request did not run) is retried after a pause
//!   that grows; other errors are returned. Every call has a deadline.
//!
//! Retry policy of a call, until its deadline:
//! - no connection, or it dropped: reconnect after a back-off that doubles
//!   from `backoff_min` to `backoff_max` (with jitter), then resend;
//!   concurrent calls share one reconnection;
//! - `ERROR OVERLOADED` or `SHUTTING_DOWN`: resend after the same back-off;
//! - any other answer or error: returned.
//!
//! A call that reaches its deadline returns [`Error::Timeout`]: its outcome
//! is **unknown**. The request may have run (once) or not, and may still
//! run; the client gives up on it and acknowledges its seq, so it is never
//! sent again and the server may forget it. Read the state to find out.
//! (The one exception: a timeout with `sent: false` never had a connection,
//! so its request did not run.) An abandoned request keeps its in-flight
//! slot on its connection until the server answers it.
//!
//! `ack` is the lowest seq whose call is still waiting for an outcome (or
//! the next seq when none is); it never decreases and never passes a seq
//! that may still be retried.
//!
//! Everything here is single-threaded: a `Client` lives on one glommio
//! executor (clone it into tasks spawned there). Use one client per
//! executor.
//!
//! ```no_run
//! use styx_engine::Payload;
//! use styx_net::client::{Client, Options, Outcome};
//!
//! glommio::LocalExecutor::default().run(async {
//!     let client = Client::connect("127.0.0.1:7000", Options::default()).await?;
//!
//!     // Typed: arguments and result in the engine's encoding.
//!     let balance: i64 = client.call_typed("account", 5u64, "deposit", &100i64).await?;
//!     println!("balance {balance}");
//!
//!     // Untyped: the outcome as the server sent it.
//!     match client.call("account", 5u64, "withdraw", Payload::encode(&500i64)).await? {
//!         Outcome::Committed { tid, result } => println!("{tid}: {:?}", result.decode::<i64>()),
//!         Outcome::Aborted { tid, abort } => println!("{tid} aborted: {abort}"),
//!     }
//!
//!     // Many calls in flight on one connection: one task each.
//!     let tasks: Vec<_> = (0..100u64)
//!         .map(|i| {
//!             let client = client.clone();
//!             glommio::spawn_local(async move { client.call_typed::<i64, i64>("account", i, "deposit", &1).await })
//!         })
//!         .collect();
//!     for task in tasks {
//!         task.await?;
//!     }
//!     Ok::<(), styx_net::client::Error>(())
//! })
//! .unwrap();
//! ```

mod connection;
mod error;
mod scan;
mod sync;

pub use connection::{ConnectOptions, Connection, Stats};
pub use error::{Error, Ran};
pub use scan::{DUMP_PARTITIONS_IN_FLIGHT_MAX, Page};

use crate::error::ErrorCode;
use crate::frame::{Request, Status};
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::Duration;
use styx_engine::{Abort, Address, Decode, Encode, Key, Payload, Tid, TypedRequest};
use sync::Slots;

/// A transaction's outcome: committed with the function's result, or
/// aborted (nothing it did remains). Both are final: a retry of the same
/// (client id, seq) gets the same outcome, tid included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed { tid: Tid, result: Payload },
    Aborted { tid: Tid, abort: Abort },
}

impl Outcome {
    /// The transaction's place in the serial order.
    pub fn tid(&self) -> Tid {
        match self {
            Outcome::Committed { tid, .. } | Outcome::Aborted { tid, .. } => *tid,
        }
    }

    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed { .. })
    }

    /// The result decoded as `R`; an abort is [`Error::Aborted`], a result
    /// of another type [`Error::Decode`].
    pub fn decode<R: Decode>(&self) -> Result<R, Error> {
        match self {
            Outcome::Committed { tid, result } => result.decode::<R>().map_err(|source| Error::Decode {
                tid: *tid,
                type_name: std::any::type_name::<R>(),
                source,
            }),
            Outcome::Aborted { tid, abort } => Err(Error::Aborted {
                tid: *tid,
                kind: abort.kind(),
                message: abort.message().to_string(),
            }),
        }
    }
}

/// How a [`Client`] connects, names its requests and retries.
#[derive(Clone, Debug)]
pub struct Options {
    /// The connection's settings: name in HELLO, in-flight limit, connect timeout.
    pub connect: ConnectOptions,
    /// The exactly-once client id; `None` picks a random nonzero one. `Some(0)`
    /// opts out of exactly-once: requests are then never resent after a
    /// lost connection (they could run twice); the call fails instead.
    pub client_id: Option<u64>,
    /// The first seq. 1 for a new id; a client that stored its id and next
    /// seq resumes with them (a seq must never name two requests).
    pub first_seq: u64,
    /// Each call's deadline, retries included.
    pub timeout: Duration,
    /// The first pause before reconnecting or resending an `OVERLOADED`
    /// request; it doubles with each failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            connect: ConnectOptions::default(),
            client_id: None,
            first_seq: 1,
            timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(5),
            backoff_max: Duration::from_millis(500),
        }
    }
}

/// An exactly-once client of one server. Cheap to clone: clones share the
/// client id, the seq counter and the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use styx_net::client::{Client, Error, Options};
///
/// glommio::LocalExecutor::default().run(async {
///     let client = Client::new("127.0.0.1:7000", Options::default())?;
///     // A tighter deadline for this call only.
///     let quick = client.with_timeout(Duration::from_millis(200));
///     match quick.call_typed::<(), u64>("counter", "visits", "increment", &()).await {
///         Ok(n) => println!("visit {n}"),
///         Err(e) if e.outcome_unknown() => println!("may or may not have counted: {e}"),
///         Err(e) => return Err(e),
///     }
///     println!("{:?}", client.status().await?);
///     Ok::<(), Error>(())
/// })
/// .unwrap();
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Rc<Inner>,
    timeout: Duration,
}

struct Inner {
    addrs: Vec<SocketAddr>,
    options: Options,
    id: u64,
    next_seq: Cell<u64>,
    /// Seqs whose calls wait for an outcome: the lowest is the ack.
    waiting: RefCell<BTreeSet<u64>>,
    current: RefCell<Option<Connection>>,
    /// Held while connecting, so that concurrent calls share one attempt.
    connecting: Slots,
    /// Failed connection attempts, and the last one's error: a call that
    /// waited for a failed attempt returns its error rather than trying
    /// again at once.
    connect_failures: Cell<u64>,
    connect_error: RefCell<Option<Error>>,
    /// Round-robin over the resolved addresses.
    next_addr: Cell<usize>,
    /// State of the back-off jitter (xorshift).
    jitter: Cell<u64>,
}

impl Client {
    /// A client of the server at `addr` (host:port; every address it
    /// resolves to is tried in turn). Connects on the first call.
    ///
    /// # Panics
    /// If `first_seq` is 0, or the back-off is not `0 < backoff_min <= backoff_max`.
    pub fn new(addr: impl ToSocketAddrs, options: Options) -> Result<Client, Error> {
        assert!(options.first_seq >= 1, "seqs start at 1");
        assert!(options.backoff_min > Duration::ZERO && options.backoff_min <= options.backoff_max);
        let addrs = connection::resolve(addr)?;
        let id = options.client_id.unwrap_or_else(random_id);
        Ok(Client {
            timeout: options.timeout,
            inner: Rc::new(Inner {
                addrs,
                next_seq: Cell::new(options.first_seq),
                id,
                waiting: RefCell::new(BTreeSet::new()),
                current: RefCell::new(None),
                connecting: Slots::new(1),
                connect_failures: Cell::new(0),
                connect_error: RefCell::new(None),
                next_addr: Cell::new(0),
                jitter: Cell::new(id | 1),
                options,
            }),
        })
    }

    /// [`Client::new`], then connects (retrying within the timeout), so
    /// that a wrong address or a server that is down shows at once.
    pub async fn connect(addr: impl ToSocketAddrs, options: Options) -> Result<Client, Error> {
        let client = Client::new(addr, options)?;
        client.connection().await?;
        Ok(client)
    }

    /// The same client (id, seqs, connection) with another deadline per call.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            inner: self.inner.clone(),
            timeout,
        }
    }

    /// The exactly-once client id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The seq the next call will take; store it with the id to resume later.
    pub fn next_seq(&self) -> u64 {
        self.inner.next_seq.get()
    }

    /// The ack the next request carries: the lowest seq still waiting for
    /// its outcome, or the next seq.
    pub fn ack(&self) -> u64 {
        self.inner.ack()
    }

    /// The deadline of each call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The current connection, connecting if there is none (retrying within
    /// the deadline). For its WELCOME, limits and counters.
    pub async fn connection(&self) -> Result<Connection, Error> {
        self.retrying(Retry::Read, |conn| async move { Ok(conn) }).await
    }

    /// Calls the entity function `operator.function` on `key` with encoded
    /// arguments, exactly once.
    pub async fn call(
        &self,
        operator: &str,
        key: impl Into<Key>,
        function: &str,
        args: Payload,
    ) -> Result<Outcome, Error> {
        self.call_address(operator, Address::Entity(key.into()), function, args)
            .await
    }

    /// Calls the partition function `operator.function` on `partition`,
    /// exactly once.
    pub async fn call_partition(
        &self,
        operator: &str,
        partition: u32,
        function: &str,
        args: Payload,
    ) -> Result<Outcome, Error> {
        self.call_address(operator, Address::Partition(partition), function, args)
            .await
    }

    /// Calls `operator.function` on `target`, exactly once: one seq for all
    /// attempts, resent on a new connection when one drops.
    pub async fn call_address(
        &self,
        operator: &str,
        target: Address,
        function: &str,
        args: Payload,
    ) -> Result<Outcome, Error> {
        let inner = &*self.inner;
        let seq = inner.begin();
        let request = Request {
            client: inner.id,
            seq: seq.seq,
            ack: 0,
            operator: operator.to_string(),
            function: function.to_string(),
            target,
            args,
        };
        // Client 0 is not deduplicated: a resend could run it twice.
        let resend = inner.id != 0;
        self.retrying(if resend { Retry::Request } else { Retry::Once }, |conn| {
            let request = Request {
                ack: inner.ack(),
                ..request.clone()
            };
            assert!(
                request.ack <= request.seq,
                "ack {} passed seq {}",
                request.ack,
                request.seq
            );
            async move { conn.request(request).await }
        })
        .await
        // `seq` drops here: outcome or not, this seq is no longer awaited.
    }

    /// [`Client::call`] with arguments and result in the engine's encoding.
    /// An abort is [`Error::Aborted`].
    pub async fn call_typed<A: Encode + ?Sized, R: Decode>(
        &self,
        operator: &str,
        key: impl Into<Key>,
        function: &str,
        args: &A,
    ) -> Result<R, Error> {
        self.call(operator, key, function, Payload::encode(args))
            .await?
            .decode()
    }

    /// Sends a typed request, exactly once, and decodes its result: the
    /// request builders of typed entities make them
    /// (`client.invoke(&AccountRequest::new(1u64).deposit(50))`, see
    /// `styx_engine::typed`). An abort is [`Error::Aborted`].
    pub async fn invoke<R: Decode>(&self, request: &TypedRequest<R>) -> Result<R, Error> {
        self.call(
            request.operator,
            request.key.clone(),
            request.function,
            request.args.clone(),
        )
        .await?
        .decode()
    }

    /// [`Client::call_partition`] with arguments and result in the engine's
    /// encoding. An abort is [`Error::Aborted`].
    pub async fn call_partition_typed<A: Encode + ?Sized, R: Decode>(
        &self,
        operator: &str,
        partition: u32,
        function: &str,
        args: &A,
    ) -> Result<R, Error> {
        self.call_partition(operator, partition, function, Payload::encode(args))
            .await?
            .decode()
    }

    /// Reads one entity's state (the engine's encoding of the operator's
    /// state type), or `None` if it does not exist. It sees every call
    /// whose outcome this client had when it was sent.
    pub async fn get(&self, operator: &str, key: impl Into<Key>) -> Result<Option<Vec<u8>>, Error> {
        let key = key.into();
        self.retrying(Retry::Read, |conn| {
            let key = key.clone();
            async move { conn.get(operator, key).await }
        })
        .await
    }

    /// The engine's status.
    pub async fn status(&self) -> Result<Status, Error> {
        self.retrying(Retry::Read, |conn| async move { conn.status().await })
            .await
    }

    /// Which partitions moved off the default rule (see [`Connection::placement`]).
    pub async fn placement(&self) -> Result<crate::frame::Placement, Error> {
        self.retrying(Retry::Read, |conn| async move { conn.placement().await })
            .await
    }

    /// Where the engine's shards and partitions are (see [`Connection::map`]).
    pub async fn map(&self) -> Result<crate::frame::Map, Error> {
        self.retrying(Retry::Read, |conn| async move { conn.map().await }).await
    }

    /// A round trip to the server.
    pub async fn ping(&self) -> Result<Duration, Error> {
        self.retrying(Retry::Read, |conn| async move { conn.ping().await })
            .await
    }

    /// Runs `attempt` on a live connection until it returns something other
    /// than a lost connection (when `resend`) or `OVERLOADED`/`SHUTTING_DOWN`,
    /// reconnecting as needed, within the deadline. Once an attempt was
    /// lost with its frame perhaps sent, an error of a later attempt that
    /// says the request did not run (a refused handshake, a frame over the
    /// new server's limits) is returned as the lost connection: the first
    /// attempt may have run it. A deadline that passes with the attempt's
    /// connection silent throughout (no answer to anything) forgets that
    /// connection, so the next call connects again instead of waiting on a
    /// server that is gone without a word (a host lost, a network cut).
    async fn retrying<T, F, Fut>(&self, retry: Retry, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Connection) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let inner = &*self.inner;
        let resend = retry != Retry::Once;
        let last = RefCell::new(None::<Error>);
        let sent = Cell::new(false);
        // The first attempt lost with its frame perhaps sent.
        let mut lost = None::<String>;
        // The attempts' connection and its answers when this deadline first
        // used it.
        let attempted = RefCell::new(None::<(Connection, u64)>);
        let work = async {
            let mut backoff = inner.options.backoff_min;
            let mut pause = |last_error: Error| {
                let wait = inner.jittered(backoff);
                backoff = (backoff * 2).min(inner.options.backoff_max);
                *last.borrow_mut() = Some(last_error);
                glommio::timer::sleep(wait)
            };
            loop {
                let conn = match inner.connection().await {
                    Ok(conn) => conn,
                    Err(e) if e.is_transient() => {
                        pause(e).await;
                        continue;
                    }
                    Err(e) => return Err(Self::after_lost(&lost, e)),
                };
                sent.set(true);
                if !attempted.borrow().as_ref().is_some_and(|(c, _)| c.same(&conn)) {
                    // Its answers when this deadline first used it.
                    attempted.replace(Some((conn.clone(), conn.stats().answers)));
                }
                match attempt(conn.clone()).await {
                    Err(e @ Error::ConnectionLost { .. }) if resend => {
                        inner.forget(&conn);
                        if retry == Retry::Request {
                            lost.get_or_insert_with(|| e.to_string());
                        }
                        pause(e).await;
                    }
                    Err(Error::Server { code, message })
                        if code == ErrorCode::OVERLOADED || code == ErrorCode::SHUTTING_DOWN =>
                    {
                        if code == ErrorCode::SHUTTING_DOWN {
                            // A draining server: retry elsewhere (the next
                            // address, if there are several).
                            inner.forget(&conn);
                            inner.next_addr.set(inner.next_addr.get().wrapping_add(1));
                        }
                        pause(Error::Server { code, message }).await;
                    }
                    result => return result.map_err(|e| Self::after_lost(&lost, e)),
                }
            }
        };
        match glommio::future::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => {
                if let Some((conn, answers)) = attempted.take()
                    && conn.stats().answers == answers
                    && conn.in_flight() > 0
                {
                    inner.forget(&conn);
                }
                Err(Error::Timeout {
                    after: self.timeout,
                    last: last.take().map(|e| e.to_string()),
                    sent: sent.get(),
                })
            }
        }
    }
}

/// What `Client::retrying` resends after a lost connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// An exactly-once request (same client id and seq).
    Request,
    /// A read or a control frame: safe to send again.
    Read,
    /// Nothing (a request of client 0, which is not deduplicated).
    Once,
}

impl Client {
    /// `e`, a later attempt's error, as the caller must see it after an
    /// attempt was lost (`lost`): an error saying the request did not run
    /// becomes the lost connection (it may have run), with both reasons.
    fn after_lost(lost: &Option<String>, e: Error) -> Error {
        match lost {
            Some(first) if e.ran() == Ran::No => Error::ConnectionLost {
                reason: format!("{first}; resending it then failed: {e}"),
            },
            _ => e,
        }
    }
}

/// Typed entities' client stubs run on a `Client`:
/// `AccountClient::new(&client, 7u64).deposit(50).await`.
impl styx_engine::Invoker for Client {
    type Error = Error;

    fn invoke<R: Decode>(&self, request: &TypedRequest<R>) -> impl Future<Output = Result<R, Error>> {
        Client::invoke(self, request)
    }
}

/// A seq waiting for its outcome; dropping it (outcome, error, deadline or
/// cancellation) stops the wait, which lets the ack pass it.
struct Waiting<'a> {
    inner: &'a Inner,
    seq: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let removed = self.inner.waiting.borrow_mut().remove(&self.seq);
        assert!(removed, "seq {} waited for twice", self.seq);
    }
}

impl Inner {
    /// Takes the next seq and marks it waiting.
    fn begin(&self) -> Waiting<'_> {
        let seq = self.next_seq.get();
        self.next_seq.set(seq.checked_add(1).expect("seqs exhausted"));
        assert!(self.waiting.borrow_mut().insert(seq), "seq {seq} given twice");
        Waiting { inner: self, seq }
    }

    fn ack(&self) -> u64 {
        self.waiting.borrow().first().copied().unwrap_or(self.next_seq.get())
    }

    /// The live connection, or a new one. One attempt at a time: calls that
    /// waited for an attempt that failed get its error.
    async fn connection(&self) -> Result<Connection, Error> {
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let failures = self.connect_failures.get();
        self.connecting
            .acquire()
            .await
            .expect("the connect lock is never closed");
        let _unlock = Unlock(&self.connecting);
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        if self.connect_failures.get() != failures {
            return Err(self.connect_error.borrow().clone().expect("a failure has an error"));
        }
        let i = self.next_addr.get();
        let addr = self.addrs[i % self.addrs.len()];
        match Connection::connect_to(addr, &self.options.connect).await {
            Ok(conn) => {
                *self.current.borrow_mut() = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                self.next_addr.set(i.wrapping_add(1));
                self.connect_failures.set(failures + 1);
                *self.connect_error.borrow_mut() = Some(e.clone());
                Err(e)
            }
        }
    }

    fn live(&self) -> Option<Connection> {
        let current = self.current.borrow();
        current.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// Drops `conn` if it is still the current connection.
    fn forget(&self, conn: &Connection) {
        let mut current = self.current.borrow_mut();
        if current.as_ref().is_some_and(|c| c.same(conn)) {
            *current = None;
        }
    }

    /// `d` scaled by a factor in [0.5, 1), so that clients that failed
    /// together do not come back together.
    fn jittered(&self, d: Duration) -> Duration {
        let mut x = self.jitter.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter.set(x);
        d.mul_f64(0.5 + (x >> 11) as f64 / (1u64 << 54) as f64)
    }
}

/// Releases the connect lock.
struct Unlock<'a>(&'a Slots);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A random nonzero client id: clashes between clients are then negligible.
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        hasher.write_u128(now);
        hasher.write_u32(std::process::id());
        let id = hasher.finish();
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_is_the_lowest_waiting_seq() {
        let client = Client::new("127.0.0.1:1", Options::default()).unwrap();
        let inner = &*client.inner;
        assert_eq!(inner.ack(), 1);
        let one = inner.begin();
        let two = inner.begin();
        assert_eq!((one.seq, two.seq, inner.ack()), (1, 2, 1));
        drop(two);
        assert_eq!(inner.ack(), 1);
        drop(one);
        assert_eq!(inner.ack(), 3);
        assert_ne!(client.id(), 0);
    }

    #[test]
    fn jitter_stays_within_half_to_whole() {
        let client = Client::new("127.0.0.1:1", Options::default()).unwrap();
        for _ in 0..1000 {
            let d = client.inner.jittered(Duration::from_millis(100));
            assert!(
                d >= Duration::from_millis(50) && d < Duration::from_millis(100),
                "{d:?}"
            );
        }
    }
}
