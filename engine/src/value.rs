//! Entity state values: rkyv bytes, read in place.
//!
//! A value is the rkyv archive of whatever type the operator's functions
//! store. Small archives (an `i64` balance is 8 bytes) live inline in the
//! state entry, so a write allocates nothing; larger ones live in a 16-byte
//! aligned heap buffer. rkyv needs aligned bytes, and inline bytes inside an
//! enum are not, so readers of an inline value get an aligned copy on the
//! stack (at most [`VALUE_INLINE_MAX`] bytes: cheaper than a pointer chase).
//!
//! Reads are validated (`rkyv::access` with bytecheck): a function that reads
//! a value as another type than the one written gets a clear abort, never
//! undefined behaviour. For the small fixed-size types of the hot path the
//! check costs about a nanosecond.

use crate::abort::Abort;
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use std::fmt;

/// Warming a value touches at most this many of its bytes (16 lines).
pub const WARM_BYTES_MAX: usize = 1024;

/// Archives up to this many bytes are stored inline.
pub const VALUE_INLINE_MAX: usize = 30;

/// One entity's state, as rkyv bytes.
#[derive(Clone)]
pub struct Value(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        buf: [u8; VALUE_INLINE_MAX],
    },
    /// The buffer itself, not a box of it: a read then follows one
    /// pointer to the bytes (a box cost a second, dependent cache miss
    /// per row read and a second allocation per write), and the enum
    /// stays 32 bytes either way.
    Heap(AlignedVec<16>),
}

const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::size_of::<Option<Value>>() == 32);

#[repr(C, align(16))]
struct AlignedInline([u8; VALUE_INLINE_MAX + 2]);

/// What archiving needs, kept between calls: the output buffer and rkyv's
/// scratch arena (rkyv's own per-thread arena shrinks after every use and
/// reallocates on the next, which cost more than the archiving itself).
#[derive(Default)]
pub struct Scratch {
    buf: AlignedVec,
    arena: rkyv::ser::allocator::Arena,
}

/// A type that can be stored as an entity's state.
///
/// Implemented for every type that derives rkyv's `Archive` and
/// `Serialize`; there is nothing to implement by hand.
pub trait Store: 'static + for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>> {}
impl<T> Store for T where
    T: 'static + for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
{
}

/// A type that can be loaded from an entity's state: its archive can be
/// validated and deserialized. Implemented for every type that derives
/// rkyv's `Archive` and `Deserialize`, with `bytecheck`.
pub trait Load:
    'static
    + rkyv::Archive<
        Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
                      + rkyv::Deserialize<Self, HighDeserializer<rancor::Error>>,
    >
    + Sized
{
}
impl<T> Load for T where
    T: 'static
        + rkyv::Archive<
            Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
                          + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
        >
{
}

impl Value {
    /// The archive of `v` if it is a fixed-width number (no serializer needed).
    #[inline]
    pub fn encode_primitive<T: Store>(v: &T) -> Option<Value> {
        primitive::encode(v)
    }

    /// The archive of an `i64` (what [`Ctx::add`](crate::Ctx::add) sums).
    #[inline]
    pub(crate) fn of_i64(x: i64) -> Value {
        primitive::inline(&x.to_le_bytes())
    }

