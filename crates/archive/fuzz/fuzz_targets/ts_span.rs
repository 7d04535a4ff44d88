//! MPEG-TS heads and tails (misaligned, cut, any PES headers): never a panic, and a
//! duration under the 33-bit PTS range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_archive::ts;

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |&b| usize::from(b) * data.len() / 256);
    let (head, tail) = data.split_at(cut);
    if let Some(ms) = ts::duration_ms(head, tail) {
        assert!((0..=((1i64 << 33) - 1) / 90).contains(&ms));
    }
    for pts in ts::pts_values(data) {
        assert!(pts < 1 << 33);
    }
});
