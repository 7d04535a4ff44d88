//! The fMP4/CMAF writer, read back with an independent box parser (`mp4-atom`) and,
//! when it is installed, with ffprobe.
//!
//! Video tracks use the x264/x265 records in `data/` with synthetic slice NAL units;
//! audio is AAC-LC 44.1 kHz stereo or Opus with synthetic packets.

use crate::common::{ffprobe, ffprobe_present, temp_file};
use bytes::{Bytes, BytesMut};
use mp4_atom::{Codec, Decode, Ftyp, Mdat, Moof, Moov};
use proptest::prelude::*;
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use sluice_media::fmp4::{
    codec_string, write_fragment, write_init, Fmp4Error, InitTrack, Sample, TrackRun,
    SAMPLE_FLAGS_NON_SYNC, SAMPLE_FLAGS_SYNC,
};
use sluice_media::{Track, TrackConfig};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");
/// AAC-LC, 44.1 kHz, stereo.
const ASC_LC_44K: &[u8] = &[0x12, 0x10];

fn h264_track() -> Track {
    let c = AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC");
    Track::new(TrackConfig::H264(c))
}

fn h265_track() -> Track {
    let c = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC");
    Track::new(TrackConfig::H265(c))
}

fn aac_track(asc: &'static [u8]) -> Track {
    let c = AacConfig::parse(Bytes::from_static(asc)).expect("valid ASC");
    Track::new(TrackConfig::Aac(c))
}

fn opus_track() -> Track {
    Track::new(TrackConfig::Opus(OpusConfig::stereo_48k()))
}

/// A length-prefixed NAL unit: `header`, then `len` filler bytes.
fn nal_sample(header: &[u8], len: usize, seed: u8) -> Bytes {
    let mut n = header.to_vec();
    n.extend((0..len).map(|i| 0x80 | (i as u8).wrapping_add(seed)));
    let mut out = (n.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&n);
    Bytes::from(out)
}

fn video_samples(key: &[u8], other: &[u8], n: usize, bframes: bool) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            duration: 3000,
            // With B-frames: I P B B ... where P is shown after the two Bs.
            cts_offset: if bframes {
                [3000, 9000, 0, 0][i % 4] - 3000
            } else {
                0
            },
            keyframe: i == 0,
            data: nal_sample(if i == 0 { key } else { other }, 500 + i * 10, i as u8),
        })
        .collect()
}

fn audio_samples(n: usize) -> Vec<Sample> {
    (0..n)
        .map(|_| Sample {
            duration: 1024,
            cts_offset: 0,
            keyframe: true,
            // A silent AAC-LC stereo frame.
            data: Bytes::from_static(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]),
        })
        .collect()
}

/// Splits `bytes` into top-level boxes: (type, whole box).
fn top_level_boxes(mut bytes: &[u8]) -> Vec<([u8; 4], &[u8])> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let size = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        let kind: [u8; 4] = bytes[4..8].try_into().expect("4 bytes");
        assert!(size >= 8 && size <= bytes.len(), "box {kind:?} of {size}");
        out.push((kind, &bytes[..size]));
        bytes = &bytes[size..];
    }
    out
}

