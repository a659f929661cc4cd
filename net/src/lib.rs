//! The wire protocol between clients and the engine, as a sans-I/O codec.
//!
//! The byte-exact specification is `docs/protocol.md`; this crate is its
//! reference implementation. The codec touches no socket (only the
//! [`client`] module does): a server or a client reads bytes however it
//! likes, hands each chunk to a [`Decoder`] and writes what [`encode`]
//! produces. That keeps the codec deterministic and testable byte by byte,
//! and lets the glommio server and any client share it. The server side
//! of a connection is sans I/O too ([`session`]): the runtime only moves
//! bytes between sockets and sessions.
//!
//! - [`frame`]: the frames as values ([`Frame`], [`Body`]).
//! - [`encode()`]: frames to bytes, checking every cap first.
//! - [`Decoder`]: bytes to frames, incrementally, limits enforced before
//!   allocating.
//! - [`limits`]: the protocol's caps and a server's [`Limits`].
//! - [`Error`], [`ErrorCode`]: what went wrong, and whether the connection
//!   survives it.
//! - `convert`: between frames and the engine's requests and outcomes.
//! - [`session`]: the server side of one connection: the handshake,
//!   REQUEST and GET to the engine's requests, outcomes to answers, and
//!   the connection's bound on answers owed.
//! - [`client`]: the client library on glommio: pipelined connections and
//!   exactly-once calls with retries and deadlines.
//!
//! ```
//! use styx_engine::{Address, Key, Payload};
//! use styx_net::{Body, Decoder, Frame, Request, FRAME_LEN_MAX, encode};
//!
//! let request = Frame {
//!     corr: 1,
//!     body: Body::Request(Request {
//!         client: 42,
//!         seq: 7,
//!         ack: 7,
//!         operator: "account".into(),
//!         function: "deposit".into(),
//!         target: Address::Entity(Key::from(5u64)),
//!         args: Payload::encode(&100i64),
//!     }),
//! };
//! let mut wire = Vec::new();
//! encode(&request, &mut wire).unwrap();
//!
//! // The server side, fed one byte at a time.
//! let mut decoder = Decoder::new(FRAME_LEN_MAX);
//! let mut frames = Vec::new();
//! for byte in &wire {
//!     let mut input = std::slice::from_ref(byte);
//!     while let Some(result) = decoder.decode(&mut input) {
//!         frames.push(result.unwrap());
//!     }
//! }
//! assert_eq!(frames, [request]);
//! ```

#![forbid(unsafe_code)]

pub mod client;
mod convert;
mod decode;
mod encode;
mod error;
pub mod frame;
pub mod limits;
pub mod session;

pub use convert::{outcome_frame, reply_frame, resolve_operator, state_frame};
pub use decode::Decoder;
pub use encode::{encode, encoded_len};
pub use error::{Error, ErrorCode, error_frame};
pub use frame::{
    Body, Frame, FrameType, LAYOUT_SHARDS_MAX, Layout, MAP_NODES_MAX, MAP_OPERATORS_MAX, MEMBERS_LEFT_MAX, Map,
    MapNode, MapOperator, Members, PLACEMENT_MOVED_MAX, Placement, Request, Status, TARGET_ENTITY, TARGET_PARTITION,
    VERSION, VERSION_MAX, VERSION_MIN, Welcome, negotiate,
};
pub use limits::{
    CONNECTIONS_MAX, ERROR_MESSAGE_LEN_MAX, FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, HEADER_LEN, IN_FLIGHT_MAX, Limits,
    NAME_LEN_MAX, OUTPUT_BYTES_MAX, OUTPUT_BYTES_MAX_FLOOR, PEER_NAME_LEN_MAX, PREFIX_LEN,
};
pub use session::{Received, Server, Session};
