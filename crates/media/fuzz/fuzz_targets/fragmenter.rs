//! The fragment engine under a publisher gone wrong: any sequence of track changes,
//! frames (any timestamps, kinds, sizes, payload bytes), flushes and finishes gives
//! well-formed outputs and never a panic. The first byte picks the container and rules.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::codec::{AacConfig, AvcConfig};
use sluice_media::fragment::{Container, CutRules, Fragmenter, FragmenterConfig, Origin, Output};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};

fn video(level: u8) -> Track {
    let sps = Bytes::from(vec![
        0x67, 0x42, 0xc0, level, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8,
    ]);
    let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
    let config = AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("a valid avcC");
    Track::new(TrackConfig::H264(config))
}

fn audio() -> Track {
    let config = AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("a valid ASC");
    Track::new(TrackConfig::Aac(config))
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, mut ops)) = data.split_first() else {
        return;
    };
    let container = if setup & 1 == 0 {
        Container::Fmp4
    } else {
        Container::Ts
    };
    let mut f = Fragmenter::new(FragmenterConfig {
        container,
        rules: CutRules {
            fragment_ticks: 1 + i64::from(setup >> 4) * 9000,
            aligned: setup & 16 != 0,
            part_ticks: (setup & 2 != 0).then_some(3000),
            forced_cut_factor: (setup & 4 != 0).then_some(4),
            max_bytes: (setup & 8 != 0).then_some(4096),
        },
        origin: if setup & 2 == 0 {
            Origin::FirstFrame
        } else {
            Origin::At(0)
        },
        late_tracks_join: setup & 4 != 0,
    });
    let mut dts = 0i64;
    // Whether an output is open, and whether it has had its init.
    let mut init = false;
    while let [op, a, b, rest @ ..] = ops {
        ops = rest;
        match op % 8 {
            0 => {
                let v = (a & 1 != 0).then(|| video(if a & 4 != 0 { 0x1f } else { 0x1e }));
                let au = (a & 2 != 0).then(audio);
                let _ = f.set_tracks(v.as_ref(), au.as_ref());
            }
            1 => {
                let _ = f.flush();
            }
            2 => {
                let _ = f.finish((a & 1 != 0).then_some(dts));
            }
            _ => {
                let step = i64::from(i16::from_be_bytes([*a, *b]));
                dts = if op & 0x80 != 0 {
                    i64::from(*a) << 40
                } else {
                    dts.saturating_add(step)
                };
                let len = usize::from(*b);
                let payload: Vec<u8> = rest.iter().copied().take(len).collect();
                let frame = Frame {
                    kind: if op & 8 != 0 {
                        MediaKind::Video
                    } else {
                        MediaKind::Audio
                    },
                    dts,
                    pts: dts.saturating_add(i64::from(*a) * 100),
                    keyframe: op & 16 != 0,
                    payload: Bytes::from(payload),
                };
                let _ = f.push(&frame);
            }
        }
        while let Some(out) = f.poll_output() {
            match out {
                Output::Init(bytes) => {
                    assert!(!bytes.is_empty());
                    init = true;
                }
                Output::Piece {
                    bytes, duration, ..
                } => {
                    assert!(init, "a piece before any init");
                    assert!(duration >= 0);
                    match container {
                        Container::Fmp4 => assert_eq!(bytes.get(4..8), Some(&b"moof"[..])),
                        Container::Ts => assert_eq!(bytes.len() % 188, 0),
                    }
                }
                Output::Begin { .. } => assert!(init, "a fragment before any init"),
                Output::End { duration } => assert!(duration >= 0),
                Output::Finished { duration } => {
                    assert!(duration >= 0);
                    init = false;
                }
            }
        }
    }
});
