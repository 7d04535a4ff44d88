//! Reads FLV files written by ffmpeg (remuxed from the clips of
//! `scripts/make-test-media.sh`) and checks that what we would write for their tracks
//! is byte for byte what ffmpeg wrote.
//!
//! The clips are taken from `SLUICE_TEST_MEDIA` when set, else made in the target
//! directory (see `crate::common::test_media`).

use bytes::BytesMut;
use sluice_media::codec::{h264_is_keyframe_nal, h264_nal_type, nal_units};
use sluice_media::flv::{
    audio_frame_header, parse_audio, parse_video, video_frame_header, write_audio_config,
    write_video_config, write_video_end_of_sequence, AudioTag, TagReader, VideoTag, TAG_AUDIO,
    TAG_SCRIPT, TAG_VIDEO,
};
use sluice_media::{Track, TrackConfig, VideoCodec};

fn media_file(name: &str) -> Vec<u8> {
    let path = crate::common::test_media(&[name]).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_h264_aac_720p_flv() {
    check_h264_aac_720p("h264_aac_720p.flv", false);
}

/// With B-frames, so composition times are nonzero.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffmpeg_h264_bframes_720p_flv() {
    check_h264_aac_720p("h264_bframes_720p.flv", true);
}

fn check_h264_aac_720p(name: &str, bframes: bool) {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let file = media_file(name);
    let mut reader = TagReader::new();
    let mut buf = BytesMut::new();
    let mut tags = Vec::new();
    for chunk in file.chunks(4096) {
        buf.extend_from_slice(chunk);
        while let Some(tag) = reader.read(&mut buf).expect("ffmpeg writes valid FLV") {
            tags.push(tag);
        }
    }
    assert_eq!(buf.len(), 4, "only the last PreviousTagSize is left");
    assert_eq!(tags.first().map(|t| t.tag_type), Some(TAG_SCRIPT));

    let (mut video, mut audio): (Option<Track>, Option<Track>) = (None, None);
    let (mut frames, mut keyframes, mut audio_frames) = (0, 0, 0);
    let mut nonzero_cts = 0;
    let mut last_ts = 0;
    let mut ended = false;
    for tag in &tags {
        match tag.tag_type {
            TAG_VIDEO => match parse_video(&tag.body).expect("valid video tag") {
                VideoTag::Config(t) => {
                    let TrackConfig::H264(c) = &t.config else {
                        panic!("not H.264")
                    };
                    assert_eq!((c.width, c.height), (1280, 720));
                    let mut out = BytesMut::new();
                    write_video_config(&mut out, &t).expect("video track");
                    assert_eq!(
                        out.freeze(),
                        tag.body,
                        "sequence header as ffmpeg writes it"
                    );
                    video = Some(t);
                }
                VideoTag::Frame {
                    codec,
                    keyframe,
                    cts_ms,
                    data,
                } => {
                    assert_eq!(codec, VideoCodec::H264);
                    assert!(!ended, "no frame after the end of sequence");
                    let track = video.as_ref().expect("config before frames");
                    let TrackConfig::H264(c) = &track.config else {
                        panic!("not H.264")
                    };
                    let types: Vec<u8> = nal_units(&data, c.nal_length_size)
                        .map(|n| h264_nal_type(&n.expect("whole NAL units")).unwrap_or(0))
                        .collect();
                    assert!(!types.is_empty());
                    assert_eq!(keyframe, types.iter().any(|&t| h264_is_keyframe_nal(t)));
                    if frames == 0 {
                        assert!(keyframe, "the first frame is a keyframe");
                    }
                    let mut out = BytesMut::new();
                    video_frame_header(&mut out, track, keyframe, cts_ms).expect("in range");
                    assert_eq!(&out[..], &tag.body[..5], "frame header as ffmpeg writes it");
                    assert!(tag.timestamp_ms >= last_ts);
                    last_ts = tag.timestamp_ms;
                    frames += 1;
                    nonzero_cts += usize::from(cts_ms != 0);
                    keyframes += usize::from(keyframe);
                }
                VideoTag::EndOfSequence => {
                    let track = video.as_ref().expect("config before the end");
                    let mut out = BytesMut::new();
                    write_video_end_of_sequence(&mut out, track).expect("video track");
                    assert_eq!(
                        out.freeze(),
                        tag.body,
                        "end of sequence as ffmpeg writes it"
                    );
                    ended = true;
                }
                VideoTag::Other => panic!("unexpected video tag"),
            },
            TAG_AUDIO => match parse_audio(&tag.body).expect("valid audio tag") {
                AudioTag::Config(t) => {
                    let TrackConfig::Aac(c) = &t.config else {
                        panic!("not AAC")
                    };
                    assert_eq!((c.object_type, c.sample_rate, c.channels), (2, 48000, 2));
                    let mut out = BytesMut::new();
                    assert_eq!(write_audio_config(&mut out, &t), Ok(true));
                    assert_eq!(out.freeze(), tag.body);
                    audio = Some(t);
                }
                AudioTag::Frame { data, implied, .. } => {
                    assert!(implied.is_none());
                    let track = audio.as_ref().expect("config before frames");
                    let mut out = BytesMut::new();
                    audio_frame_header(&mut out, track).expect("audio track");
                    out.extend_from_slice(&data);
                    assert_eq!(out.freeze(), tag.body);
                    audio_frames += 1;
                }
                AudioTag::Other => panic!("unexpected audio tag"),
            },
            _ => {}
        }
    }
    assert!(frames >= 25, "{frames} video frames");
    assert!(keyframes >= 1);
    assert!(ended, "ffmpeg ends the sequence");
    assert_eq!(
        nonzero_cts > 0,
        bframes,
        "{nonzero_cts} frames with a composition offset"
    );
    assert!(audio_frames >= 40, "{audio_frames} audio frames");
}
