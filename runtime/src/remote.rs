//! Links to shards on other nodes: one TCP connection per pair of shards.
//!
//! A shard reaches a peer on its own node through an in-process queue
//! (`link`); a peer on another node through a connection that its executor
//! owns, so the batch never crosses a thread. The batch a shard emits for a
//! remote peer is encoded (`styx_engine::wire`) into that connection's
//! outgoing buffer and written by a writer task; a reader task decodes the
//! peer's frames and queues each batch into the local link from that peer,
//! exactly where an in-process peer would have put it. The shard loop sees
//! no difference, and TCP keeps each link FIFO, which the protocol needs.
//!
//! Frames are `[u32 length][u32 CRC-32C][batch]`. A connection starts with
//! a handshake naming the run (see `cluster::Run::id`) and both shards, so
//! a connection of an earlier run, or to the wrong shard, is refused. The
//! shard with the lower id dials. Any error — a broken connection, a bad
//! checksum, a batch that does not decode — fails the run: the cluster
//! recovers from its logs, it never guesses.
//!
//! Back-pressure: a connection buffers at most `OUTGOING_BYTES_MAX` not yet
//! written; past it the shard keeps the batch in its overflow queue (as for
//! a full in-process link) and stops taking client requests until it drains.

use crate::cluster::Run;
use crate::link::Links;
use crate::metrics::ShardMetrics;
use crate::{Envelope, Waiter, wake};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use styx_engine::{Message, ShardId};

/// A frame's batch is at most this long.
pub const FRAME_BYTES_MAX: usize = 256 << 20;
/// Bytes a connection holds unwritten before its shard holds back.
const OUTGOING_BYTES_MAX: usize = 64 << 20;
/// A link closed between frames (its peer ended its run, or failed).
const CLOSED: &str = "connection closed";
/// A link reset between frames: its peer closed it with bytes unread (it
/// finished its run, or failed).
const RESET: &str = "connection reset";
/// The longest wait between two dials of a peer shard not listening yet.
const DIAL_RETRY_MAX: Duration = Duration::from_millis(20);
/// How long the shards of a run may take to connect to each other.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const LINK_MAGIC: u64 = 0x5354_5958_4c49_4e4b; // "STYXLINK"
/// The peer link's version: 2 dropped `Done2`'s pending flag, 3 moved
/// the snapshot vote from `Done2` to `Flags`, 4 added `Done1`'s handovers,
/// 5 each `Done1` move's pace.
const LINK_VERSION: u16 = 5;
const HANDSHAKE_BYTES: usize = 22;

struct Outgoing {
    buf: Vec<u8>,
    writer: Option<Waker>,
    /// The writer holds bytes taken from `buf` not yet written.
    writing: bool,
}

/// This shard's connections to every shard on other nodes.
pub(crate) struct Remote {
    outs: Vec<Option<Rc<RefCell<Outgoing>>>>,
    /// Where what crosses the links is counted (`styx_remote_*` series).
    metrics: Option<Arc<ShardMetrics>>,
    /// The reader and writer tasks: dropping them (with the `Remote`, when
    /// the shard loop ends) cancels them and closes the connections, so a
    /// peer still running learns at once that this run is over.
    _tasks: Vec<glommio::Task<()>>,
}

