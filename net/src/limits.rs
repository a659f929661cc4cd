//! Bounds of the wire protocol and a server's settings within them.
//!
//! Every byte a peer makes us hold is bounded here, so a hostile or broken
//! peer costs a server at most `connections_max × frame_len_max` bytes of
//! receive buffers, `connections_max × (input_bytes_max + frame_len_max)`
//! of requests at the engine and `connections_max × output_bytes_max` of
//! answers queued, and a single length prefix can never make us allocate
//! more than one frame.
//!
//! Two kinds of bound:
//! - protocol caps (`*_MAX` constants): part of the protocol, the same for
//!   every peer; a field over its cap is malformed whatever the settings;
//! - [`Limits`]: what one server accepts, within the caps, announced to each
//!   client in WELCOME so that a client can stay within them.
//!
//! The caps on fields that travel to the engine (keys, arguments, abort
//! messages) are the engine's own, so a frame that decodes is one the engine
//! accepts.

use crate::error::Error;
use styx_engine::{ABORT_MESSAGE_LEN_MAX, KEY_LEN_MAX, PAYLOAD_LEN_MAX};

/// Bytes of the length prefix that starts every frame.
pub const PREFIX_LEN: usize = 4;

/// Bytes of the frame header: length (4), version (1), type (1), corr (4).
pub const HEADER_LEN: usize = 10;

/// The largest frame, header included, that any peer may send: the largest
/// payload the engine takes plus room for the fields around it.
pub const FRAME_LEN_MAX: usize = PAYLOAD_LEN_MAX + 4096;

/// The least `frame_len_max` a peer may configure: every frame without a
/// payload (handshake, errors, aborts, control frames) fits in it, so two
/// peers can always exchange those.
pub const FRAME_LEN_MAX_FLOOR: usize = 4096;

/// Operator and function names are at most this long (the engine's limit).
pub const NAME_LEN_MAX: usize = styx_engine::NAME_LEN_MAX;

/// The message of an ERROR frame is at most this long.
pub const ERROR_MESSAGE_LEN_MAX: usize = 1024;

/// The client name in HELLO and the server name in WELCOME are at most this long.
pub const PEER_NAME_LEN_MAX: usize = 64;

/// The most frames awaiting an answer that a server may allow per connection.
pub const IN_FLIGHT_MAX: usize = 1 << 16;

/// The most connections a server may be configured to hold.
pub const CONNECTIONS_MAX: usize = 1 << 16;

/// The most a server may set `output_bytes_max` to (1 TiB: no bound in
/// practice, for a server that trusts its clients).
pub const OUTPUT_BYTES_MAX: usize = 1 << 40;

/// The least `output_bytes_max`: two of the largest answers, so a client
/// that reads is never cut off for one large answer.
pub const OUTPUT_BYTES_MAX_FLOOR: usize = 2 * FRAME_LEN_MAX;

/// The most a server may set `input_bytes_max` to (1 TiB: no bound in
/// practice), and the least (one frame of the least frame limit: a
/// connection with nothing at the engine always takes one more frame,
/// whatever its size).
pub const INPUT_BYTES_MAX: usize = 1 << 40;
pub const INPUT_BYTES_MAX_FLOOR: usize = FRAME_LEN_MAX_FLOOR;

/// A decoder keeps a buffer of at most this capacity between frames; a larger
/// one (left by a large frame) is released, so idle connections stay small.
pub const BUFFER_RETAINED_MAX: usize = 64 << 10;

/// The fixed fields of a REQUEST around its four variable ones: client id,
/// seq and ack (24), four u32 lengths (16), the target tag (1).
const REQUEST_FIXED_LEN: usize = 24 + 16 + 1;

// A REQUEST with the largest names, key and arguments fits in a frame.
const _: () =
    assert!(HEADER_LEN + REQUEST_FIXED_LEN + 2 * NAME_LEN_MAX + KEY_LEN_MAX + PAYLOAD_LEN_MAX <= FRAME_LEN_MAX);