    /// The value as an `i64`, if it is 8 bytes (an `i64` or `u64`, whose
    /// archives are their little-endian bytes).
    #[inline]
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match &self.0 {
            Repr::Inline { len: 8, buf } => Some(i64::from_le_bytes(buf[..8].try_into().expect("8 bytes"))),
            _ => None,
        }
    }

    /// `base + delta`, wrapping, for an add to an entity whose state is
    /// `base` (none counts as 0). An error names what the state is instead.
    pub(crate) fn added(base: Option<&Value>, delta: i64) -> Result<Value, Abort> {
        let base = match base {
            None => 0,
            Some(v) => v.as_i64().ok_or_else(|| Value::not_addable(v))?,
        };
        Ok(Value::of_i64(base.wrapping_add(delta)))
    }

    /// The abort of an add to a state that is not an 8-byte integer.
    pub(crate) fn not_addable(v: &Value) -> Abort {
        Abort::state(format!(
            "cannot add to a state of {} bytes: an add needs an i64 (8 bytes)",
            v.len()
        ))
    }

    /// Archives `v`, reusing `scratch`'s buffer and arena.
    pub fn encode<T: Store>(v: &T, scratch: &mut Scratch) -> Result<Value, Abort> {
        if let Some(bytes) = primitive::encode(v) {
            return Ok(bytes);
        }
        scratch.buf.clear();
        let buf = std::mem::take(&mut scratch.buf);
        let buf = rkyv::api::high::to_bytes_in_with_alloc::<_, _, rancor::Error>(v, buf, scratch.arena.acquire())
            .map_err(|e| Abort::state(format!("cannot archive {}: {e}", std::any::type_name::<T>())))?;
        let value = Value::from_bytes(&buf);
        scratch.buf = buf;
        Ok(value)
    }

    /// A value from archive bytes (already validated by the caller or
    /// produced by [`Value::encode`]).
    pub fn from_bytes(bytes: &[u8]) -> Value {
        if bytes.len() <= VALUE_INLINE_MAX {
            let mut buf = [0; VALUE_INLINE_MAX];
            buf[..bytes.len()].copy_from_slice(bytes);
            Value(Repr::Inline {
                len: bytes.len() as u8,
                buf,
            })
        } else {
            let mut heap = AlignedVec::<16>::with_capacity(bytes.len());
            heap.extend_from_slice(bytes);
            Value(Repr::Heap(heap))
        }
    }

    /// The archive's length in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => *len as usize,
            Repr::Heap(v) => v.len(),
        }
    }

    /// A byte from each cache line of the archive, folded into one (0 if
    /// empty), up to `WARM_BYTES_MAX` bytes: loads from the bytes
    /// themselves, for `Store::touch`. Each
    /// line counts: rkyv puts a row's root struct last, so the fields a
    /// reader wants are rarely in the first line of a row of several.
    #[inline]
    pub fn touch(&self) -> u8 {
        match &self.0 {
            Repr::Inline { buf, .. } => buf[0],
            Repr::Heap(v) => v[..v.len().min(WARM_BYTES_MAX)]
                .iter()
                .step_by(64)
                .fold(0, |a, b| a ^ b),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with the archive bytes, 16-byte aligned.
    #[inline]
    pub fn with_aligned<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match &self.0 {
            Repr::Inline { len, buf } => {
                let mut aligned = AlignedInline([0; VALUE_INLINE_MAX + 2]);
                aligned.0[..VALUE_INLINE_MAX].copy_from_slice(buf);
                f(&aligned.0[..*len as usize])
            }
            Repr::Heap(v) => f(v.as_slice()),
        }
    }

    /// A copy of the archive bytes (for snapshots and inspection).
    pub fn to_vec(&self) -> Vec<u8> {
        self.with_aligned(|b| b.to_vec())
    }

    /// Validates the archive as `T` and gives `f` the archived value.
    pub fn read<T: Load, R>(&self, f: impl FnOnce(&T::Archived) -> R) -> Result<R, Abort> {
        self.with_aligned(|bytes| match rkyv::access::<T::Archived, rancor::Error>(bytes) {
            Ok(archived) => Ok(f(archived)),
            Err(e) => Err(Abort::state(format!(
                "stored value is not a valid {}: {e}",
                std::any::type_name::<T>()
            ))),
        })
    }

    /// Validates and deserializes the archive as `T`.
    #[inline]
    pub fn decode<T: Load>(&self) -> Result<T, Abort> {
        if let Some(v) = primitive::decode::<T>(self) {
            return v;
        }
        self.with_aligned(|bytes| {
            rkyv::from_bytes::<T, rancor::Error>(bytes).map_err(|e| {
                Abort::state(format!(
                    "stored value is not a valid {}: {e}",
                    std::any::type_name::<T>()
                ))
            })
        })
    }
}

/// Fixed-width integers and floats archive as their little-endian bytes
/// (rkyv's default format), so they skip rkyv's serializer and validator:
/// a balance update is the hot path of most workloads. A test pins the
/// equivalence with rkyv's own output.
mod primitive {
    use super::{Repr, VALUE_INLINE_MAX, Value};
    use crate::abort::Abort;
    use std::any::Any;

