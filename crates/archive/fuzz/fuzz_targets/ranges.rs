//! Playback URLs' `NAME@FROM..TO`: never a panic; a range with both ends is not empty;
//! a split key puts back together.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_archive::range;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((key, rest)) = range::split_key(text) {
        assert_eq!(format!("{key}@{rest}"), text);
    }
    for now in [0, 1_795_773_600_000, i64::MIN, i64::MAX] {
        if let Ok(r) = range::parse(text, now) {
            if let (Some(from), Some(to)) = (r.from, r.to) {
                assert!(from < to);
            }
        }
    }
});