// A COMMITTED or STATE with the largest payload fits in a frame.
const _: () = assert!(HEADER_LEN + 8 + 1 + 4 + PAYLOAD_LEN_MAX <= FRAME_LEN_MAX);
// Every frame without a payload fits in the least frame limit: the largest
// are GET (a name and a key), ABORTED and ERROR (a message).
const _: () = assert!(HEADER_LEN + 8 + NAME_LEN_MAX + KEY_LEN_MAX <= FRAME_LEN_MAX_FLOOR);
const _: () = assert!(HEADER_LEN + 8 + 1 + 4 + ABORT_MESSAGE_LEN_MAX <= FRAME_LEN_MAX_FLOOR);
const _: () = assert!(HEADER_LEN + 2 + 4 + ERROR_MESSAGE_LEN_MAX <= FRAME_LEN_MAX_FLOOR);
const _: () = assert!(FRAME_LEN_MAX_FLOOR <= FRAME_LEN_MAX && FRAME_LEN_MAX <= u32::MAX as usize);
const _: () = assert!(BUFFER_RETAINED_MAX <= FRAME_LEN_MAX);

/// A server's limits on its connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame the server reads, header included, in
    /// `FRAME_LEN_MAX_FLOOR..=FRAME_LEN_MAX`. A larger one closes the connection.
    pub frame_len_max: usize,
    /// Frames one connection may have awaiting an answer, in
    /// `1..=IN_FLIGHT_MAX`; at the limit the server stops reading the
    /// connection until an answer leaves.
    pub in_flight_max: usize,
    /// Connections held at once, in `1..=CONNECTIONS_MAX`; one more is sent
    /// `TOO_MANY_CONNECTIONS` and closed.
    pub connections_max: usize,
    /// Bytes of answers one connection may leave waiting for its socket, in
    /// `OUTPUT_BYTES_MAX_FLOOR..=OUTPUT_BYTES_MAX` (not announced: a client
    /// that reads its answers never meets it). From half of it the server
    /// reads no more of the connection; past it for a while (the TCP
    /// server's `OUTPUT_STALL`, 10 s) with the client reading less than it
    /// meanwhile, it closes the connection and drops the answers (a client
    /// with a client id gets them again by retrying). `in_flight_max`
    /// bounds answers by count; this bounds them by bytes (1 024 answers of
    /// 1 MiB each would be 1 GiB).
    pub output_bytes_max: usize,
    /// Bytes of requests (their frames) one connection may have at the
    /// engine, in `INPUT_BYTES_MAX_FLOOR..=INPUT_BYTES_MAX` (not
    /// announced: a client meets it only as back-pressure): at it the
    /// server reads no more of the connection until answers come back, so
    /// it holds at most this plus one frame. `in_flight_max` bounds
    /// requests by count; this by bytes (1 024 requests of 1 MiB each
    /// would be 1 GiB held by the engine for one connection).
    pub input_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            frame_len_max: FRAME_LEN_MAX,
            in_flight_max: 1024,
            connections_max: 1024,
            output_bytes_max: 64 << 20,
            input_bytes_max: 64 << 20,
        }
    }
}

impl Limits {
    /// Checks every setting against its range.
    pub fn validate(&self) -> Result<(), Error> {
        check("frame_len_max", self.frame_len_max, FRAME_LEN_MAX_FLOOR, FRAME_LEN_MAX)?;
        check("in_flight_max", self.in_flight_max, 1, IN_FLIGHT_MAX)?;
        check("connections_max", self.connections_max, 1, CONNECTIONS_MAX)?;
        check(
            "output_bytes_max",
            self.output_bytes_max,
            OUTPUT_BYTES_MAX_FLOOR,
            OUTPUT_BYTES_MAX,
        )?;
        check(
            "input_bytes_max",
            self.input_bytes_max,
            INPUT_BYTES_MAX_FLOOR,
            INPUT_BYTES_MAX,
        )
    }
}

fn check(name: &'static str, value: usize, min: usize, max: usize) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::Setting { name, value, min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        Limits::default().validate().unwrap();
        let bad = Limits {
            in_flight_max: 0,
            ..Limits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(Error::Setting {
                name: "in_flight_max",
                ..
            })
        ));
        let bad = Limits {
            frame_len_max: FRAME_LEN_MAX + 1,
            ..Limits::default()
        };
        assert!(bad.validate().is_err());
        let bad = Limits {
            output_bytes_max: OUTPUT_BYTES_MAX_FLOOR - 1,
            ..Limits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(Error::Setting {
                name: "output_bytes_max",
                ..
            })
        ));
        let bad = Limits {
            input_bytes_max: INPUT_BYTES_MAX_FLOOR - 1,
            ..Limits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(Error::Setting {
                name: "input_bytes_max",
                ..
            })
        ));
    }
}
