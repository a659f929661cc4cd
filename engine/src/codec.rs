//! Arguments and results of functions: a small, documented binary encoding.
//!
//! State values are rkyv archives (zero-copy, Rust-only). Arguments and
//! results cross the wire to clients written in any language, so they use a
//! plain encoding instead, specified in `docs/protocol.md`: integers
//! little-endian at their width, `bool` one byte, strings and byte vectors a
//! `u32` length then the bytes, `Option` a tag byte, tuples their fields in
//! order, `()` nothing. A payload must be consumed exactly: trailing bytes
//! are an error, so a client that sends the wrong shape hears about it.

use crate::bytes::SmallBytes;
pub use crate::schema::{Types, WireType};
use std::fmt;

/// Payloads longer than this are refused (see the server's frame limit).
pub const PAYLOAD_LEN_MAX: usize = 1 << 20;

/// Encoded arguments or results of one call.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Payload(pub(crate) SmallBytes);

impl Payload {
    pub const EMPTY: Payload = Payload(SmallBytes::EMPTY);

    pub fn from_bytes(bytes: &[u8]) -> Payload {
        Payload(SmallBytes::from_slice(bytes))
    }

    pub fn from_vec(bytes: Vec<u8>) -> Payload {
        Payload(SmallBytes::from_vec(bytes))
    }

    /// Encodes `v`.
    #[inline]
    pub fn encode<T: Encode + ?Sized>(v: &T) -> Payload {
        let mut w = Writer::new();
        v.encode(&mut w);
        w.finish()
    }

    /// Decodes the whole payload as `T`.
    pub fn decode<T: Decode>(&self) -> Result<T, DecodeError> {
        let mut input = self.as_bytes();
        let v = T::decode(&mut input)?;
        if !input.is_empty() {
            return Err(DecodeError::Trailing(input.len()));
        }
        Ok(v)
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }

    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({:?})", self.0)
    }
}

/// Why a payload could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended while `expected` more bytes were needed.
    Short { expected: usize },
    /// The value was complete but this many bytes were left over.
    Trailing(usize),
    /// A string was not UTF-8.
    Utf8,
    /// A tag byte had no meaning (for `bool` and `Option`).
    Tag(u8),
    /// A length prefix exceeded [`PAYLOAD_LEN_MAX`].
    Length(u64),
    /// The value decoded but is not valid where it was read (a snapshot's
    /// partition map naming a partition or shard that does not exist).
    Invalid(String),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short { expected } => write!(f, "input ends {expected} bytes early"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes left over after the value"),
            DecodeError::Utf8 => f.write_str("string is not UTF-8"),
            DecodeError::Tag(t) => write!(f, "tag byte {t} has no meaning here"),
            DecodeError::Length(n) => write!(f, "length {n} exceeds the payload limit"),
            DecodeError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Collects an encoding; short ones never touch the heap.
pub struct Writer {
    inline: [u8; crate::bytes::INLINE_LEN_MAX],
    len: usize,
    heap: Vec<u8>,
}

impl Writer {
    #[inline]
    pub fn new() -> Writer {
        Writer {
            inline: [0; crate::bytes::INLINE_LEN_MAX],
            len: 0,
            heap: Vec::new(),
        }
    }

    #[inline]
    pub fn put(&mut self, bytes: &[u8]) {
        if self.heap.is_empty() && self.len + bytes.len() <= self.inline.len() {
            self.inline[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline[..self.len]);
            }
            self.heap.extend_from_slice(bytes);
        }
    }

    /// Makes room for `additional` more bytes (a large encoding grows
    /// once instead of doubling its way there).
    pub fn reserve(&mut self, additional: usize) {
        if self.heap.is_empty() {
            self.heap.reserve(self.len + additional);
            self.heap.extend_from_slice(&self.inline[..self.len]);
        } else {
            self.heap.reserve(additional);
        }
    }

    /// The bytes written, as a vector (no copy once they left the inline
    /// buffer).
    pub fn into_vec(self) -> Vec<u8> {
        if self.heap.is_empty() {
            self.inline[..self.len].to_vec()
        } else {
            self.heap
        }
    }

    #[inline]
    pub fn finish(self) -> Payload {
        if self.len == 0 && self.heap.is_empty() {
            // A constant, not a copy of the zeroed buffer (most results
            // are `()`).
            return Payload::EMPTY;
        }
        if self.heap.is_empty() {
            // Zeros after `len`, as the inline representation requires:
            // the buffer started zeroed and only its first `len` bytes were
            // written.
            Payload(SmallBytes::Inline {
                len: self.len as u8,
                buf: self.inline,
            })
        } else {
            Payload::from_vec(self.heap)
        }
    }
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::new()
    }
}

/// A type that can be sent as arguments or returned as a result.
pub trait Encode {
    fn encode(&self, w: &mut Writer);

