//! A snapshot file (base or delta): header, metadata, rkyv chunks, footer.
//!
//! The first byte is a flag: bit 0 repairs the checksums first (so that
//! the rkyv validation and the order checks are reached). Checked: nothing
//! panics, and the entries of a file that reads whole are in strict key
//! order.

#![no_main]

use libfuzzer_sys::fuzz_target;
use styx_storage::fuzz;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if flags & 1 == 1 {
        fuzz::repair_snapshot_file(&mut bytes);
    }
    if let Ok(entries) = fuzz::snapshot_file(bytes) {
        assert!(entries.windows(2).all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)));
    }
});
