//! A publisher's AAC: any AudioSpecificConfig, then any access units at any times,
//! through decoder, resampler and encoder without a panic, and with bounded output.
//!
//! Input: a length byte and that many bytes of AudioSpecificConfig, then frames, each
//! a big-endian u16 whose top bit says "jump in time" and whose rest is the length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_transcode::AacToOpus;

fuzz_target!(|data: &[u8]| {
    let Some((&asc_len, rest)) = data.split_first() else {
        return;
    };
    let asc_len = usize::from(asc_len % 8).min(rest.len());
    let (asc, mut rest) = rest.split_at(asc_len);
    let Ok(mut t) = AacToOpus::new(asc) else {
        return;
    };
    let mut pts = 0i64;
    let mut made = 0usize;
    while rest.len() >= 2 {
        let word = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(word & 0x7fff).min(rest.len() - 2);
        let frame = &rest[2..2 + len];
        rest = &rest[2 + len..];
        pts += if word & 0x8000 != 0 { 900_000 } else { 1920 };
        let _ = t.push(frame, pts);
        while let Some(f) = t.pop() {
            assert!(f.data.len() <= 1500);
            made += 1;
        }
    }
    // 1024 samples in at 8 kHz or more make at most seven 960-sample frames at 48 kHz.
    assert!(made <= 7 * (data.len() / 2 + 1));
});