fn init(tracks: &[InitTrack<'_>]) -> BytesMut {
    let mut out = BytesMut::new();
    write_init(&mut out, tracks).expect("init segment");
    out
}

#[test]
fn h264_aac_init_segment() {
    let (v, a) = (h264_track(), aac_track(ASC_LC_44K));
    let out = init(&[
        InitTrack {
            track_id: 1,
            track: &v,
            timescale: 90_000,
        },
        InitTrack {
            track_id: 2,
            track: &a,
            timescale: 44_100,
        },
    ]);
    let boxes = top_level_boxes(&out);
    assert_eq!(
        boxes.iter().map(|b| b.0).collect::<Vec<_>>(),
        [*b"ftyp", *b"moov"]
    );
    let ftyp = Ftyp::decode(&mut &boxes[0].1[..]).expect("ftyp");
    assert_eq!(ftyp.major_brand, b"iso6".into());
    assert_eq!(ftyp.compatible_brands, vec![b"iso6".into(), b"cmfc".into()]);

    let moov = Moov::decode(&mut &boxes[1].1[..]).expect("moov");
    assert_eq!(moov.mvhd.timescale, 1000);
    assert_eq!(moov.mvhd.next_track_id, 3);
    let trex: Vec<u32> = moov
        .mvex
        .as_ref()
        .expect("mvex")
        .trex
        .iter()
        .map(|t| t.track_id)
        .collect();
    assert_eq!(trex, [1, 2]);
    assert_eq!(moov.trak.len(), 2);

    let TrackConfig::H264(avc) = &v.config else {
        unreachable!()
    };
    let vt = &moov.trak[0];
    assert_eq!(vt.tkhd.track_id, 1);
    assert_eq!(
        (vt.tkhd.width.integer(), vt.tkhd.height.integer()),
        (1280, 720)
    );
    assert_eq!(vt.mdia.mdhd.timescale, 90_000);
    assert_eq!(vt.mdia.mdhd.language, "und");
    assert_eq!(vt.mdia.hdlr.handler, b"vide".into());
    assert!(vt.mdia.minf.vmhd.is_some());
    let stbl = &vt.mdia.minf.stbl;
    assert!(stbl.stts.entries.is_empty());
    assert_eq!(stbl.stsd.codecs.len(), 1);
    let Codec::Avc1(avc1) = &stbl.stsd.codecs[0] else {
        panic!("not avc1: {:?}", stbl.stsd.codecs[0])
    };
    assert_eq!((avc1.visual.width, avc1.visual.height), (1280, 720));
    assert_eq!(avc1.avcc.avc_profile_indication, 100);
    assert_eq!(avc1.avcc.avc_level_indication, 31);
    assert_eq!(avc1.avcc.length_size, 4);
    assert_eq!(avc1.avcc.sequence_parameter_sets, vec![avc.sps[0].to_vec()]);
    assert_eq!(avc1.avcc.picture_parameter_sets, vec![avc.pps[0].to_vec()]);
    // The record travels byte for byte.
    let record_at = out
        .windows(AVCC_720P.len())
        .position(|w| w == AVCC_720P)
        .expect("avcC record present");
    assert_eq!(&out[record_at - 4..record_at], b"avcC");

    let at = &moov.trak[1];
    assert_eq!(at.tkhd.track_id, 2);
    assert_eq!(at.mdia.mdhd.timescale, 44_100);
    assert_eq!(at.mdia.hdlr.handler, b"soun".into());
    assert!(at.mdia.minf.smhd.is_some());
    let Codec::Mp4a(mp4a) = &at.mdia.minf.stbl.stsd.codecs[0] else {
        panic!("not mp4a")
    };
    assert_eq!(mp4a.audio.channel_count, 2);
    assert_eq!(mp4a.audio.sample_rate.integer(), 44_100);
    let dc = &mp4a.esds.es_desc.dec_config;
    assert_eq!((dc.object_type_indication, dc.stream_type), (0x40, 5));
    let ds = dc.dec_specific.as_ref().expect("AudioSpecificConfig");
    assert_eq!((ds.profile, ds.freq_index, ds.chan_conf), (2, 4, 2));
}

#[test]
fn h265_opus_init_segment() {
    let (v, a) = (h265_track(), opus_track());
    let out = init(&[
        InitTrack {
            track_id: 1,
            track: &v,
            timescale: 90_000,
        },
        InitTrack {
            track_id: 7,
            track: &a,
            timescale: 48_000,
        },
    ]);
    let boxes = top_level_boxes(&out);
    let moov = Moov::decode(&mut &boxes[1].1[..]).expect("moov");
    assert_eq!(moov.mvhd.next_track_id, 8);
    let Codec::Hvc1(hvc1) = &moov.trak[0].mdia.minf.stbl.stsd.codecs[0] else {
        panic!("not hvc1")
    };
    assert_eq!((hvc1.visual.width, hvc1.visual.height), (1920, 1080));
    assert_eq!(hvc1.hvcc.general_profile_idc, 1);
    assert_eq!(hvc1.hvcc.general_level_idc, 120);
    assert!(out.windows(HVCC_1080P.len()).any(|w| w == HVCC_1080P));

    let Codec::Opus(opus) = &moov.trak[1].mdia.minf.stbl.stsd.codecs[0] else {
        panic!("not Opus")
    };
    assert_eq!(opus.audio.channel_count, 2);
    assert_eq!(opus.audio.sample_rate.integer(), 48_000);
    assert_eq!(opus.dops.output_channel_count, 2);
    assert_eq!(opus.dops.pre_skip, 312);
    assert_eq!(opus.dops.input_sample_rate, 48_000);
    assert_eq!(opus.dops.output_gain, 0);
    assert!(opus.dops.channel_mapping.is_none());
}

#[test]
fn init_errors_write_nothing() {
    let v = h264_track();
    let mp3 = Track::new(TrackConfig::Mp3 {
        sample_rate: 44_100,
        channels: 2,
    });
    let vp8 = Track::new(TrackConfig::Vp8 {
        record: Bytes::from_static(&[1, 0, 0, 0]),
    });
    let t = |track_id, track, timescale| InitTrack {
        track_id,
        track,
        timescale,
    };
    let cases: Vec<(Vec<InitTrack<'_>>, Fmp4Error)> = vec![
        (
            vec![],
            Fmp4Error::InvalidInput {
                what: "init segment without tracks",
            },
        ),
        (
            vec![t(0, &v, 90_000)],
            Fmp4Error::InvalidInput { what: "track id 0" },
        ),
        (
            vec![t(1, &v, 0)],
            Fmp4Error::InvalidInput {
                what: "timescale 0",
            },
        ),
        (
            vec![t(1, &v, 90_000), t(1, &v, 90_000)],
            Fmp4Error::InvalidInput {
                what: "repeated track id",
            },
        ),
        (
            vec![t(1, &v, 90_000), t(2, &mp3, 44_100)],
            Fmp4Error::Unsupported { what: "MP3" },
        ),
        (
            vec![t(1, &vp8, 90_000)],
            Fmp4Error::Unsupported { what: "VP8" },
        ),
    ];
    for (tracks, expected) in cases {
        let mut out = BytesMut::from(&b"before"[..]);
        assert_eq!(write_init(&mut out, &tracks), Err(expected));
        assert_eq!(&out[..], b"before");
    }
}

#[test]
fn fragment_boxes_and_data_offsets() {
    let video = video_samples(&[0x65, 0x88], &[0x41, 0x9a], 8, true);
    let audio = audio_samples(11);
    let runs = [
        TrackRun {
            track_id: 1,
            base_decode_time: 180_000,
            samples: &video,
        },
        TrackRun {
            track_id: 2,
            base_decode_time: 88_200,
            samples: &audio,
        },
    ];
    let mut out = BytesMut::from(&b"earlier fragment bytes"[..]);
    let start = out.len();
    write_fragment(&mut out, 42, &runs).expect("fragment");
    let frag = &out[start..];
    let boxes = top_level_boxes(frag);
    assert_eq!(
        boxes.iter().map(|b| b.0).collect::<Vec<_>>(),
        [*b"moof", *b"mdat"]
    );
    let moof = Moof::decode(&mut &boxes[0].1[..]).expect("moof");
    let mdat = Mdat::decode(&mut &boxes[1].1[..]).expect("mdat");
    assert_eq!(moof.mfhd.sequence_number, 42);
    assert_eq!(moof.traf.len(), 2);
    let all: Vec<u8> = video
        .iter()
        .chain(&audio)
        .flat_map(|s| s.data.to_vec())
        .collect();
    assert_eq!(mdat.data, all, "mdat holds the samples in order");

    for (traf, run) in moof.traf.iter().zip(&runs) {
        assert_eq!(traf.tfhd.track_id, run.track_id);
        assert!(traf.tfhd.default_base_is_moof);
        assert_eq!(traf.tfhd.base_data_offset, None);
        assert_eq!(
            traf.tfdt.as_ref().map(|t| t.base_media_decode_time),
            Some(run.base_decode_time)
        );
        assert_eq!(traf.trun.len(), 1);
        let trun = &traf.trun[0];
        assert_eq!(trun.samples.len(), run.samples.len());
        // The data offset (from the moof) points at this run's first sample.
        let mut at = trun.data_offset.expect("data offset") as usize;
        for (entry, s) in trun.samples.iter().zip(run.samples) {
            assert_eq!(entry.duration, Some(s.duration));
            assert_eq!(entry.size, Some(s.data.len() as u32));
            let flags = if s.keyframe {
                SAMPLE_FLAGS_SYNC
            } else {
                SAMPLE_FLAGS_NON_SYNC
            };
            assert_eq!(entry.flags, Some(flags));
            let cts = run.samples.iter().any(|s| s.cts_offset != 0);
            assert_eq!(entry.cts, cts.then_some(i64::from(s.cts_offset)));
            assert_eq!(&frag[at..at + s.data.len()], &s.data[..]);
            at += s.data.len();
        }
    }
    // Negative composition offsets need trun version 1: byte 8 of the video trun.
    let trun_at = frag.windows(4).position(|w| w == b"trun").expect("trun");
    assert_eq!(frag[trun_at + 4], 1);
    let audio_trun = trun_at
        + 4
        + frag[trun_at + 4..]
            .windows(4)
            .position(|w| w == b"trun")
            .expect("second trun");
    assert_eq!(frag[audio_trun + 4], 0);
}

#[test]
fn empty_and_invalid_fragments() {
    let mut out = BytesMut::new();
    write_fragment(&mut out, 1, &[]).expect("moof with only mfhd");
    let moof = Moof::decode(&mut &out[..24]).expect("moof");
    assert!(moof.traf.is_empty());
    assert_eq!(&out[24..], b"\0\0\0\x08mdat");

    let s = audio_samples(1);
    let mut out = BytesMut::from(&b"x"[..]);
    let r = write_fragment(
        &mut out,
        1,
        &[TrackRun {
            track_id: 0,
            base_decode_time: 0,
            samples: &s,
        }],
    );
    assert_eq!(r, Err(Fmp4Error::InvalidInput { what: "track id 0" }));
    assert_eq!(&out[..], b"x");
}

#[test]
fn codec_strings() {
    assert_eq!(codec_string(&h264_track()).as_deref(), Some("avc1.64001f"));
    assert_eq!(
        codec_string(&h265_track()).as_deref(),
        Some("hvc1.1.6.L120.90")
    );
    assert_eq!(
        codec_string(&aac_track(ASC_LC_44K)).as_deref(),
        Some("mp4a.40.2")
    );
    // Explicit HE-AAC signalling: SBR (5) first.
    assert_eq!(
        codec_string(&aac_track(&[0x2b, 0x11, 0x88, 0x00])).as_deref(),
        Some("mp4a.40.5")
    );
    assert_eq!(codec_string(&opus_track()).as_deref(), Some("opus"));
    let av1 = Track::new(TrackConfig::Av1 {
        record: Bytes::new(),
    });
    assert_eq!(codec_string(&av1), None);
}

proptest! {
    #[test]
    fn any_runs_parse_back(
        runs in prop::collection::vec(
            (
                1u32..10,
                any::<u64>(),
                prop::collection::vec((any::<u32>(), any::<i32>(), any::<bool>(), 0usize..2000), 0..20),
            ),
            0..4,
        ),
        sequence in any::<u32>(),
    ) {
        let samples: Vec<Vec<Sample>> = runs
            .iter()
            .map(|(_, _, ss)| {
                ss.iter()
                    .map(|&(duration, cts_offset, keyframe, len)| Sample {
                        duration,
                        cts_offset,
                        keyframe,
                        data: Bytes::from(vec![len as u8; len]),
                    })
                    .collect()
            })
            .collect();
        let track_runs: Vec<TrackRun<'_>> = runs
            .iter()
            .zip(&samples)
            .map(|(&(track_id, base_decode_time, _), samples)| TrackRun {
                track_id,
                base_decode_time,
                samples,
            })
            .collect();
        let mut out = BytesMut::new();
        write_fragment(&mut out, sequence, &track_runs).expect("fragment");
        let boxes = top_level_boxes(&out);
        prop_assert_eq!(boxes.len(), 2);
        let moof = Moof::decode(&mut &boxes[0].1[..]).expect("moof");
        let mdat = Mdat::decode(&mut &boxes[1].1[..]).expect("mdat");
        prop_assert_eq!(moof.mfhd.sequence_number, sequence);
        prop_assert_eq!(moof.traf.len(), track_runs.len());
        let total: usize = samples.iter().flatten().map(|s| s.data.len()).sum();
        prop_assert_eq!(mdat.data.len(), total);
        for (traf, run) in moof.traf.iter().zip(&track_runs) {
            prop_assert_eq!(traf.tfhd.track_id, run.track_id);
            prop_assert_eq!(traf.tfdt.as_ref().map(|t| t.base_media_decode_time), Some(run.base_decode_time));
            let trun = &traf.trun[0];
            let mut at = trun.data_offset.expect("data offset") as usize;
            for (entry, s) in trun.samples.iter().zip(run.samples) {
                prop_assert_eq!(entry.duration, Some(s.duration));
                if let Some(cts) = entry.cts {
                    prop_assert_eq!(cts, i64::from(s.cts_offset));
                } else {
                    prop_assert_eq!(s.cts_offset, 0);
                }
                prop_assert_eq!(&out[at..at + s.data.len()], &s.data[..]);
                at += s.data.len();
            }
        }
    }
}

// ---- ffprobe ----

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffprobe")]
fn ffprobe_reads_init_and_fragments() {
    if !ffprobe_present() {
        return;
    }
    for (name, v, key, other, expected) in [
        (
            "h264.mp4",
            h264_track(),
            &[0x65, 0x88][..],
            &[0x41, 0x9a][..],
            "h264,1280,720",
        ),
        (
            "h265.mp4",
            h265_track(),
            &[0x26, 0x01, 0xa0][..],
            &[0x02, 0x01, 0xc0][..],
            "hevc,1920,1080",
        ),
    ] {
        let a = aac_track(ASC_LC_44K);
        let mut file = init(&[
            InitTrack {
                track_id: 1,
                track: &v,
                timescale: 90_000,
            },
            InitTrack {
                track_id: 2,
                track: &a,
                timescale: 44_100,
            },
        ]);
        // Two fragments of 12 frames (0.4 s at 30 fps) with B-frame timing, and the
        // audio that goes with them.
        let mut audio_time = 0u64;
        for (seq, frag) in (1u32..).zip(0..2u64) {
            let video = video_samples(key, other, 12, true);
            let audio = audio_samples(17);
            let runs = [
                TrackRun {
                    track_id: 1,
                    base_decode_time: frag * 12 * 3000,
                    samples: &video,
                },
                TrackRun {
                    track_id: 2,
                    base_decode_time: audio_time,
                    samples: &audio,
                },
            ];
            audio_time += 17 * 1024;
            write_fragment(&mut file, seq, &runs).expect("fragment");
        }
        let path = temp_file(name, &file);
        let streams = ffprobe(
            &path,
            &[
                "-show_entries",
                "stream=codec_name,width,height,sample_rate,channels",
            ],
        );
        let packets = ffprobe(
            &path,
            &["-show_entries", "packet=stream_index,pts,dts,flags"],
        );
        let _ = std::fs::remove_file(&path);

        let mut lines: Vec<&str> = streams
            .lines()
            .map(|l| l.trim().trim_end_matches(','))
            .filter(|l| !l.is_empty())
            .collect();
        lines.dedup();
        assert_eq!(lines.first().copied(), Some(expected), "{streams}");
        assert_eq!(lines.get(1).copied(), Some("aac,44100,2"), "{streams}");

        let video: Vec<(i64, i64, bool)> = packets
            .lines()
            .filter_map(|l| l.strip_prefix("0,"))
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (
                    f[0].parse().expect("pts"),
                    f[1].parse().expect("dts"),
                    f[2].starts_with('K'),
                )
            })
            .collect();
        assert_eq!(video.len(), 24, "{packets}");
        // ffmpeg moves presentation times later by the most negative composition offset
        // it has seen (its `dts_shift`), so compare against the first frame's.
        let shift = video[0].0;
        assert!(shift == 0 || shift == 3000, "{packets}");
        for (i, &(pts, dts, key)) in video.iter().enumerate() {
            let n = i as i64 % 12;
            let frag = i as i64 / 12;
            let expected_dts = (frag * 12 + n) * 3000;
            let cts = [3000, 9000, 0, 0][n as usize % 4] - 3000;
            assert_eq!(dts, expected_dts, "dts of {i}");
            assert_eq!(pts, expected_dts + cts + shift, "pts of {i}");
            assert_eq!(key, n == 0, "keyframe flag of {i}");
        }
        let audio = packets.lines().filter(|l| l.starts_with("1,")).count();
        assert_eq!(audio, 34, "{packets}");
    }
}
