//! What the FLV serializers write, the parsers read back to the same value, however the
//! byte stream is split.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use sluice_media::flv::{
    audio_frame_header, parse_audio, parse_video, video_frame_header, write_audio_config,
    write_file_header, write_tag, write_video_config, write_video_end_of_sequence, AudioTag,
    FileHeader, Tag, TagReader, VideoTag, TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO,
};
use sluice_media::{AudioCodec, Track, TrackConfig, VideoCodec};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");

fn h264() -> Track {
    Track::new(TrackConfig::H264(
        AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("valid avcC"),
    ))
}

fn h265(legacy: bool) -> Track {
    Track {
        config: TrackConfig::H265(
            HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("valid hvcC"),
        ),
        legacy_codec_id: legacy,
    }
}

fn video_track() -> impl Strategy<Value = Track> {
    let record = proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from);
    prop_oneof![
        Just(h264()),
        Just(h265(true)),
        Just(h265(false)),
        record
            .clone()
            .prop_map(|record| Track::new(TrackConfig::Av1 { record })),
        record
            .clone()
            .prop_map(|record| Track::new(TrackConfig::Vp9 { record })),
        record.prop_map(|record| Track::new(TrackConfig::Vp8 { record })),
    ]
}

fn aac_track() -> impl Strategy<Value = Track> {
    // object type 1..=4, rate index 0..=12, channel configuration 1..=7.
    (1u8..=4, 0u8..=12, 1u8..=7).prop_map(|(ot, rate, ch)| {
        let asc = [(ot << 3) | (rate >> 1), ((rate & 1) << 7) | (ch << 3)];
        Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::copy_from_slice(&asc)).expect("valid ASC"),
        ))
    })
}

/// An MP3 track and a frame whose header says the same.
fn mp3_frame() -> impl Strategy<Value = (Track, Bytes)> {
    let version = prop_oneof![Just(0u8), Just(2u8), Just(3u8)];
    (
        version,
        0u8..3,
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(version, rate, mono, rest)| {
            let base = [44100, 48000, 32000][usize::from(rate)];
            let sample_rate = match version {
                3 => base,
                2 => base / 2,
                _ => base / 4,
            };
            let mut data = vec![0xff, 0xe0 | (version << 3) | 0x03, 0x90 | (rate << 2)];
            data.push(if mono { 0xc4 } else { 0x44 });
            data.extend(rest);
            let channels = if mono { 1 } else { 2 };
            let track = Track::new(TrackConfig::Mp3 {
                sample_rate,
                channels,
            });
            (track, Bytes::from(data))
        })
}

fn opus_track() -> impl Strategy<Value = Track> {
    (1u8..=2, any::<u16>(), any::<u32>()).prop_map(|(channels, pre_skip, rate)| {
        let mut head = b"OpusHead".to_vec();
        head.push(1);
        head.push(channels);
        head.extend_from_slice(&pre_skip.to_le_bytes());
        head.extend_from_slice(&rate.to_le_bytes());
        head.extend_from_slice(&[0, 0, 0]);
        Track::new(TrackConfig::Opus(
            OpusConfig::parse(Bytes::from(head)).expect("valid OpusHead"),
        ))
    })
}

fn g711_track() -> impl Strategy<Value = Track> {
    (any::<bool>(), 1u8..=2).prop_map(|(alaw, channels)| {
        Track::new(if alaw {
            TrackConfig::Pcma { channels }
        } else {
            TrackConfig::Pcmu { channels }
        })
    })
}

fn body(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::new();
    f(&mut out);
    out.freeze()
}

