//! Arbitrary text to the `Range:` (npt and clock) and `Scale:` parsers: never a panic,
//! and every range read survives format → parse unchanged (a clock range to the
//! millisecond it keeps).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_rtsp::{PlayRange, Scale};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(PlayRange::Clock(r)) = PlayRange::parse(text) {
        assert_eq!(PlayRange::parse(&r.to_string()), Ok(PlayRange::Clock(r)));
    }
    if let Ok(s) = Scale::parse(text) {
        assert_eq!(Scale::parse(&s.to_string()), Ok(s));
    }
});
