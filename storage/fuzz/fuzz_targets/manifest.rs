//! A manifest file: header, checksums, the rkyv archive of the manifest,
//! its invariants.
//!
//! The first byte is a flag: bit 0 repairs the length and the checksums
//! first (so that the rkyv validation and `Manifest::check` are reached).
//! Checked: nothing panics, and a manifest that decodes keeps its
//! invariants.

#![no_main]

use libfuzzer_sys::fuzz_target;
use styx_storage::fuzz;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if flags & 1 == 1 {
        fuzz::repair_manifest(&mut bytes);
    }
    if let Ok(Some(m)) = fuzz::manifest(&bytes) {
        m.check().expect("a decoded manifest keeps its invariants");
    }
});