proptest! {
    #[test]
    fn tag_stream_survives_any_split(
        tags in proptest::collection::vec(
            (prop_oneof![Just(TAG_AUDIO), Just(TAG_VIDEO), Just(TAG_SCRIPT)],
             any::<u32>(),
             proptest::collection::vec(any::<u8>(), 0..300)),
            0..12),
        cuts in proptest::collection::vec(1usize..64, 1..40),
        has_audio: bool,
        has_video: bool,
    ) {
        let mut stream = BytesMut::new();
        write_file_header(&mut stream, has_audio, has_video);
        for (t, ts, b) in &tags {
            prop_assert!(write_tag(&mut stream, *t, *ts, b).is_ok());
        }
        let stream = stream.freeze();
        let mut reader = TagReader::new();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut pos = 0;
        let mut cut = cuts.iter().cycle();
        while pos < stream.len() {
            let n = (*cut.next().unwrap_or(&1)).min(stream.len() - pos);
            buf.extend_from_slice(&stream[pos..pos + n]);
            pos += n;
            while let Some(tag) = reader.read(&mut buf).expect("valid stream") {
                got.push(tag);
            }
        }
        let want: Vec<Tag> = tags
            .into_iter()
            .map(|(tag_type, timestamp_ms, b)| Tag { tag_type, timestamp_ms, body: Bytes::from(b) })
            .collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(reader.header(), Some(FileHeader { has_audio, has_video }));
        // Only the last PreviousTagSize is left.
        prop_assert_eq!(buf.len(), 4);
    }

    #[test]
    fn video_config_round_trips(track in video_track()) {
        let b = body(|out| write_video_config(out, &track).expect("video track"));
        prop_assert_eq!(parse_video(&b), Ok(VideoTag::Config(track)));
    }

    #[test]
    fn video_frame_round_trips(
        track in video_track(),
        keyframe: bool,
        cts in -(1i32 << 23)..(1 << 23),
        data in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let codec = track.video_codec().expect("video track");
        let cts_ms = if matches!(codec, VideoCodec::Av1 | VideoCodec::Vp9 | VideoCodec::Vp8) { 0 } else { cts };
        let b = body(|out| {
            video_frame_header(out, &track, keyframe, cts_ms).expect("in range");
            out.extend_from_slice(&data);
        });
        let want = VideoTag::Frame { codec, keyframe, cts_ms, data: Bytes::from(data) };
        prop_assert_eq!(parse_video(&b), Ok(want));
    }

    #[test]
    fn end_of_sequence_round_trips(track in video_track()) {
        let b = body(|out| write_video_end_of_sequence(out, &track).expect("video track"));
        prop_assert_eq!(parse_video(&b), Ok(VideoTag::EndOfSequence));
    }

    #[test]
    fn aac_and_opus_round_trip(
        track in prop_oneof![aac_track(), opus_track()],
        data in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let config = body(|out| assert_eq!(write_audio_config(out, &track), Ok(true)));
        prop_assert_eq!(parse_audio(&config), Ok(AudioTag::Config(track.clone())));
        let frame = body(|out| {
            audio_frame_header(out, &track).expect("audio track");
            out.extend_from_slice(&data);
        });
        let codec = track.audio_codec().expect("audio track");
        let want = AudioTag::Frame { codec, data: Bytes::from(data), implied: None };
        prop_assert_eq!(parse_audio(&frame), Ok(want));
    }

    #[test]
    fn mp3_and_g711_frames_imply_their_track(
        (track, data) in prop_oneof![
            mp3_frame(),
            (g711_track(), proptest::collection::vec(any::<u8>(), 0..200))
                .prop_map(|(t, d)| (t, Bytes::from(d))),
        ],
    ) {
        let config = body(|out| {
            let wrote = write_audio_config(out, &track);
            assert_eq!(wrote, Ok(false));
        });
        prop_assert!(config.is_empty());
        let frame = body(|out| {
            audio_frame_header(out, &track).expect("audio track");
            out.extend_from_slice(&data);
        });
        let codec = track.audio_codec().expect("audio track");
        let want = AudioTag::Frame { codec, data, implied: Some(track) };
        prop_assert_eq!(parse_audio(&frame), Ok(want));
    }
}

#[test]
fn extended_timestamps() {
    for ts in [0, (1 << 24) - 1, 1 << 24, 0x7fff_ffff, u32::MAX] {
        let mut stream = BytesMut::new();
        write_file_header(&mut stream, false, true);
        write_tag(&mut stream, TAG_VIDEO, ts, b"\x17\x02\x00\x00\x00").expect("small tag");
        let tag = TagReader::new().read(&mut stream).expect("valid");
        assert_eq!(tag.map(|t| t.timestamp_ms), Some(ts));
    }
}

#[test]
fn legacy_bytes_are_what_players_expect() {
    let b = body(|out| write_video_config(out, &h264()).expect("video"));
    assert_eq!(&b[..5], &[0x17, 0, 0, 0, 0]);
    assert_eq!(&b[5..], AVCC_720P);
    let b = body(|out| video_frame_header(out, &h264(), false, -40).expect("in range"));
    assert_eq!(&b[..], &[0x27, 1, 0xff, 0xff, 0xd8]);
    let b = body(|out| write_video_config(out, &h265(true)).expect("video"));
    assert_eq!(&b[..5], &[0x1c, 0, 0, 0, 0]);
    let b = body(|out| write_video_config(out, &h265(false)).expect("video"));
    assert_eq!(&b[..5], b"\x90hvc1");
    let b = body(|out| video_frame_header(out, &h265(false), true, 0).expect("in range"));
    assert_eq!(&b[..], b"\x93hvc1");
    let b = body(|out| video_frame_header(out, &h265(false), true, 80).expect("in range"));
    assert_eq!(&b[..], b"\x91hvc1\x00\x00\x50");
    let opus = Track::new(TrackConfig::Opus(OpusConfig::stereo_48k()));
    let b = body(|out| audio_frame_header(out, &opus).expect("audio"));
    assert_eq!(&b[..], b"\x91Opus");
    let pcmu = Track::new(TrackConfig::Pcmu { channels: 1 });
    let b = body(|out| audio_frame_header(out, &pcmu).expect("audio"));
    assert_eq!(&b[..], &[0x82]);
}

#[test]
fn enhanced_avc1_is_read_as_h264() {
    let mut b = b"\x90avc1".to_vec();
    b.extend_from_slice(AVCC_720P);
    assert_eq!(parse_video(&Bytes::from(b)), Ok(VideoTag::Config(h264())));
    let frame = Bytes::from_static(b"\x91avc1\xff\xff\xfe\x00\x00\x00\x01\x65");
    assert_eq!(
        parse_video(&frame),
        Ok(VideoTag::Frame {
            codec: VideoCodec::H264,
            keyframe: true,
            cts_ms: -2,
            data: frame.slice(8..)
        })
    );
}

#[test]
fn enhanced_mp4a_is_read_as_aac() {
    let config = Bytes::from_static(b"\x90mp4a\x11\x90");
    let Ok(AudioTag::Config(t)) = parse_audio(&config) else {
        panic!("not a config")
    };
    assert_eq!(t.audio_codec(), Some(AudioCodec::Aac));
    let frame = Bytes::from_static(b"\x91.mp3\xff\xfb\x94\x64");
    assert_eq!(
        parse_audio(&frame),
        Ok(AudioTag::Frame {
            codec: AudioCodec::Mp3,
            data: frame.slice(5..),
            implied: Some(Track::new(TrackConfig::Mp3 {
                sample_rate: 48000,
                channels: 2
            })),
        })
    );
}
