//! MPEG-TS demuxing: any bytes, pushed in arbitrary pieces, never panic; every frame
//! is within the size bounds, video frames are whole length-prefixed NAL units, a
//! track precedes the frames of its kind, and the outputs do not depend on the split.
//!
//! The first two bytes seed the piece lengths (1 to 400 bytes); the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::codec::nal_units;
use sluice_media::ts::{
    Demuxed, TsDemuxer, MAX_AUDIO_PES_LEN, MAX_SECTION_LEN as SCTE35_MAX_SECTION_LEN,
    MAX_VIDEO_PES_LEN,
};
use sluice_media::MediaKind;

/// Pushes `ts` in pieces whose lengths come from `seed` (whole when `seed` is 0),
/// draining after each push; returns the outputs and whether any were dropped.
fn demux(ts: &[u8], mut seed: u16) -> (Vec<Demuxed>, bool) {
    let mut d = TsDemuxer::new();
    let mut out = Vec::new();
    let mut rest = ts;
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
        d.push(piece);
        out.extend(std::iter::from_fn(|| d.poll()));
    }
    d.finish();
    out.extend(std::iter::from_fn(|| d.poll()));
    (out, d.stats().outputs_dropped > 0)
}

fuzz_target!(|data: &[u8]| {
    let Some((&[s0, s1], ts)) = data.split_first_chunk::<2>() else {
        return;
    };
    let seed = u16::from_be_bytes([s0, s1]);
    let (out, dropped) = demux(ts, seed);
    let mut announced = Vec::new();
    for o in &out {
        match o {
            Demuxed::Track(_, t) => announced.push(t.kind()),
            Demuxed::Cue(c) => assert!(c.info.raw.len() <= SCTE35_MAX_SECTION_LEN),
            Demuxed::Frame(f) => {
                assert!(announced.contains(&f.kind), "frame before its track");
                assert!(!f.payload.is_empty());
                match f.kind {
                    MediaKind::Audio => assert!(f.payload.len() <= MAX_AUDIO_PES_LEN),
                    MediaKind::Video => {
                        // 4-byte prefixes replace start codes of at least 3 bytes.
                        assert!(f.payload.len() <= MAX_VIDEO_PES_LEN / 3 * 4 + 4);
                        assert!(nal_units(&f.payload, 4).all(|n| n.is_ok()));
                    }
                }
            }
        }
    }
    if seed != 0 && !dropped {
        let (whole, whole_dropped) = demux(ts, 0);
        if !whole_dropped {
            assert!(whole == out, "outputs depend on the split");
        }
    }
});
