//! Entity keys.
//!
//! A key is a byte string. Integers encode big-endian so that keys sort in
//! numeric order (scans return entities in key order); tuples concatenate
//! their parts, so `(warehouse, district)` sorts by warehouse, then district.

use crate::bytes::{SmallBytes, stable_hash, write_bytes};
use std::fmt;

/// The key of one entity within its operator.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub(crate) SmallBytes);

/// Keys longer than this are refused: they are identifiers, not payloads.
pub const KEY_LEN_MAX: usize = 1024;

impl Key {
    /// A key from raw bytes.
    ///
    /// # Panics
    /// If `bytes` is longer than [`KEY_LEN_MAX`].
    pub fn from_bytes(bytes: &[u8]) -> Key {
        assert!(bytes.len() <= KEY_LEN_MAX, "key of {} bytes", bytes.len());
        Key(SmallBytes::from_slice(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }

    /// The key's `u64` value, when it was made from one.
    pub fn as_u64(&self) -> Option<u64> {
        let bytes: [u8; 8] = self.as_bytes().try_into().ok()?;
        Some(u64::from_be_bytes(bytes))
    }

    /// The key's stable hash: it places the key in a partition (its low
    /// bits, modulo the partition count) and in the partition's hash table
    /// (its high bits), so it is computed once per invocation.
    #[inline]
    pub fn hash64(&self) -> u64 {
        stable_hash(self.as_bytes())
    }

    /// The partition that owns this key among `partitions`.
    #[inline]
    pub fn partition(&self, partitions: u32) -> u32 {
        partition_of(self.hash64(), partitions)
    }
}

/// The partition of a key with stable hash `hash` among `partitions`.
#[inline]
pub fn partition_of(hash: u64, partitions: u32) -> u32 {
    (hash % u64::from(partitions)) as u32
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bytes(f, self.as_bytes())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bytes(f, self.as_bytes())
    }
}

/// A part of a composite key: integers big-endian, strings as their bytes.
pub trait KeyPart {
    fn append_to(&self, out: &mut Vec<u8>);
}

macro_rules! int_key_part {
    ($($t:ty),*) => {$(
        impl KeyPart for $t {
            fn append_to(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
        }
    )*};
}
int_key_part!(u8, u16, u32, u64);

impl KeyPart for &str {
    fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl From<u64> for Key {
    #[inline]
    fn from(n: u64) -> Key {
        Key(SmallBytes::from_slice(&n.to_be_bytes()))
    }
}

impl From<u32> for Key {
    fn from(n: u32) -> Key {
        Key(SmallBytes::from_slice(&n.to_be_bytes()))
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::from_bytes(s.as_bytes())
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Key {
        Key::from_bytes(s.as_bytes())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Key {
        Key::from_bytes(s.as_bytes())
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Key {
        Key::from_bytes(b)
    }
}

impl From<&Key> for Key {
    fn from(k: &Key) -> Key {
        k.clone()
    }
}

macro_rules! tuple_key {
    ($($name:ident),+) => {
        impl<$($name: KeyPart),+> From<($($name,)+)> for Key {
            #[allow(non_snake_case)]
            fn from(($($name,)+): ($($name,)+)) -> Key {
                let mut out = Vec::with_capacity(16);
                $($name.append_to(&mut out);)+
                Key::from_bytes(&out)
            }
        }
    };
}
tuple_key!(A, B);
tuple_key!(A, B, C);
tuple_key!(A, B, C, D);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_sort_numerically() {
        let mut keys: Vec<Key> = [300u64, 2, 70_000, 1].into_iter().map(Key::from).collect();
        keys.sort();
        let back: Vec<u64> = keys.iter().map(|k| k.as_u64().unwrap()).collect();
        assert_eq!(back, [1, 2, 300, 70_000]);
    }

    #[test]
    fn composite_keys_sort_by_parts() {
        let a = Key::from((1u32, 9u8));
        let b = Key::from((2u32, 0u8));
        assert!(a < b);
        assert_eq!(a.as_bytes(), &[0, 0, 0, 1, 9]);
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(Key::from(42u64).to_string(), "42");
        assert_eq!(Key::from("alice").to_string(), "alice");
        assert_eq!(Key::from((1u8, 2u8)).to_string(), "0x0102");
    }

    #[test]
    fn partition_spreads_keys() {
        let mut counts = [0u32; 8];
        for k in 0..8_000u64 {
            counts[Key::from(k).partition(8) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }
}
