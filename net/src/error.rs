//! What can go wrong on the wire, and the codes that tell the peer.
//!
//! Every error has a wire [`ErrorCode`]. Codes below `0x0100` are fatal: the
//! byte stream can no longer be trusted (framing is lost, or the peer broke
//! the connection's rules), so the side that detects one sends an ERROR frame
//! if it can and closes the connection. All other codes answer one frame: it
//! was well framed, its end is known, so the connection goes on.
//!
//! Codes are a `u16` newtype with named constants rather than an enum: a
//! newer server may send a code an older client does not know, and the
//! client must still be able to decode the frame and tell by the range
//! whether the connection is lost.

use crate::frame::{Body, Frame};
use crate::limits::ERROR_MESSAGE_LEN_MAX;
use std::fmt;

/// A wire error code.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    // Fatal: the connection closes.
    /// The length prefix is smaller than the rest of the header.
    pub const BAD_LENGTH: ErrorCode = ErrorCode(0x0001);
    /// The length prefix exceeds the receiver's frame limit.
    pub const FRAME_TOO_LARGE: ErrorCode = ErrorCode(0x0002);
    /// The header's version is not the connection's version.
    pub const BAD_VERSION: ErrorCode = ErrorCode(0x0003);
    /// The stream ended inside a frame (reported locally: nobody is left to tell).
    pub const TRUNCATED: ErrorCode = ErrorCode(0x0004);
    /// HELLO's version range and the server's have no version in common.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(0x0005);
    /// The first frame of a connection was not HELLO.
    pub const HANDSHAKE_REQUIRED: ErrorCode = ErrorCode(0x0006);
    /// The server holds its maximum of connections.
    pub const TOO_MANY_CONNECTIONS: ErrorCode = ErrorCode(0x0007);
    /// A frame reused the correlation id of a frame still awaiting its answer.
    pub const DUPLICATE_CORR: ErrorCode = ErrorCode(0x0008);

    // Recoverable, malformed frame: the frame is answered, the connection goes on.
    /// The frame type is not one this version defines.
    pub const UNKNOWN_FRAME_TYPE: ErrorCode = ErrorCode(0x0101);
    /// A field, or the data a length prefix announces, runs past the end of the frame.
    pub const FIELD_OVERRUN: ErrorCode = ErrorCode(0x0102);
    /// Bytes are left in the frame after its last field.
    pub const TRAILING_BYTES: ErrorCode = ErrorCode(0x0103);
    /// A text field is not UTF-8.
    pub const BAD_UTF8: ErrorCode = ErrorCode(0x0104);
    /// An enumerated field (target kind, abort kind, option tag) has a value with no meaning.
    pub const BAD_TAG: ErrorCode = ErrorCode(0x0105);
    /// A name, key, message or result exceeds its cap.
    pub const FIELD_TOO_LONG: ErrorCode = ErrorCode(0x0106);
    /// A request's arguments exceed the payload cap.
    pub const ARGS_TOO_LARGE: ErrorCode = ErrorCode(0x0107);
    /// A frame of a type that this side does not accept (wrong direction, or a second HELLO).
    pub const UNEXPECTED_FRAME: ErrorCode = ErrorCode(0x0108);

    // Recoverable, request refused: it did not run.
    /// No operator has this name.
    pub const UNKNOWN_OPERATOR: ErrorCode = ErrorCode(0x0201);
    /// The operator has no function of this name.
    pub const UNKNOWN_FUNCTION: ErrorCode = ErrorCode(0x0202);
    /// An entity function was given a partition, or a partition function a key.
    pub const WRONG_TARGET: ErrorCode = ErrorCode(0x0203);
    /// The partition is not below the operator's partition count.
    pub const BAD_PARTITION: ErrorCode = ErrorCode(0x0204);
    /// The request's seq is below the ack the client already sent: its outcome is forgotten.
    pub const SEQ_FORGOTTEN: ErrorCode = ErrorCode(0x0205);

    // Recoverable, server state.
    /// The engine cannot take the request now; it did not run; retry later.
    pub const OVERLOADED: ErrorCode = ErrorCode(0x0301);
    /// The server is draining: it takes no new request; it did not run.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(0x0302);
    /// The transaction committed, but its result (or the entity's state) exceeds the payload cap.
    pub const RESULT_TOO_LARGE: ErrorCode = ErrorCode(0x0303);
    /// A bug in the server; the request did not run.
    pub const INTERNAL: ErrorCode = ErrorCode(0x0304);

    /// Every code this version defines, for tables and tests.
    pub const ALL: [ErrorCode; 25] = [
        ErrorCode::BAD_LENGTH,
        ErrorCode::FRAME_TOO_LARGE,
        ErrorCode::BAD_VERSION,
        ErrorCode::TRUNCATED,
        ErrorCode::UNSUPPORTED_VERSION,
        ErrorCode::HANDSHAKE_REQUIRED,
        ErrorCode::TOO_MANY_CONNECTIONS,
        ErrorCode::DUPLICATE_CORR,
        ErrorCode::UNKNOWN_FRAME_TYPE,
        ErrorCode::FIELD_OVERRUN,
        ErrorCode::TRAILING_BYTES,
        ErrorCode::BAD_UTF8,
        ErrorCode::BAD_TAG,
        ErrorCode::FIELD_TOO_LONG,
        ErrorCode::ARGS_TOO_LARGE,
        ErrorCode::UNEXPECTED_FRAME,
        ErrorCode::UNKNOWN_OPERATOR,
        ErrorCode::UNKNOWN_FUNCTION,
        ErrorCode::WRONG_TARGET,
        ErrorCode::BAD_PARTITION,
        ErrorCode::SEQ_FORGOTTEN,
        ErrorCode::OVERLOADED,
        ErrorCode::SHUTTING_DOWN,
        ErrorCode::RESULT_TOO_LARGE,
        ErrorCode::INTERNAL,
    ];

    /// Whether the connection closes after this error. Decided by range, so
    /// it holds for codes this version does not know.
    pub fn is_fatal(self) -> bool {
        self.0 < 0x0100
    }

    /// The code's name, if this version defines it.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            ErrorCode::BAD_LENGTH => "BAD_LENGTH",
            ErrorCode::FRAME_TOO_LARGE => "FRAME_TOO_LARGE",
            ErrorCode::BAD_VERSION => "BAD_VERSION",
            ErrorCode::TRUNCATED => "TRUNCATED",
            ErrorCode::UNSUPPORTED_VERSION => "UNSUPPORTED_VERSION",
            ErrorCode::HANDSHAKE_REQUIRED => "HANDSHAKE_REQUIRED",
            ErrorCode::TOO_MANY_CONNECTIONS => "TOO_MANY_CONNECTIONS",
            ErrorCode::DUPLICATE_CORR => "DUPLICATE_CORR",
            ErrorCode::UNKNOWN_FRAME_TYPE => "UNKNOWN_FRAME_TYPE",
            ErrorCode::FIELD_OVERRUN => "FIELD_OVERRUN",
            ErrorCode::TRAILING_BYTES => "TRAILING_BYTES",
            ErrorCode::BAD_UTF8 => "BAD_UTF8",
            ErrorCode::BAD_TAG => "BAD_TAG",
            ErrorCode::FIELD_TOO_LONG => "FIELD_TOO_LONG",
            ErrorCode::ARGS_TOO_LARGE => "ARGS_TOO_LARGE",
            ErrorCode::UNEXPECTED_FRAME => "UNEXPECTED_FRAME",
            ErrorCode::UNKNOWN_OPERATOR => "UNKNOWN_OPERATOR",
            ErrorCode::UNKNOWN_FUNCTION => "UNKNOWN_FUNCTION",
            ErrorCode::WRONG_TARGET => "WRONG_TARGET",
            ErrorCode::BAD_PARTITION => "BAD_PARTITION",
            ErrorCode::SEQ_FORGOTTEN => "SEQ_FORGOTTEN",
            ErrorCode::OVERLOADED => "OVERLOADED",
            ErrorCode::SHUTTING_DOWN => "SHUTTING_DOWN",
            ErrorCode::RESULT_TOO_LARGE => "RESULT_TOO_LARGE",
            ErrorCode::INTERNAL => "INTERNAL",
            _ => return None,
        })
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({:#06x})", self.0),
            None => write!(f, "error {:#06x}", self.0),
        }
    }
}

