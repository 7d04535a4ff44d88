//! The UDP output's pacer: any bytes as TS, pushed and polled on a clock that moves by
//! any steps, never panic; the queue stays bounded; a constant-rate datagram is always
//! whole; every packet pushed comes out once (with nulls and nothing else beside them).
//!
//! The first byte is the mode (low 3 bits: packets per datagram - 1, modulo 7; bit 3:
//! constant rate at 1 Mbit/s times the next byte + 1); then records of a 1-byte clock
//! step (milliseconds), a 2-byte big-endian length and that many bytes of TS.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::ts::{PaceConfig, Pacer, MAX_QUEUED};
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let packets = usize::from(mode & 7) % 7 + 1;
    let bitrate = if mode & 8 != 0 {
        let Some((&r, tail)) = rest.split_first() else {
            return;
        };
        rest = tail;
        Some(1_000_000 * (u64::from(r) + 1))
    } else {
        None
    };
    let mut pacer = Pacer::new(PaceConfig { packets, bitrate });
    let mut now = Instant::now();
    let mut pushed = 0u64;
    let mut out = Vec::new();
    while let Some((&[step, hi, lo], tail)) = rest.split_first_chunk::<3>() {
        let len = usize::from(u16::from_be_bytes([hi, lo])).min(tail.len());
        let (ts, tail) = tail.split_at(len);
        rest = tail;
        now += Duration::from_millis(u64::from(step));
        let before = pacer.stats().skipped_bytes;
        let taken = pacer.push(now, ts);
        assert!(taken <= ts.len());
        let skipped = pacer.stats().skipped_bytes - before;
        pushed += (taken as u64 - skipped) / 188;
        assert!(pacer.queued() <= MAX_QUEUED);
        // Bounded: a constant rate gives at most a few seconds' worth per step.
        for _ in 0..100_000 {
            out.clear();
            let Some(d) = pacer.poll_datagram(now, &mut out) else {
                break;
            };
            assert_eq!(out.len(), d.packets * 188);
            assert!(out.chunks(188).all(|p| p[0] == 0x47));
            if bitrate.is_some() {
                assert_eq!(d.packets, packets);
            }
            assert!(d.due <= now);
        }
    }
    pacer.finish();
    let s = pacer.stats();
    assert_eq!(s.packets + pacer.queued() as u64, pushed);
});