impl Remote {
    /// Connects shard `me` to every shard of `run` on another node and
    /// starts the tasks that carry their batches. Fails the run (and
    /// returns an error) if a peer does not connect in time.
    pub(crate) async fn connect(
        run: Arc<Run>,
        me: ShardId,
        links: Arc<Links<Envelope>>,
        waiter: Waiter,
        metrics: Option<Arc<ShardMetrics>>,
    ) -> Result<Remote, String> {
        let n = run.spec.n_shards();
        let remote: Vec<ShardId> = (0..n).filter(|s| !run.is_local(*s)).collect();
        let lower: Vec<ShardId> = remote.iter().copied().filter(|s| *s < me).collect();
        let higher: Vec<ShardId> = remote.iter().copied().filter(|s| *s > me).collect();
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let listener = if lower.is_empty() {
            None
        } else {
            let addr = run.link_addr(me);
            Some(TcpListener::bind(addr).map_err(|e| format!("shard {me}: cannot listen for peers on {addr}: {e}"))?)
        };
        let mut streams: Vec<(ShardId, TcpStream)> = Vec::with_capacity(remote.len());
        for &peer in &higher {
            streams.push((peer, dial(&run, me, peer, deadline).await?));
        }
        if let Some(listener) = listener {
            let mut waiting = lower.clone();
            let mut accept_failed = false;
            while !waiting.is_empty() {
                let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    glommio::timer::sleep(deadline.saturating_duration_since(Instant::now())).await;
                    None
                })
                .await;
                let stream = match accepted {
                    None => {
                        return Err(format!(
                            "shard {me}: shards {waiting:?} did not connect within {CONNECT_TIMEOUT:?}"
                        ));
                    }
                    Some(Err(e)) => {
                        // (Out of file descriptors, say: it usually lasts,
                        // and retrying at once would spin the core.)
                        if !accept_failed {
                            tracing::warn!(shard = me, "accepting a peer shard: {e}; retrying every 10 ms");
                            accept_failed = true;
                        }
                        glommio::timer::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    Some(Ok(s)) => s,
                };
                match answer(&run, me, stream).await {
                    Ok((peer, s)) if waiting.contains(&peer) => {
                        waiting.retain(|w| *w != peer);
                        streams.push((peer, s));
                    }
                    Ok((peer, _)) => tracing::warn!(shard = me, "shard {peer} connected twice"),
                    Err(e) => tracing::warn!(shard = me, "a peer shard's handshake: {e}"),
                }
            }
        }
        tracing::debug!(shard = me, peers = ?streams.iter().map(|(p, _)| *p).collect::<Vec<_>>(), "links up");
        let mut outs: Vec<Option<Rc<RefCell<Outgoing>>>> = (0..n).map(|_| None).collect();
        let mut tasks = Vec::with_capacity(2 * streams.len());
        for (peer, stream) in streams {
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let (reader, writer) = futures_lite::io::split(stream);
            let out = Rc::new(RefCell::new(Outgoing {
                buf: Vec::new(),
                writer: None,
                writing: false,
            }));
            outs[usize::from(peer)] = Some(out.clone());
            tasks.push(glommio::spawn_local(read_loop(
                run.clone(),
                me,
                peer,
                reader,
                links.clone(),
                waiter.clone(),
            )));
            tasks.push(glommio::spawn_local(write_loop(
                run.clone(),
                peer,
                writer,
                out,
                waiter.clone(),
            )));
        }
        Ok(Remote {
            outs,
            metrics,
            _tasks: tasks,
        })
    }

    pub(crate) fn is_remote(&self, to: usize) -> bool {
        self.outs[to].is_some()
    }

    /// Whether every batch sent so far is written to its connection.
    pub(crate) fn flushed(&self) -> bool {
        self.outs.iter().flatten().all(|o| {
            let o = o.borrow();
            o.buf.is_empty() && !o.writing
        })
    }

    /// Encodes `batch` for remote shard `to`; gives it back when that
    /// connection has too much unwritten (try again later).
    pub(crate) fn send(&mut self, to: usize, batch: Vec<Message>) -> Result<(), Vec<Message>> {
        let out = self.outs[to].as_ref().expect("a remote shard");
        let mut o = out.borrow_mut();
        if o.buf.len() >= OUTGOING_BYTES_MAX {
            return Err(batch);
        }
        let start = o.buf.len();
        o.buf.extend_from_slice(&[0u8; 8]);
        styx_engine::wire::encode_batch(&batch, &mut o.buf);
        let len = o.buf.len() - start - 8;
        assert!(len <= FRAME_BYTES_MAX, "a batch of {len} bytes for shard {to}");
        let crc = crc32c::crc32c(&o.buf[start + 8..]);
        o.buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        o.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        if let Some(m) = &self.metrics {
            m.remote_batches.fetch_add(1, Relaxed);
            m.remote_messages.fetch_add(batch.len() as u64, Relaxed);
            m.remote_bytes.fetch_add((len + 8) as u64, Relaxed);
        }
        if let Some(w) = o.writer.take() {
            w.wake();
        }
        Ok(())
    }
}