    /// This type's encoding, for the schema (`App::schema`); structs and
    /// enums add their definition to `types`. A hand-written encoding is
    /// opaque unless it says otherwise.
    fn wire_type(types: &mut Types) -> WireType
    where
        Self: Sized,
    {
        let _ = types;
        WireType::opaque::<Self>()
    }
}

/// A type that can be received as arguments or a result.
pub trait Decode: Sized {
    /// Reads one value from the front of `input`, advancing it.
    fn decode(input: &mut &[u8]) -> Result<Self, DecodeError>;

    /// As [`Encode::wire_type`].
    fn wire_type(types: &mut Types) -> WireType {
        let _ = types;
        WireType::opaque::<Self>()
    }
}

#[inline]
fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if input.len() < n {
        return Err(DecodeError::Short {
            expected: n - input.len(),
        });
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

macro_rules! int_codec {
    ($($t:ident),*) => {$(
        impl Encode for $t {
            #[inline]
            fn encode(&self, w: &mut Writer) {
                w.put(&self.to_le_bytes());
            }

            fn wire_type(_: &mut Types) -> WireType {
                WireType::Number(stringify!($t))
            }
        }
        impl Decode for $t {
            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
                let bytes = take(input, std::mem::size_of::<$t>())?;
                Ok(<$t>::from_le_bytes(bytes.try_into().expect("sized")))
            }

            fn wire_type(_: &mut Types) -> WireType {
                WireType::Number(stringify!($t))
            }
        }
    )*};
}
int_codec!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl Encode for () {
    #[inline]
    fn encode(&self, _: &mut Writer) {}

    fn wire_type(_: &mut Types) -> WireType {
        WireType::Tuple(Vec::new())
    }
}

impl Decode for () {
    #[inline]
    fn decode(_: &mut &[u8]) -> Result<(), DecodeError> {
        Ok(())
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::Tuple(Vec::new())
    }
}

impl Encode for bool {
    fn encode(&self, w: &mut Writer) {
        w.put(&[u8::from(*self)]);
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::Bool
    }
}

impl Decode for bool {
    fn decode(input: &mut &[u8]) -> Result<bool, DecodeError> {
        match take(input, 1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            t => Err(DecodeError::Tag(t)),
        }
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::Bool
    }
}

fn decode_len(input: &mut &[u8]) -> Result<usize, DecodeError> {
    let n = u32::decode(input)?;
    if n as usize > PAYLOAD_LEN_MAX {
        return Err(DecodeError::Length(u64::from(n)));
    }
    Ok(n as usize)
}

fn encode_len(len: usize, w: &mut Writer) {
    assert!(len <= PAYLOAD_LEN_MAX, "encoding {len} bytes, over the payload limit");
    (len as u32).encode(w);
}

impl Encode for str {
    fn encode(&self, w: &mut Writer) {
        encode_len(self.len(), w);
        w.put(self.as_bytes());
    }
}

impl Encode for String {
    fn encode(&self, w: &mut Writer) {
        self.as_str().encode(w);
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::String
    }
}

impl Decode for String {
    fn decode(input: &mut &[u8]) -> Result<String, DecodeError> {
        let n = decode_len(input)?;
        let bytes = take(input, n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Utf8)
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::String
    }
}

impl<T: Encode + ?Sized> Encode for &T {
    fn encode(&self, w: &mut Writer) {
        (**self).encode(w);
    }

    fn wire_type(_: &mut Types) -> WireType {
        match std::any::type_name::<T>() {
            "str" => WireType::String,
            _ => WireType::opaque::<Self>(),
        }
    }
}

impl<T: Encode> Encode for [T] {
    fn encode(&self, w: &mut Writer) {
        encode_len(self.len(), w);
        for item in self {
            item.encode(w);
        }
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, w: &mut Writer) {
        self.as_slice().encode(w);
    }

    fn wire_type(types: &mut Types) -> WireType {
        WireType::Vec(Box::new(T::wire_type(types)))
    }
}

impl<T: Decode> Decode for Vec<T> {
    fn wire_type(types: &mut Types) -> WireType {
        WireType::Vec(Box::new(T::wire_type(types)))
    }

    fn decode(input: &mut &[u8]) -> Result<Vec<T>, DecodeError> {
        let n = decode_len(input)?;
        // Each element takes at least zero bytes, so cap the reservation by
        // what the input could hold to keep a hostile length from allocating.
        let mut out = Vec::with_capacity(n.min(input.len()));
        for _ in 0..n {
            out.push(T::decode(input)?);
        }
        Ok(out)
    }
}

impl<T: Encode> Encode for Option<T> {
    fn wire_type(types: &mut Types) -> WireType {
        WireType::Option(Box::new(T::wire_type(types)))
    }

    fn encode(&self, w: &mut Writer) {
        match self {
            None => w.put(&[0]),
            Some(v) => {
                w.put(&[1]);
                v.encode(w);
            }
        }
    }
}

