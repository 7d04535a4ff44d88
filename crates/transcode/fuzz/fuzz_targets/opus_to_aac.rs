//! A publisher's Opus: any channel count, then any packets at any times, through
//! libopus's decoder and the AAC encoder without a panic, and with bounded output.
//!
//! Input: a channel byte, then packets, each a big-endian u16 whose top two bits say
//! how the time moves (on by 20 ms, a lost packet's gap, back by one packet, a jump)
//! and whose rest is the length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_transcode::OpusToAac;

fuzz_target!(|data: &[u8]| {
    let Some((&channels, mut rest)) = data.split_first() else {
        return;
    };
    let Ok(mut t) = OpusToAac::new(usize::from(channels % 4)) else {
        return;
    };
    let mut pts = 0i64;
    let mut made = 0usize;
    while rest.len() >= 2 {
        let word = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(word & 0x3fff).min(rest.len() - 2);
        let packet = &rest[2..2 + len];
        rest = &rest[2 + len..];
        pts += match word >> 14 {
            0 => 1800,
            1 => 5400,
            2 => -1800,
            _ => 9_000_000,
        };
        let _ = t.push(packet, pts);
        while let Some(f) = t.pop() {
            assert!(f.data.len() <= 768 * 2);
            made += 1;
        }
    }
    // A packet, or a concealed gap of at most 200 ms, is at most 10,560 samples: at
    // most 11 frames of 1024.
    assert!(made <= 11 * (data.len() / 2 + 1));
});
