//! A recording's bytes (cut anywhere, boxes of any size) through the pull scanner the
//! loader drives: never a panic, never a read past what was asked, every step moving
//! forward, and a span only over bytes that are there.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_archive::fmp4::{self, MAX_MOOF_BYTES, MAX_MOOV_BYTES};
use sluice_archive::Fmp4Scan;

fuzz_target!(|data: &[u8]| {
    let mut scan = Fmp4Scan::new(data.len() as u64);
    let mut last = None;
    let mut steps = 0usize;
    while let Some(read) = scan.next_read() {
        assert!(read.len as u64 <= MAX_MOOV_BYTES.max(MAX_MOOF_BYTES));
        // Never backwards (a box's empty body is read where the next header starts).
        assert!(last.is_none_or(|l| read.offset >= l), "backwards");
        last = Some(read.offset);
        steps += 1;
        // Each box takes a header and at most one body read.
        assert!(steps <= 2 * (data.len() / 8) + 2);
        let start = (read.offset as usize).min(data.len());
        let end = start.saturating_add(read.len).min(data.len());
        if scan.feed(&data[start..end]).is_err() {
            break;
        }
    }
    if let Some(s) = scan.scanned(0) {
        assert!(s.complete_bytes <= data.len() as u64);
        assert!(s.fragments > 0);
    }
    let _ = fmp4::init_timescales(data);
    let _ = fmp4::first_traf(data);
});