    macro_rules! primitives {
        ($($t:ty),*) => {
            #[inline(always)]
            pub(super) fn encode<T: 'static>(v: &T) -> Option<Value> {
                let any = v as &dyn Any;
                $(
                    if let Some(x) = any.downcast_ref::<$t>() {
                        return Some(inline(&x.to_le_bytes()));
                    }
                )*
                None
            }

            #[inline(always)]
            pub(super) fn decode<T: 'static>(value: &Value) -> Option<Result<T, Abort>> {
                let Repr::Inline { len, buf } = &value.0 else {
                    return None;
                };
                $(
                    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<$t>() {
                        const N: usize = std::mem::size_of::<$t>();
                        if *len as usize != N {
                            return Some(Err(Abort::state(format!(
                                "stored value is not a valid {}: {} bytes, expected {N}",
                                std::any::type_name::<T>(),
                                len
                            ))));
                        }
                        let x = <$t>::from_le_bytes(buf[..N].try_into().expect("sized"));
                        let mut out: Option<T> = None;
                        if let Some(slot) = (&mut out as &mut dyn Any).downcast_mut::<Option<$t>>() {
                            *slot = Some(x);
                        }
                        return out.map(Ok);
                    }
                )*
                None
            }
        };
    }
    primitives!(i64, u64, i32, u32, i16, u16, f64, f32);

    #[inline(always)]
    pub(super) fn inline(bytes: &[u8]) -> Value {
        let mut buf = [0; VALUE_INLINE_MAX];
        buf[..bytes.len()].copy_from_slice(bytes);
        Value(Repr::Inline {
            len: bytes.len() as u8,
            buf,
        })
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.with_aligned(|a| other.with_aligned(|b| a == b))
    }
}

impl Eq for Value {}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_aligned(|b| {
            f.write_str("Value(")?;
            for byte in b {
                write!(f, "{byte:02x}")?;
            }
            f.write_str(")")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_roundtrip_inline() {
        let mut scratch = Scratch::default();
        let v = Value::encode(&-42i64, &mut scratch).unwrap();
        assert!(matches!(v.0, Repr::Inline { .. }));
        assert_eq!(v.decode::<i64>().unwrap(), -42);
        assert_eq!(v.read::<i64, _>(|a| a.to_native()).unwrap(), -42);
    }

    #[test]
    fn primitive_fast_path_matches_rkyv() {
        fn check<T>(v: T)
        where
            T: Store + Load + PartialEq + std::fmt::Debug + Copy + 'static,
        {
            let fast = primitive::encode(&v).expect("primitive");
            let slow = rkyv::to_bytes::<rancor::Error>(&v).unwrap();
            assert_eq!(fast.to_vec(), slow.to_vec(), "{}", std::any::type_name::<T>());
            assert_eq!(fast.decode::<T>().unwrap(), v);
            assert_eq!(Value::from_bytes(&slow).decode::<T>().unwrap(), v);
        }
        check(-5i64);
        check(u64::MAX);
        check(-7i32);
        check(9u32);
        check(-3i16);
        check(3u16);
        check(1.5f64);
        check(-2.5f32);
        // Wrong width is still a clear abort.
        let v = Value::encode(&7u8, &mut Scratch::default()).unwrap();
        assert!(v.decode::<i64>().unwrap_err().message().contains("not a valid i64"));
    }

    /// Warming reads one byte of each cache line, up to its bound.
    #[test]
    fn touching_a_value_reads_a_byte_of_each_line() {
        let mut bytes = vec![0u8; 3000];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i / 64) as u8 + 1;
        }
        let expected = (1..=(WARM_BYTES_MAX / 64) as u8).fold(0, |a, b| a ^ b);
        assert_eq!(Value::from_bytes(&bytes).touch(), expected);
        assert_eq!(Value::from_bytes(&bytes[..65]).touch(), 1 ^ 2);
        assert_eq!(Value::from_bytes(&[7, 8]).touch(), 7);
    }

    #[test]
    fn large_values_roundtrip_on_heap() {
        let mut scratch = Scratch::default();
        let s = "x".repeat(100);
        let v = Value::encode(&s, &mut scratch).unwrap();
        assert!(matches!(v.0, Repr::Heap(_)));
        assert_eq!(v.decode::<String>().unwrap(), s);
        assert_eq!(v.read::<String, _>(|a| a.len()).unwrap(), 100);
    }

    #[test]
    fn reading_as_the_wrong_type_is_an_abort_not_ub() {
        let mut scratch = Scratch::default();
        let v = Value::encode(&7u8, &mut scratch).unwrap();
        let err = v.decode::<i64>().unwrap_err();
        assert!(err.message().contains("not a valid i64"), "{err}");
    }
}
