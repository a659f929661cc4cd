//! One log record: header, checksums, body.
//!
//! The first byte is a flag: bit 0 repairs the checksums first (so that
//! the body parser is reached). Checked on every input:
//! - nothing panics;
//! - a record that decodes, with a sound chain (previous epoch below its
//!   epoch, synced epoch not above it), encodes back to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use styx_storage::{fuzz, wal};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if flags & 1 == 1 {
        // The repair walks a segment: put the record where one starts.
        let mut segment = vec![0u8; 512];
        segment.extend_from_slice(&bytes);
        fuzz::repair_segment(&mut segment);
        bytes.copy_from_slice(&segment[512..]);
    }
    let _ = fuzz::wal_record(&bytes);
    if let Ok(Some((h, batch))) = wal::decode_record(&bytes)
        && h.prev_epoch < batch.epoch
        && h.synced_epoch <= h.prev_epoch
    {
        let mut again = vec![0u8; h.record_len() as usize];
        wal::encode_record(&batch, h.prev_epoch, h.synced_epoch, wal::body_len(&batch), &mut again);
        assert_eq!(&bytes[..again.len()], &again[..], "the encoding is canonical");
    }
});