impl<T: Decode> Decode for Option<T> {
    fn wire_type(types: &mut Types) -> WireType {
        WireType::Option(Box::new(T::wire_type(types)))
    }

    fn decode(input: &mut &[u8]) -> Result<Option<T>, DecodeError> {
        match take(input, 1)?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(input)?)),
            t => Err(DecodeError::Tag(t)),
        }
    }
}

impl Encode for Payload {
    /// A payload nested in another encodes as raw bytes with a length.
    fn encode(&self, w: &mut Writer) {
        encode_len(self.len(), w);
        w.put(self.as_bytes());
    }

    fn wire_type(_: &mut Types) -> WireType {
        WireType::Bytes
    }
}

impl Decode for Payload {
    fn wire_type(_: &mut Types) -> WireType {
        WireType::Bytes
    }

    fn decode(input: &mut &[u8]) -> Result<Payload, DecodeError> {
        let n = decode_len(input)?;
        Ok(Payload::from_bytes(take(input, n)?))
    }
}

macro_rules! tuple_codec {
    ($($name:ident),+) => {
        impl<$($name: Encode),+> Encode for ($($name,)+) {
            #[allow(non_snake_case)]
            #[inline]
            fn encode(&self, w: &mut Writer) {
                let ($($name,)+) = self;
                $($name.encode(w);)+
            }

            fn wire_type(types: &mut Types) -> WireType {
                WireType::Tuple(vec![$(<$name as Encode>::wire_type(types)),+])
            }
        }
        impl<$($name: Decode),+> Decode for ($($name,)+) {
            fn wire_type(types: &mut Types) -> WireType {
                WireType::Tuple(vec![$(<$name as Decode>::wire_type(types)),+])
            }

            #[inline]
            fn decode(input: &mut &[u8]) -> Result<Self, DecodeError> {
                Ok(($($name::decode(input)?,)+))
            }
        }
    };
}
tuple_codec!(A);
tuple_codec!(A, B);
tuple_codec!(A, B, C);
tuple_codec!(A, B, C, D);
tuple_codec!(A, B, C, D, E);
tuple_codec!(A, B, C, D, E, F);
tuple_codec!(A, B, C, D, E, F, G);
tuple_codec!(A, B, C, D, E, F, G, H);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips() {
        let v = (
            7u64,
            -3i64,
            true,
            String::from("héllo"),
            Some(vec![1u32, 2]),
            None::<u8>,
        );
        let p = Payload::encode(&v);
        assert_eq!(
            p.decode::<(u64, i64, bool, String, Option<Vec<u32>>, Option<u8>)>()
                .unwrap(),
            v
        );
    }

    #[test]
    fn a_writer_reserved_or_not_gives_the_same_bytes() {
        let write = |w: &mut Writer| {
            7u8.encode(w);
            "abc".encode(w);
            w.put(&[9; 300]);
            5u64.encode(w);
        };
        let mut plain = Writer::new();
        write(&mut plain);
        let expected = plain.finish().as_bytes().to_vec();
        let mut reserved = Writer::new();
        3u16.encode(&mut reserved);
        reserved.reserve(1_000);
        write(&mut reserved);
        let mut got = reserved.into_vec();
        assert_eq!(got.drain(..2).collect::<Vec<_>>(), vec![3, 0]);
        assert_eq!(got, expected);
        let mut small = Writer::new();
        1u32.encode(&mut small);
        assert_eq!(small.into_vec(), vec![1, 0, 0, 0]);
    }

    #[test]
    fn layout_is_little_endian_with_u32_lengths() {
        assert_eq!(
            Payload::encode(&(1u16, "ab")).as_bytes(),
            &[1, 0, 2, 0, 0, 0, b'a', b'b']
        );
    }

    #[test]
    fn errors_are_precise() {
        assert_eq!(
            Payload::from_bytes(&[1, 2]).decode::<u32>(),
            Err(DecodeError::Short { expected: 2 })
        );
        assert_eq!(
            Payload::from_bytes(&[1, 2, 3]).decode::<u16>(),
            Err(DecodeError::Trailing(1))
        );
        assert_eq!(Payload::from_bytes(&[2]).decode::<bool>(), Err(DecodeError::Tag(2)));
        assert_eq!(
            Payload::from_bytes(&[0xff, 0xff, 0xff, 0xff]).decode::<String>(),
            Err(DecodeError::Length(u64::from(u32::MAX)))
        );
        assert_eq!(
            Payload::from_bytes(&[1, 0, 0, 0, 0xff]).decode::<String>(),
            Err(DecodeError::Utf8)
        );
    }

    #[test]
    fn long_payloads_spill_to_the_heap() {
        let v = vec![9u64; 10];
        assert_eq!(Payload::encode(&v).decode::<Vec<u64>>().unwrap(), v);
    }
}
