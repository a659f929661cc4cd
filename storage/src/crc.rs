//! CRC32C (Castagnoli), the checksum of every format in this crate.
//!
//! Chosen over CRC32 (IEEE) for its better error detection at the lengths
//! we checksum and because x86-64 and ARMv8 compute it in hardware (the
//! `crc32c` crate uses the instructions when present).

/// The CRC32C of `bytes`.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    ::crc32c::crc32c(bytes)
}

/// Extends `crc` (of some earlier bytes) with `bytes`.
#[inline]
pub(crate) fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(super::crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(super::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(super::crc32c_append(super::crc32c(b"1234"), b"56789"), 0xe306_9283);
    }
}
