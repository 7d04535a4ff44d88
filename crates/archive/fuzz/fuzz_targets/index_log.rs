//! Index logs as a crash or a bad disk leaves them: never a panic; what is read back
//! is bounded by the input, stops at the first bad record, and compacts to a log that
//! reads back the same spans.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_archive::log::{self, HEADER_LEN, RECORD_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(read) = log::read(data) else {
        return;
    };
    assert!(read.valid_len as usize <= data.len());
    assert_eq!(read.valid_len as usize, HEADER_LEN + read.records * RECORD_LEN);
    assert!(read.spans.len() <= read.records);
    let again = log::read(&log::compacted(&read.spans)).expect("a compacted log reads");
    assert_eq!(again.spans, read.spans);
    assert!(!again.torn);
});
