//! The players' fMP4 scanner: any bytes, fed in arbitrary pieces, never panic, and the
//! samples found (up to an error) do not depend on the split.
//!
//! The first two bytes seed the piece lengths (1 to 400 bytes); the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_bench::fmp4_scan::{Fmp4Sample, Fmp4Scanner};

/// Feeds `data` in pieces whose lengths come from `seed` (whole when `seed` is 0);
/// returns the samples and whether the scanner gave up.
fn scan(data: &[u8], mut seed: u16) -> (Vec<Fmp4Sample>, bool) {
    let mut scanner = Fmp4Scanner::new();
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let len = if seed == 0 {
            rest.len()
        } else {
            // xorshift16
            seed ^= seed << 7;
            seed ^= seed >> 9;
            seed ^= seed << 8;
            1 + usize::from(seed) % 400
        };
        let (piece, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        if scanner.feed(piece, &mut |s| out.push(s)).is_err() {
            return (out, true);
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((seed, stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let whole = scan(stream, 0);
    let pieces = scan(stream, u16::from_be_bytes(*seed) | 1);
    assert_eq!(whole, pieces);
});