fn handshake(run: &Run, from: ShardId, to: ShardId) -> [u8; HANDSHAKE_BYTES] {
    let mut h = [0u8; HANDSHAKE_BYTES];
    h[0..8].copy_from_slice(&LINK_MAGIC.to_le_bytes());
    h[8..10].copy_from_slice(&LINK_VERSION.to_le_bytes());
    h[10..18].copy_from_slice(&run.id.to_le_bytes());
    h[18..20].copy_from_slice(&from.to_le_bytes());
    h[20..22].copy_from_slice(&to.to_le_bytes());
    h
}

/// Checks a peer's handshake; returns the shard it comes from.
fn check_handshake(run: &Run, h: &[u8; HANDSHAKE_BYTES], to: ShardId) -> Result<ShardId, String> {
    if h[0..8] != LINK_MAGIC.to_le_bytes() {
        return Err("not a Styx shard link".into());
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != LINK_VERSION {
        return Err(format!("link version {version}, this shard speaks {LINK_VERSION}"));
    }
    if h[10..18] != run.id.to_le_bytes() {
        return Err("a link of another run of the cluster".into());
    }
    let from = u16::from_le_bytes([h[18], h[19]]);
    let target = u16::from_le_bytes([h[20], h[21]]);
    if target != to || from >= run.spec.n_shards() || run.is_local(from) {
        return Err(format!("a link from shard {from} to shard {target} reached shard {to}"));
    }
    Ok(from)
}

/// Dials `peer` until it answers our handshake with its own.
async fn dial(run: &Run, me: ShardId, peer: ShardId, deadline: Instant) -> Result<TcpStream, String> {
    let addr = run.link_addr(peer);
    // A peer starting its round listens within milliseconds (a round
    // change after a handover waits on this): retry soon, then back off.
    let mut wait = Duration::from_micros(200);
    loop {
        if run.failure.is_failed() {
            return Err(format!("shard {me}: the run failed while connecting"));
        }
        let attempt = async {
            let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            s.write_all(&handshake(run, me, peer))
                .await
                .map_err(|e| e.to_string())?;
            let mut h = [0u8; HANDSHAKE_BYTES];
            s.read_exact(&mut h).await.map_err(|e| e.to_string())?;
            let from = check_handshake(run, &h, me)?;
            if from != peer {
                return Err(format!("dialed shard {peer}, shard {from} answered"));
            }
            Ok::<TcpStream, String>(s)
        };
        match attempt.await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("shard {me}: cannot reach shard {peer} at {addr}: {e}"));
            }
            Err(_) => {
                glommio::timer::sleep(wait).await;
                wait = (wait * 2).min(DIAL_RETRY_MAX);
            }
        }
    }
}

/// Reads a dialer's handshake and answers it.
async fn answer(run: &Run, me: ShardId, mut s: TcpStream) -> Result<(ShardId, TcpStream), String> {
    let mut h = [0u8; HANDSHAKE_BYTES];
    let read = futures_lite::future::or(async { Some(s.read_exact(&mut h).await) }, async {
        glommio::timer::sleep(Duration::from_secs(2)).await;
        None
    })
    .await;
    match read {
        None => return Err("no handshake".into()),
        Some(r) => r.map_err(|e| e.to_string())?,
    }
    let from = check_handshake(run, &h, me)?;
    s.write_all(&handshake(run, me, from))
        .await
        .map_err(|e| e.to_string())?;
    Ok((from, s))
}

