//! Small byte strings that live inline when short.
//!
//! Keys and call arguments are usually a few bytes (an account number, an
//! amount). Storing them inline avoids one heap allocation per key and per
//! message, which dominates the cost of a short transaction. Longer strings
//! spill to the heap. Equality, ordering and hashing are those of the bytes,
//! whatever the representation.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Bytes kept inline; longer strings go to the heap.
pub const INLINE_LEN_MAX: usize = 22;

#[derive(Clone)]
pub(crate) enum SmallBytes {
    Inline { len: u8, buf: [u8; INLINE_LEN_MAX] },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<SmallBytes>() == 24);

impl SmallBytes {
    pub(crate) const EMPTY: SmallBytes = SmallBytes::Inline {
        len: 0,
        buf: [0; INLINE_LEN_MAX],
    };

    #[inline]
    pub(crate) fn from_slice(bytes: &[u8]) -> SmallBytes {
        if bytes.len() <= INLINE_LEN_MAX {
            let mut buf = [0; INLINE_LEN_MAX];
            buf[..bytes.len()].copy_from_slice(bytes);
            SmallBytes::Inline {
                len: bytes.len() as u8,
                buf,
            }
        } else {
            SmallBytes::Heap(bytes.into())
        }
    }

    pub(crate) fn from_vec(bytes: Vec<u8>) -> SmallBytes {
        if bytes.len() <= INLINE_LEN_MAX {
            SmallBytes::from_slice(&bytes)
        } else {
            SmallBytes::Heap(bytes.into_boxed_slice())
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, buf } => &buf[..*len as usize],
            SmallBytes::Heap(b) => b,
        }
    }
}

impl PartialEq for SmallBytes {
    /// The representation is canonical (inline exactly when short, zeros
    /// after the bytes), so two inline strings compare as fixed-size arrays:
    /// no call into `memcmp` on the hot path of every key lookup.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (SmallBytes::Inline { len: a, buf: x }, SmallBytes::Inline { len: b, buf: y }) => a == b && x == y,
            (SmallBytes::Heap(x), SmallBytes::Heap(y)) => x == y,
            _ => false,
        }
    }
}

impl Eq for SmallBytes {}

impl Hash for SmallBytes {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_slice());
    }
}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_bytes(f, self.as_slice())
    }
}

/// Prints bytes as text when they are printable, as a number when they are
/// eight bytes (the encoding of `u64` keys), else as hex.
pub(crate) fn write_bytes(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    if !bytes.is_empty() && bytes.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        // Printable: show as text.
        f.write_str(std::str::from_utf8(bytes).expect("ascii is utf-8"))
    } else if bytes.len() == 8 {
        let n = u64::from_be_bytes(bytes.try_into().expect("eight bytes"));
        write!(f, "{n}")
    } else {
        f.write_str("0x")?;
        for b in bytes {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A hash that never changes across versions and platforms: it decides which
/// partition owns a key, so it is part of the data format.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    // FNV-1a, then a SplitMix64 finaliser to spread the low bits that the
    // partition modulus uses.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// SplitMix64's finaliser: a bijection that spreads every input bit.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_compare_by_content() {
        let short = SmallBytes::from_slice(b"abc");
        let long = SmallBytes::from_slice(&[7u8; 40]);
        assert!(matches!(short, SmallBytes::Inline { .. }));
        assert!(matches!(long, SmallBytes::Heap(_)));
        assert_eq!(long.as_slice(), &[7u8; 40]);
        assert_eq!(SmallBytes::from_vec(b"abc".to_vec()), short);
        assert!(short < SmallBytes::from_slice(b"abd"));
    }

    #[test]
    fn equality_is_that_of_the_bytes_at_every_length() {
        for n in 0..=INLINE_LEN_MAX + 2 {
            let a: Vec<u8> = (0..n as u8).collect();
            let mut b = a.clone();
            assert_eq!(SmallBytes::from_slice(&a), SmallBytes::from_vec(b.clone()), "{n}");
            if let Some(last) = b.last_mut() {
                *last ^= 1;
                assert_ne!(SmallBytes::from_slice(&a), SmallBytes::from_slice(&b), "{n}");
            }
            // A shorter prefix, padded with zeros inline, is still different.
            let mut z = a.clone();
            z.push(0);
            assert_ne!(SmallBytes::from_slice(&a), SmallBytes::from_slice(&z), "{n}");
        }
    }

    #[test]
    fn stable_hash_is_pinned() {
        // Changing this hash moves every key to another partition: a data
        // format change. This test pins it.
        assert_eq!(stable_hash(b""), mix64(0xcbf2_9ce4_8422_2325));
        assert_eq!(stable_hash(b"account"), 0x1bd9_57dd_771d_6ae4);
    }
}