/// An error of this crate: a frame that cannot be decoded, encoded or
/// resolved, or a bad setting. `corr` is the correlation id of the frame at
/// fault, so that the answer reaches the right request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("frame length prefix {len} is below the {min} header bytes that follow it; framing is lost")]
    BadLength { len: u32, min: usize },
    #[error("frame of {len} bytes exceeds the limit of {max}; send smaller frames")]
    FrameTooLarge { len: u64, max: usize },
    #[error("frame of protocol version {got}, the connection speaks version {expected}")]
    BadVersion { got: u8, expected: u8 },
    #[error("the stream ended {buffered} bytes into a frame")]
    Truncated { buffered: usize },
    #[error("frame {corr}: unknown frame type {frame_type:#04x}")]
    UnknownFrameType { corr: u32, frame_type: u8 },
    #[error("frame {corr}: {field} needs {needed} bytes but only {left} are left in the frame")]
    FieldOverrun {
        corr: u32,
        field: &'static str,
        needed: u64,
        left: usize,
    },
    #[error("frame {corr}: {extra} bytes left over after the last field")]
    TrailingBytes { corr: u32, extra: usize },
    #[error("frame {corr}: {field} is not UTF-8")]
    BadUtf8 { corr: u32, field: &'static str },
    #[error("frame {corr}: {field} {value} has no meaning here")]
    BadTag { corr: u32, field: &'static str, value: u64 },
    #[error("frame {corr}: {field} of {len} bytes exceeds its limit of {max}")]
    FieldTooLong {
        corr: u32,
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("frame {corr}: arguments of {len} bytes exceed the limit of {max}")]
    ArgsTooLarge { corr: u32, len: usize, max: usize },
    #[error("frame {corr}: no operator {operator:?}")]
    UnknownOperator { corr: u32, operator: String },
    #[error("frame {corr}: operator {operator:?} has no function {function:?}")]
    UnknownFunction {
        corr: u32,
        operator: String,
        function: String,
    },
    #[error("frame {corr}: {function} runs on {expected}, the request names another target")]
    WrongTarget {
        corr: u32,
        function: String,
        expected: &'static str,
    },
    #[error("frame {corr}: partition {partition} of operator {operator:?}, which has {partitions}")]
    BadPartition {
        corr: u32,
        operator: String,
        partition: u32,
        partitions: u32,
    },
    #[error("setting {name} = {value} is outside {min}..={max}")]
    Setting {
        name: &'static str,
        value: usize,
        min: usize,
        max: usize,
    },
}

impl Error {
    /// The wire code that tells the peer about this error. A bad setting is
    /// never sent; it maps to `INTERNAL`.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadLength { .. } => ErrorCode::BAD_LENGTH,
            Error::FrameTooLarge { .. } => ErrorCode::FRAME_TOO_LARGE,
            Error::BadVersion { .. } => ErrorCode::BAD_VERSION,
            Error::Truncated { .. } => ErrorCode::TRUNCATED,
            Error::UnknownFrameType { .. } => ErrorCode::UNKNOWN_FRAME_TYPE,
            Error::FieldOverrun { .. } => ErrorCode::FIELD_OVERRUN,
            Error::TrailingBytes { .. } => ErrorCode::TRAILING_BYTES,
            Error::BadUtf8 { .. } => ErrorCode::BAD_UTF8,
            Error::BadTag { .. } => ErrorCode::BAD_TAG,
            Error::FieldTooLong { .. } => ErrorCode::FIELD_TOO_LONG,
            Error::ArgsTooLarge { .. } => ErrorCode::ARGS_TOO_LARGE,
            Error::UnknownOperator { .. } => ErrorCode::UNKNOWN_OPERATOR,
            Error::UnknownFunction { .. } => ErrorCode::UNKNOWN_FUNCTION,
            Error::WrongTarget { .. } => ErrorCode::WRONG_TARGET,
            Error::BadPartition { .. } => ErrorCode::BAD_PARTITION,
            Error::Setting { .. } => ErrorCode::INTERNAL,
        }
    }

    /// Whether the connection must close: framing is lost.
    pub fn is_fatal(&self) -> bool {
        self.code().is_fatal()
    }

    /// The correlation id of the frame at fault; 0 when framing was lost
    /// before it could be read.
    pub fn corr(&self) -> u32 {
        match self {
            Error::UnknownFrameType { corr, .. }
            | Error::FieldOverrun { corr, .. }
            | Error::TrailingBytes { corr, .. }
            | Error::BadUtf8 { corr, .. }
            | Error::BadTag { corr, .. }
            | Error::FieldTooLong { corr, .. }
            | Error::ArgsTooLarge { corr, .. }
            | Error::UnknownOperator { corr, .. }
            | Error::UnknownFunction { corr, .. }
            | Error::WrongTarget { corr, .. }
            | Error::BadPartition { corr, .. } => *corr,
            Error::BadLength { .. }
            | Error::FrameTooLarge { .. }
            | Error::BadVersion { .. }
            | Error::Truncated { .. }
            | Error::Setting { .. } => 0,
        }
    }

    /// The ERROR frame that tells the peer: this error's code and message,
    /// addressed to the frame at fault.
    pub fn to_frame(&self) -> Frame {
        error_frame(self.corr(), self.code(), &self.to_string())
    }
}

