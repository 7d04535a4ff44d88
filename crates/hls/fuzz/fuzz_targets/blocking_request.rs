//! Arbitrary bytes as a playlist request's query: parsed, then asked of a live
//! timeline. Must never panic; a parsed request must render and answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_hls::{parse_blocking_request, HlsConfig, Timeline, Variant};

fuzz_target!(|data: &[u8]| {
    let query = String::from_utf8_lossy(data);
    let Ok(Some(request)) = parse_blocking_request(&query) else {
        return;
    };
    let Ok(mut timeline) = Timeline::new(HlsConfig::default(), Variant::Fmp4) else {
        return;
    };
    for _ in 0..3 {
        let _ = timeline.start_segment(false, 0);
        let _ = timeline.add_part(27_000, true);
        let _ = timeline.end_segment(180_000);
    }
    let _ = timeline.start_segment(false, 0);
    let _ = timeline.add_part(27_000, true);
    let _ = timeline.readiness(request);
    let _ = timeline.segment_state(request.msn);
    let _ = timeline.part_state(request.msn, request.part.unwrap_or(0));
});
