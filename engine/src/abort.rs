//! Why a transaction did not commit.
//!
//! An abort is an ordinary value: a function returns `Err(Abort)` and the
//! whole transaction rolls back. The kind tells a client whether its own
//! program decided (`User`), its code is broken (`Panic`, `BadArguments`,
//! `UnknownFunction`, `Limit`, `State`), or the engine could not run it
//! (`Rejected`). `Drift` never reaches a client: it marks a re-execution that
//! touched an entity outside its recorded set, which the engine reschedules.

use std::fmt;

/// Abort messages longer than this are cut: they travel in every reply.
pub const ABORT_MESSAGE_LEN_MAX: usize = 1024;

/// Why a transaction aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AbortKind {
    /// The function returned an abort.
    User = 1,
    /// The function panicked; the panic was caught and the transaction rolled back.
    Panic = 2,
    /// The called operator or function does not exist, or has another kind.
    UnknownFunction = 3,
    /// The arguments could not be decoded as the function's parameter type.
    BadArguments = 4,
    /// A named limit (call depth, fan-out) was exceeded.
    Limit = 5,
    /// A stored value could not be archived or read as the requested type.
    State = 6,
    /// The engine refused the request before running it (overload, shutdown).
    Rejected = 7,
    /// The function awaited something other than a call it made: it could
    /// never finish, so the engine stopped it.
    Stalled = 8,
    /// Internal: a re-execution left its recorded read/write set.
    Drift = 9,
    /// A retried request whose outcome the engine no longer keeps (the
    /// client acknowledged it, or it fell out of the bounded window): it is
    /// not run again.
    Forgotten = 10,
    /// Two concurrent branches of the transaction (a call not yet awaited,
    /// or a send, and a new call) targeted the same entity: the engine
    /// would not order them, so it refuses the second.
    Concurrent = 11,
    /// A `&mut self` method would have written its state back over a
    /// change a nested call of the same transaction made to that entity
    /// (A → B → A): the engine refuses the lost update.
    Reentrant = 12,
}

impl AbortKind {
    pub fn from_u8(b: u8) -> Option<AbortKind> {
        Some(match b {
            1 => AbortKind::User,
            2 => AbortKind::Panic,
            3 => AbortKind::UnknownFunction,
            4 => AbortKind::BadArguments,
            5 => AbortKind::Limit,
            6 => AbortKind::State,
            7 => AbortKind::Rejected,
            8 => AbortKind::Stalled,
            9 => AbortKind::Drift,
            10 => AbortKind::Forgotten,
            11 => AbortKind::Concurrent,
            12 => AbortKind::Reentrant,
            _ => return None,
        })
    }
}

/// A transaction's abort: a kind and a message for people.
///
/// One pointer wide: every function result is a `Result<_, Abort>`, and a
/// `Result<(), Abort>` in a register instead of three words in memory is
/// most of what a `?` on the hot path costs. Aborts themselves are rare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Abort(Box<AbortInner>);

#[derive(Clone, PartialEq, Eq, Hash)]
struct AbortInner {
    kind: AbortKind,
    message: Box<str>,
}

const _: () = assert!(std::mem::size_of::<Result<(), Abort>>() == 8);

impl Abort {
    /// An abort decided by the program, with a reason for the client.
    pub fn new(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::User, message)
    }

    pub fn with_kind(kind: AbortKind, message: impl Into<String>) -> Abort {
        let mut message: String = message.into();
        if message.len() > ABORT_MESSAGE_LEN_MAX {
            let mut cut = ABORT_MESSAGE_LEN_MAX;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        Abort(Box::new(AbortInner {
            kind,
            message: message.into_boxed_str(),
        }))
    }

    pub(crate) fn panic(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::Panic, message)
    }

    pub(crate) fn unknown(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::UnknownFunction, message)
    }

    pub(crate) fn bad_arguments(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::BadArguments, message)
    }

    pub(crate) fn limit(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::Limit, message)
    }

    pub(crate) fn state(message: impl Into<String>) -> Abort {
        Abort::with_kind(AbortKind::State, message)
    }

    pub(crate) fn stalled(function: &str) -> Abort {
        Abort::with_kind(
            AbortKind::Stalled,
            format!("{function} awaited something other than a call it made; functions may only await calls"),
        )
    }

    /// The abort for a caught panic, with the panic's message.
    pub(crate) fn from_panic(panic: &(dyn std::any::Any + Send)) -> Abort {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a function panicked".to_string());
        Abort::panic(format!("panic: {msg}"))
    }

    pub(crate) fn drift() -> Abort {
        Abort::with_kind(AbortKind::Drift, "re-execution left its recorded read/write set")
    }

    pub fn kind(&self) -> AbortKind {
        self.0.kind
    }

    pub fn message(&self) -> &str {
        &self.0.message
    }

    pub(crate) fn is_drift(&self) -> bool {
        self.0.kind == AbortKind::Drift
    }
}

impl fmt::Debug for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Abort({:?}: {})", self.0.kind, self.0.message)
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Abort {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let a = Abort::new("é".repeat(ABORT_MESSAGE_LEN_MAX));
        assert!(a.message().len() <= ABORT_MESSAGE_LEN_MAX);
        assert!(a.message().chars().all(|c| c == 'é'));
    }

    #[test]
    fn kinds_roundtrip_through_bytes() {
        for b in 1..=10 {
            assert_eq!(AbortKind::from_u8(b).unwrap() as u8, b);
        }
        assert!(AbortKind::from_u8(0).is_none());
    }
}
