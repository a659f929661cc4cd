//! What a client call can fail with.
//!
//! One enum for the whole client, `Clone` because one cause (a lost
//! connection) is handed to every call that was waiting on it. Each message
//! says what happened and what to do. What a program may assume about the
//! request is [`Error::ran`]'s answer, by variant:
//!
//! - [`Ran::No`], it did not run and will not: nothing was sent
//!   ([`Error::FrameTooLarge`], [`Error::ArgsTooLarge`], [`Error::Encode`],
//!   [`Error::Unsendable`], [`Error::Resolve`], [`Error::Connect`],
//!   [`Error::Handshake`], [`Error::Timeout`] with `sent: false`), or the
//!   server refused it ([`Error::Server`] with a malformed-frame code
//!   `0x01xx`, a refusal `0x02xx` other than `SEQ_FORGOTTEN`, `OVERLOADED`,
//!   `SHUTTING_DOWN`, or a fatal code that closed the connection);
//! - [`Ran::Yes`], it ran once: [`Error::Aborted`] (nothing it did
//!   remains), [`Error::Decode`] (committed; the result is not the type
//!   asked for), [`Error::Server`] `RESULT_TOO_LARGE` (committed; the result
//!   cannot be sent, and a retry gets this error again);
//! - [`Ran::Unknown`], it may have run (at most once) or not:
//!   [`Error::Timeout`] with `sent: true`, [`Error::ConnectionLost`] (the
//!   [`Client`] retries those itself and returns them only when it gives
//!   up), [`Error::Protocol`], and [`Error::Server`] with `SEQ_FORGOTTEN`
//!   (this copy did not run, but the seq is below an ack already sent: an
//!   earlier request with it may have run and its outcome is forgotten),
//!   `INTERNAL` (a server bug, which may strike after the commit) or a code
//!   this version does not know.
//!
//! [`Error::outcome_unknown`] is the short question "may it have run without
//! my knowing how it ended?": `Unknown`, and `RESULT_TOO_LARGE` (committed,
//! result lost). Only after `Ran::No` may a caller resend the request under
//! a new seq without the risk of running it twice.
//!
//! [`Client`]: super::Client

use crate::error::ErrorCode;
use crate::frame::FrameType;
use std::time::Duration;
use styx_engine::{AbortKind, DecodeError, Tid};

/// Whether a request that ended in an error ran (see [`Error::ran`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    /// It did not run, and will not: resending it is safe.
    No,
    /// It ran once: committed or aborted.
    Yes,
    /// It may have run (at most once) or not, and may still run.
    Unknown,
}

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

    /// The server answered the frame with ERROR. Whether the request ran
    /// depends on the code (see [`Error::ran`]): mostly not;
    /// `RESULT_TOO_LARGE` means it committed; `SEQ_FORGOTTEN` and
    /// `INTERNAL` leave it unknown.
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
    #[error(
        "{frame_type:?} frames cannot be sent on an open connection; send PING, STATUS, MAP, PLACEMENT, LAYOUT, MEMBERS, REQUEST or GET"
    )]
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

    /// Whether the request ran, as far as this error tells (see the module
    /// documentation for each variant and code).
    pub fn ran(&self) -> Ran {
        match self {
            Error::Resolve { .. }
            | Error::Connect { .. }
            | Error::Handshake { .. }
            | Error::FrameTooLarge { .. }
            | Error::ArgsTooLarge { .. }
            | Error::Encode(_)
            | Error::Unsendable { .. }
            | Error::Timeout { sent: false, .. } => Ran::No,
            Error::Aborted { .. } | Error::Decode { .. } => Ran::Yes,
            Error::Timeout { sent: true, .. } | Error::ConnectionLost { .. } | Error::Protocol { .. } => Ran::Unknown,
            Error::Server { code, .. } => match *code {
                ErrorCode::RESULT_TOO_LARGE => Ran::Yes,
                ErrorCode::SEQ_FORGOTTEN | ErrorCode::INTERNAL => Ran::Unknown,
                code if code.name().is_none() => Ran::Unknown,
                _ => Ran::No,
            },
        }
    }

    /// Whether the request may have run (or did) without the caller
    /// learning how it ended: [`Ran::Unknown`], or a commit whose result
    /// was lost (`RESULT_TOO_LARGE`). Read the state to find out; do not
    /// resend it under a new seq.
    pub fn outcome_unknown(&self) -> bool {
        match self.ran() {
            Ran::No => false,
            Ran::Unknown => true,
            Ran::Yes => self.code() == Some(ErrorCode::RESULT_TOO_LARGE),
        }
    }

    /// Whether the answer was lost on the way (the connection dropped, or
    /// the deadline passed after sending): resending with the same client
    /// id and seq may learn the outcome of the one run. Not so for an
    /// ERROR answer: the same request gets the same answer again.
    pub fn answer_lost(&self) -> bool {
        matches!(self, Error::ConnectionLost { .. } | Error::Timeout { sent: true, .. })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: ErrorCode) -> Error {
        Error::Server {
            code,
            message: String::new(),
        }
    }

    #[test]
    fn every_error_says_whether_the_request_ran() {
        let cases = [
            (server(ErrorCode::OVERLOADED), Ran::No, false),
            (server(ErrorCode::SHUTTING_DOWN), Ran::No, false),
            (server(ErrorCode::UNKNOWN_FUNCTION), Ran::No, false),
            (server(ErrorCode::FIELD_OVERRUN), Ran::No, false),
            (server(ErrorCode::DUPLICATE_CORR), Ran::No, false),
            // An earlier copy of the seq may have run; its outcome is gone.
            (server(ErrorCode::SEQ_FORGOTTEN), Ran::Unknown, true),
            // It committed; the result is lost.
            (server(ErrorCode::RESULT_TOO_LARGE), Ran::Yes, true),
            (server(ErrorCode::INTERNAL), Ran::Unknown, true),
            (server(ErrorCode(0x0399)), Ran::Unknown, true),
            (
                Error::Timeout {
                    after: Duration::from_secs(1),
                    last: None,
                    sent: true,
                },
                Ran::Unknown,
                true,
            ),
            (
                Error::Timeout {
                    after: Duration::from_secs(1),
                    last: None,
                    sent: false,
                },
                Ran::No,
                false,
            ),
            (Error::ConnectionLost { reason: String::new() }, Ran::Unknown, true),
            (Error::Protocol { reason: String::new() }, Ran::Unknown, true),
            (Error::FrameTooLarge { len: 2, max: 1 }, Ran::No, false),
            (
                Error::Aborted {
                    tid: Tid::default(),
                    kind: AbortKind::User,
                    message: String::new(),
                },
                Ran::Yes,
                false,
            ),
        ];
        for (error, ran, unknown) in cases {
            assert_eq!(error.ran(), ran, "{error}");
            assert_eq!(error.outcome_unknown(), unknown, "{error}");
            // Only a lost answer is worth resending under the same seq.
            let lost = matches!(error, Error::ConnectionLost { .. } | Error::Timeout { sent: true, .. });
            assert_eq!(error.answer_lost(), lost, "{error}");
        }
        // Every code this version defines has an answer; none panics.
        for code in ErrorCode::ALL {
            let _ = server(code).ran();
        }
    }
}
