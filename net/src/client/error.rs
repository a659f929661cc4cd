//! What a client call can fail with.
//!
//! One enum for the whole client, `Clone` because one cause (a lost
//! connection) is handed to every call that was waiting on it. Each message
//! says what happened and what to do; the variants tell a program what it
//! may assume about the request:
//!
//! - nothing was sent: [`Error::FrameTooLarge`], [`Error::ArgsTooLarge`],
//!   [`Error::Encode`], [`Error::Unsendable`], [`Error::Resolve`];
//! - the request did not run: [`Error::Server`] (except `RESULT_TOO_LARGE`,
//!   which reports a commit whose result cannot be sent);
//! - the request ran, and this is its outcome: [`Error::Aborted`],
//!   [`Error::Decode`] (committed; the result is not the type asked for);
//! - unknown, it may or may not have run (at most once):
//!   [`Error::Timeout`] (unless it says the request was never sent),
//!   [`Error::ConnectionLost`] (the [`Client`] retries those itself and
//!   returns them only when it gives up).
//!
//! [`Client`]: super::Client

use crate::error::ErrorCode;
use crate::frame::FrameType;
use std::time::Duration;
use styx_engine::{AbortKind, DecodeError, Tid};

/// An error of the client library. The codec's errors are
/// [`crate::Error`]; this one wraps them where a frame cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The address did not resolve to any socket address.
    #[error("cannot resolve the server's address: {reason}; give host:port, e.g. 127.0.0.1:7000")]
    Resolve { reason: String },

    /// TCP connect failed or timed out, or the handshake did not finish in time.
    #[error("cannot connect to {addr}: {reason}; is the server running and listening there?")]
    Connect { addr: String, reason: String },

    /// The server answered HELLO with an ERROR.
    #[error("the server at {addr} refused the connection with {code}: {message}{}", hint(*.code))]
    Handshake {
        addr: String,
        code: ErrorCode,
        message: String,
    },

    /// The connection closed while the request awaited its answer (or
    /// before it could be sent). The request may or may not have run.
    #[error(
        "the connection closed before the answer arrived ({reason}); the request may or may not have run: \
         retry it with the same client id and seq to learn its outcome (Client does this by itself)"
    )]
    ConnectionLost { reason: String },

    /// The server sent something the protocol does not allow as an answer
    /// to this frame.
    #[error("the server broke the protocol: {reason}; a server bug, or not a Styx server")]
    Protocol { reason: String },

    /// The server answered the frame with ERROR: it did not run (except
    /// `RESULT_TOO_LARGE`: it committed, but the result cannot be sent).
    #[error("the server answered {code}: {message}{}", hint(*.code))]
    Server { code: ErrorCode, message: String },

    /// No answer before the deadline. If the request was `sent`, its
    /// outcome is unknown: it may have run (once) or not, and may still
    /// run; the client gave up on it and acknowledged its seq, so it is
    /// never retried. If not, no connection was ever made: it did not run.
    #[error("no answer within {after:?}{}: {}", last_note(.last), if *.sent {
        "the outcome is unknown, the request may or may not have run (at most once); \
         read the state to find out, or raise the timeout"
    } else {
        "the request was never sent (no connection), so it did not run"
    })]
    Timeout {
        after: Duration,
        last: Option<String>,
        sent: bool,
    },

    /// The frame is larger than the server's `frame_len_max`. Nothing was sent.
    #[error("a frame of {len} bytes exceeds the server's frame_len_max of {max} bytes; nothing was sent: send less")]
    FrameTooLarge { len: usize, max: usize },

    /// The arguments are larger than the server's `payload_len_max`. Nothing was sent.
    #[error("arguments of {len} bytes exceed the server's payload_len_max of {max} bytes; nothing was sent")]
    ArgsTooLarge { len: usize, max: usize },

    /// A field is over its protocol cap (a name, a key). Nothing was sent.
    #[error("the frame cannot be encoded: {0}; nothing was sent")]
    Encode(crate::Error),

    /// A frame the connection sends itself (HELLO) or a server's frame.
    #[error("{frame_type:?} frames cannot be sent on an open connection; send PING, STATUS, REQUEST or GET")]
    Unsendable { frame_type: FrameType },

    /// The transaction ran and aborted: nothing it did remains. Returned by
    /// the typed helpers; [`Client::call`](super::Client::call) returns an
    /// aborted [`Outcome`](super::Outcome) instead.
    #[error("transaction {tid} aborted ({kind:?}): {message}; nothing it did remains")]
    Aborted { tid: Tid, kind: AbortKind, message: String },

    /// The transaction committed, but its result is not the type asked for.
    #[error(
        "transaction {tid} committed, but its result does not decode as {type_name}: {source}; \
         ask for the type the function returns"
    )]
    Decode {
        tid: Tid,
        type_name: &'static str,
        source: DecodeError,
    },
}

impl Error {
    /// The wire code, for errors the server sent.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } | Error::Handshake { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the request may or may not have run: the client cannot tell
    /// (a timeout, a connection lost with the request in flight).
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Error::Timeout { sent: true, .. } | Error::ConnectionLost { .. })
    }

    /// Whether a new attempt to connect may succeed where this one failed.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::ConnectionLost { .. } => true,
            Error::Handshake { code, .. } => [
                ErrorCode::TOO_MANY_CONNECTIONS,
                ErrorCode::SHUTTING_DOWN,
                ErrorCode::OVERLOADED,
            ]
            .contains(code),
            _ => false,
        }
    }
}

/// What to do about a server's error, by code.
fn hint(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::OVERLOADED => " (it did not run; retry later with the same seq)",
        ErrorCode::SHUTTING_DOWN => " (it did not run; retry on another server or later)",
        ErrorCode::TOO_MANY_CONNECTIONS => " (retry later, or share connections)",
        ErrorCode::SEQ_FORGOTTEN => {
            " (a seq below an ack already sent: two clients share one id, or a client resumed from an old seq)"
        }
        ErrorCode::RESULT_TOO_LARGE => " (it committed; the result cannot be sent: return less)",
        ErrorCode::UNSUPPORTED_VERSION => " (upgrade the client or the server)",
        _ => "",
    }
}

fn last_note(last: &Option<String>) -> String {
    match last {
        Some(last) => format!(" (last: {last})"),
        None => String::new(),
    }
}