async fn read_loop(
    run: Arc<Run>,
    me: ShardId,
    peer: ShardId,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
    links: Arc<Links<Envelope>>,
    waiter: Waiter,
) {
    let n = run.spec.n_shards();
    let mut body = Vec::new();
    let result: Result<(), String> = async {
        loop {
            let mut head = [0u8; 8];
            reader.read_exact(&mut head).await.map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => CLOSED.to_string(),
                std::io::ErrorKind::ConnectionReset => RESET.to_string(),
                _ => e.to_string(),
            })?;
            let len = u32::from_le_bytes(head[0..4].try_into().expect("4")) as usize;
            let crc = u32::from_le_bytes(head[4..8].try_into().expect("4"));
            if len > FRAME_BYTES_MAX {
                return Err(format!("a frame of {len} bytes"));
            }
            body.resize(len, 0);
            reader.read_exact(&mut body).await.map_err(|e| e.to_string())?;
            if crc32c::crc32c(&body) != crc {
                return Err("a frame fails its checksum".into());
            }
            let batch = styx_engine::wire::decode_batch(&body, n).map_err(|e| e.to_string())?;
            tracing::trace!(shard = me, peer, messages = batch.len(), bytes = len, "batch in");
            let mut envelope = Envelope { sent_us: 0, batch };
            loop {
                if run.failure.is_failed() {
                    return Ok(());
                }
                match links.send(usize::from(peer), usize::from(me), envelope) {
                    Ok(_) => break,
                    Err(back) => {
                        // The shard is behind: let it drain its queue.
                        envelope = back;
                        glommio::timer::sleep(Duration::from_micros(50)).await;
                    }
                }
            }
            wake(&waiter);
        }
    }
    .await;
    if let Err(e) = result {
        // Once this node's shards all stopped for a handover, links close
        // as every node moves on: a clean end is no failure (a reset, which
        // means bytes went unread, or a bad frame still is). Nor is a
        // peer's close as its run finished, reset or not (whatever it left
        // unread, it needed no more): it closes its links, then says
        // FINISHED on its control connection, which may come a moment
        // later (a crashed peer says nothing: its control connection fails
        // the run meanwhile).
        let clean =
            (e == CLOSED && run.is_ending()) || ((e == CLOSED || e == RESET) && finished_soon(&run, peer).await);
        if !clean {
            run.failure.fail(format!("link from shard {peer} to shard {me}: {e}"));
        }
    }
    wake(&waiter);
}

/// Whether the node running shard `peer` says that its run finished,
/// within the cluster's failure timeout or while it is heard
/// ([`Run::waits_for_finish`]).
async fn finished_soon(run: &Run, peer: ShardId) -> bool {
    let node = run.layout().node_of(peer);
    let since = Instant::now();
    loop {
        if run.has_finished(node) {
            return true;
        }
        if run.failure.is_failed() || !run.waits_for_finish(node, since) {
            return false;
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

async fn write_loop(
    run: Arc<Run>,
    peer: ShardId,
    mut writer: futures_lite::io::WriteHalf<TcpStream>,
    out: Rc<RefCell<Outgoing>>,
    waiter: Waiter,
) {
    let mut spare = Vec::new();
    loop {
        let mut buf = futures_lite::future::poll_fn(|cx| {
            let mut o = out.borrow_mut();
            if run.failure.is_failed() {
                return Poll::Ready(None);
            }
            if o.buf.is_empty() {
                o.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            o.writing = true;
            Poll::Ready(Some(std::mem::replace(&mut o.buf, std::mem::take(&mut spare))))
        })
        .await
        .unwrap_or_default();
        if buf.is_empty() {
            return;
        }
        tracing::trace!(peer, bytes = buf.len(), "batches out");
        let written = async {
            writer.write_all(&buf).await?;
            writer.flush().await
        }
        .await;
        out.borrow_mut().writing = false;
        if let Err(e) = written {
            // A peer whose run finished may close with our batches unread
            // (its kernel resets the link) a moment before it says so.
            if !run.is_ending() && !finished_soon(&run, peer).await {
                run.failure.fail(format!("link to shard {peer}: {e}"));
            }
            wake(&waiter);
            return;
        }
        // The buffer was full a moment ago: the shard may be waiting on it.
        if buf.len() >= OUTGOING_BYTES_MAX {
            wake(&waiter);
        }
        buf.clear();
        spare = buf;
    }
}