/// An ERROR frame; a message over [`ERROR_MESSAGE_LEN_MAX`] is cut on a
/// character boundary, so the frame always encodes.
pub fn error_frame(corr: u32, code: ErrorCode, message: &str) -> Frame {
    let mut cut = message.len().min(ERROR_MESSAGE_LEN_MAX);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    Frame {
        corr,
        body: Body::Error {
            code,
            message: message[..cut].to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_named() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.0), "{code} twice");
            assert!(code.name().is_some());
        }
        assert_eq!(ErrorCode(0x7777).name(), None);
        assert!(!ErrorCode(0x7777).is_fatal());
        assert!(ErrorCode(0x00ee).is_fatal());
    }

    #[test]
    fn fatal_errors_are_the_framing_ones() {
        assert!(Error::BadLength { len: 1, min: 6 }.is_fatal());
        assert!(Error::BadVersion { got: 2, expected: 1 }.is_fatal());
        assert!(!Error::TrailingBytes { corr: 5, extra: 1 }.is_fatal());
        assert_eq!(Error::TrailingBytes { corr: 5, extra: 1 }.to_frame().corr, 5);
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let f = error_frame(1, ErrorCode::INTERNAL, &"é".repeat(ERROR_MESSAGE_LEN_MAX));
        let Body::Error { message, .. } = f.body else {
            panic!("not an error frame")
        };
        assert!(message.len() <= ERROR_MESSAGE_LEN_MAX);
        assert!(message.chars().all(|c| c == 'é'));
    }
}
