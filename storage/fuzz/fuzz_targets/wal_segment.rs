//! A shard's log of one or two segments, read as recovery reads it: the
//! segment header, records at the alignment, the chain between them, torn
//! tails and corruption.
//!
//! The first byte is a flag: bit 0 repairs the checksums first; bit 1
//! splits the rest into two segments at the position the next two bytes
//! give (the second named 100 epochs after the first); bit 2 reads after
//! the first segment's first epoch (a snapshot covers it). Checked: nothing
//! panics, and a log read whole holds consecutive epochs.

#![no_main]

use libfuzzer_sys::fuzz_target;
use styx_storage::fuzz;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (bytes, second) = if flags & 2 == 2 && rest.len() >= 2 {
        let at = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (a, b) = rest[2..].split_at(at);
        (a.to_vec(), Some(b.to_vec()))
    } else {
        (rest.to_vec(), None)
    };
    let mut segments = Vec::new();
    let first = if bytes.len() >= 24 {
        u64::from_le_bytes(bytes[16..24].try_into().unwrap()).clamp(1, u64::MAX - 200)
    } else {
        1
    };
    for (i, mut b) in std::iter::once(bytes).chain(second).enumerate() {
        if flags & 1 == 1 {
            fuzz::repair_segment(&mut b);
        }
        segments.push((first + 100 * i as u64, b));
    }
    let after = if flags & 4 == 4 { first } else { first - 1 };
    if let Ok((batches, _)) = fuzz::wal_log(after, segments) {
        assert!(batches.windows(2).all(|w| w[0].epoch < w[1].epoch));
        assert!(batches.iter().all(|b| b.epoch > after));
    }
});
