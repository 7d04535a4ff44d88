//! Video tag bodies (= RTMP video message payloads), legacy and Enhanced RTMP.
//!
//! Legacy: `FrameType(4) CodecID(4)`, then for H.264 (7) and H.265 (12, the widely
//! deployed non-standard id) `AVCPacketType`, a signed 24-bit composition time and the
//! payload. Enhanced: `IsExHeader(1) FrameType(3) PacketType(4)`, optional ModEx and
//! multitrack wrappers, a FourCC, and for `avc1`/`hvc1` coded frames the composition time.
//!
//! Output forms: H.264 always legacy (every player reads it); H.265 legacy id 12 when
//! the publisher used it (`Track::legacy_codec_id`), otherwise Enhanced `hvc1`; AV1,
//! VP9 and VP8 Enhanced. Coded frames with a zero composition time use `CodedFramesX`.

use super::enhanced::{read_fourcc, skip_mod_ex};
use super::{put_si24, si24_at, u8_at, CodecTag, FlvError, CTS_RANGE};
use crate::codec::{AvcConfig, HevcConfig};
use crate::{MediaKind, Track, TrackConfig, VideoCodec};
use bytes::{BufMut, Bytes, BytesMut};

const CODEC_AVC: u8 = 7;
const CODEC_HEVC_LEGACY: u8 = 12;

const FRAME_KEY: u8 = 1;
const FRAME_INTER: u8 = 2;
const FRAME_COMMAND: u8 = 5;

const AVC_SEQUENCE_HEADER: u8 = 0;
const AVC_NALU: u8 = 1;
const AVC_END_OF_SEQUENCE: u8 = 2;

const EX_HEADER: u8 = 0x80;
const PACKET_SEQUENCE_START: u8 = 0;
const PACKET_CODED_FRAMES: u8 = 1;
const PACKET_SEQUENCE_END: u8 = 2;
const PACKET_CODED_FRAMES_X: u8 = 3;
const PACKET_METADATA: u8 = 4;
const PACKET_MPEG2TS_SEQUENCE_START: u8 = 5;
const PACKET_MULTITRACK: u8 = 6;

const FOURCC_AVC: [u8; 4] = *b"avc1";
const FOURCC_HEVC: [u8; 4] = *b"hvc1";
const FOURCC_AV1: [u8; 4] = *b"av01";
const FOURCC_VP9: [u8; 4] = *b"vp09";
const FOURCC_VP8: [u8; 4] = *b"vp08";

/// What a video tag body carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VideoTag {
    /// A sequence header: the track's decoder configuration.
    ///
    /// `legacy_codec_id` is true only for H.265 sent with legacy codec id 12. H.264 is
    /// always `false` whatever form it came in: Sluice writes it in the legacy form
    /// regardless, so the flag has nothing to choose for it.
    Config(Track),
    /// A coded picture.
    Frame {
        /// The codec named by the tag.
        codec: VideoCodec,
        /// `FrameType` 1 (a random access point).
        keyframe: bool,
        /// Composition time offset (pts - dts) in milliseconds.
        cts_ms: i32,
        /// The payload (length-prefixed NAL units for H.264/H.265), a slice of the body.
        data: Bytes,
    },
    /// End of sequence: the publisher ends this configuration.
    EndOfSequence,
    /// Something Sluice passes over: command frames (seek markers), Enhanced metadata
    /// (HDR colour info), MPEG-2 TS sequence starts, multitrack tracks other than 0.
    Other,
}

/// Parses a video tag body.
///
/// Errors: `Truncated`/`Malformed` for bad bytes, `UnsupportedCodec` for codecs Sluice
/// does not carry (Sorenson, VP6, `vvc1`, ...), `Unsupported` for many-track
/// multitrack, `Codec` for a bad `avcC`/`hvcC`.
pub fn parse_video(body: &Bytes) -> Result<VideoTag, FlvError> {
    let first = u8_at(body, 0, "video tag header")?;
    if first & EX_HEADER != 0 {
        return parse_enhanced(body, first);
    }
    let frame_type = first >> 4;
    let codec_id = first & 0x0f;
    if frame_type == FRAME_COMMAND {
        return Ok(VideoTag::Other);
    }
    let codec = match codec_id {
        CODEC_AVC => VideoCodec::H264,
        CODEC_HEVC_LEGACY => VideoCodec::H265,
        id => {
            return Err(FlvError::UnsupportedCodec {
                codec: CodecTag::Legacy {
                    kind: MediaKind::Video,
                    id,
                },
            })
        }
    };
    const WHAT: &str = "AVC video packet header";
    let packet_type = u8_at(body, 1, WHAT)?;
    let cts_ms = si24_at(body, 2, WHAT)?;
    let payload = body.slice(5..);
    match packet_type {
        AVC_SEQUENCE_HEADER => Ok(VideoTag::Config(config_track(codec, payload, true)?)),
        AVC_NALU => Ok(VideoTag::Frame {
            codec,
            keyframe: frame_type == FRAME_KEY,
            cts_ms,
            data: payload,
        }),
        AVC_END_OF_SEQUENCE => Ok(VideoTag::EndOfSequence),
        _ => Err(FlvError::Malformed {
            what: "AVCPacketType",
        }),
    }
}

/// The track a sequence header announces.
fn config_track(codec: VideoCodec, record: Bytes, legacy: bool) -> Result<Track, FlvError> {
    Ok(match codec {
        VideoCodec::H264 => Track::new(TrackConfig::H264(AvcConfig::parse(record)?)),
        VideoCodec::H265 => Track {
            config: TrackConfig::H265(HevcConfig::parse(record)?),
            legacy_codec_id: legacy,
        },
        VideoCodec::Av1 => Track::new(TrackConfig::Av1 { record }),
        VideoCodec::Vp9 => Track::new(TrackConfig::Vp9 { record }),
        VideoCodec::Vp8 => Track::new(TrackConfig::Vp8 { record }),
    })
}

fn parse_enhanced(body: &Bytes, first: u8) -> Result<VideoTag, FlvError> {
    let frame_type = (first >> 4) & 0x07;
    let mut pos = 1;
    let packet_type = skip_mod_ex(body, first & 0x0f, &mut pos)?;
    if packet_type != PACKET_METADATA && frame_type == FRAME_COMMAND {
        return Ok(VideoTag::Other);
    }
    let ex = read_fourcc(body, packet_type, PACKET_MULTITRACK, pos)?;
    let codec = match ex.fourcc {
        FOURCC_AVC => VideoCodec::H264,
        FOURCC_HEVC => VideoCodec::H265,
        FOURCC_AV1 => VideoCodec::Av1,
        FOURCC_VP9 => VideoCodec::Vp9,
        FOURCC_VP8 => VideoCodec::Vp8,
        cc => {
            return Err(FlvError::UnsupportedCodec {
                codec: CodecTag::FourCc(cc),
            })
        }
    };
    if !ex.main_track {
        return Ok(VideoTag::Other);
    }
    let at = ex.payload_at;
    let keyframe = frame_type == FRAME_KEY;
    match ex.packet_type {
        PACKET_SEQUENCE_START => Ok(VideoTag::Config(config_track(
            codec,
            body.slice(at.min(body.len())..),
            false,
        )?)),
        PACKET_CODED_FRAMES if matches!(codec, VideoCodec::H264 | VideoCodec::H265) => {
            let cts_ms = si24_at(body, at, "Enhanced RTMP composition time")?;
            Ok(VideoTag::Frame {
                codec,
                keyframe,
                cts_ms,
                data: body.slice(at + 3..),
            })
        }
        PACKET_CODED_FRAMES | PACKET_CODED_FRAMES_X => Ok(VideoTag::Frame {
            codec,
            keyframe,
            cts_ms: 0,
            data: body.slice(at.min(body.len())..),
        }),
        PACKET_SEQUENCE_END => Ok(VideoTag::EndOfSequence),
        PACKET_METADATA | PACKET_MPEG2TS_SEQUENCE_START => Ok(VideoTag::Other),
        _ => Err(FlvError::Malformed {
            what: "VideoPacketType",
        }),
    }
}

/// How a track's video tags are written.
enum Form {
    /// Legacy codec id.
    Legacy(u8),
    /// Enhanced RTMP FourCC, with composition times in coded frames or not.
    Enhanced { fourcc: [u8; 4], has_cts: bool },
}

fn form(track: &Track, what: &'static str) -> Result<Form, FlvError> {
    Ok(match track.config {
        TrackConfig::H264(_) => Form::Legacy(CODEC_AVC),
        TrackConfig::H265(_) if track.legacy_codec_id => Form::Legacy(CODEC_HEVC_LEGACY),
        TrackConfig::H265(_) => Form::Enhanced {
            fourcc: FOURCC_HEVC,
            has_cts: true,
        },
        TrackConfig::Av1 { .. } => Form::Enhanced {
            fourcc: FOURCC_AV1,
            has_cts: false,
        },
        TrackConfig::Vp9 { .. } => Form::Enhanced {
            fourcc: FOURCC_VP9,
            has_cts: false,
        },
        TrackConfig::Vp8 { .. } => Form::Enhanced {
            fourcc: FOURCC_VP8,
            has_cts: false,
        },
        _ => return Err(FlvError::WrongTrack { what }),
    })
}

/// Writes the sequence-header tag body of a video track: `[0x17, 0, 0, 0, 0] + avcC`
/// for H.264, `[0x1c, 0, 0, 0, 0] + hvcC` for legacy H.265, and an Enhanced
/// `SequenceStart` (`[0x90] + FourCC + record`) for Enhanced H.265, AV1, VP9 and VP8.
pub fn write_video_config(out: &mut BytesMut, track: &Track) -> Result<(), FlvError> {
    let record = match &track.config {
        TrackConfig::H264(c) => &c.record,
        TrackConfig::H265(c) => &c.record,
        TrackConfig::Av1 { record } | TrackConfig::Vp9 { record } | TrackConfig::Vp8 { record } => {
            record
        }
        _ => {
            return Err(FlvError::WrongTrack {
                what: "video sequence header",
            })
        }
    };
    match form(track, "video sequence header")? {
        Form::Legacy(id) => {
            out.extend_from_slice(&[(FRAME_KEY << 4) | id, AVC_SEQUENCE_HEADER, 0, 0, 0])
        }
        Form::Enhanced { fourcc, .. } => {
            out.put_u8(EX_HEADER | (FRAME_KEY << 4) | PACKET_SEQUENCE_START);
            out.extend_from_slice(&fourcc);
        }
    }
    out.extend_from_slice(record);
    Ok(())
}

/// Writes the bytes of a video tag body that precede a frame's payload: 5 bytes in the
/// legacy form (`FrameType|CodecID`, `AVCPacketType 1`, SI24 cts), 8 bytes for Enhanced
/// `hvc1` with a nonzero cts (`CodedFrames`), 5 otherwise (`CodedFramesX`, or
/// `CodedFrames` for AV1/VP9/VP8, whose `cts_ms` must be 0).
pub fn video_frame_header(
    out: &mut BytesMut,
    track: &Track,
    keyframe: bool,
    cts_ms: i32,
) -> Result<(), FlvError> {
    let form = form(track, "video frame")?;
    if !CTS_RANGE.contains(&cts_ms) {
        return Err(FlvError::TooLarge {
            what: "composition time offset",
            len: cts_ms.unsigned_abs() as usize,
            limit: 1 << 23,
        });
    }
    let frame_type = if keyframe { FRAME_KEY } else { FRAME_INTER };
    match form {
        Form::Legacy(id) => {
            out.extend_from_slice(&[(frame_type << 4) | id, AVC_NALU]);
            put_si24(out, cts_ms);
        }
        Form::Enhanced { fourcc, has_cts } => {
            if has_cts && cts_ms != 0 {
                out.put_u8(EX_HEADER | (frame_type << 4) | PACKET_CODED_FRAMES);
                out.extend_from_slice(&fourcc);
                put_si24(out, cts_ms);
            } else if has_cts {
                out.put_u8(EX_HEADER | (frame_type << 4) | PACKET_CODED_FRAMES_X);
                out.extend_from_slice(&fourcc);
            } else if cts_ms == 0 {
                out.put_u8(EX_HEADER | (frame_type << 4) | PACKET_CODED_FRAMES);
                out.extend_from_slice(&fourcc);
            } else {
                return Err(FlvError::Unsupported {
                    what: "composition time offset for AV1/VP9/VP8",
                });
            }
        }
    }
    Ok(())
}

/// Writes an end-of-sequence tag body for the track: legacy `AVCPacketType 2` or
/// Enhanced `SequenceEnd`.
pub fn write_video_end_of_sequence(out: &mut BytesMut, track: &Track) -> Result<(), FlvError> {
    match form(track, "video end of sequence")? {
        Form::Legacy(id) => {
            out.extend_from_slice(&[(FRAME_KEY << 4) | id, AVC_END_OF_SEQUENCE, 0, 0, 0])
        }
        Form::Enhanced { fourcc, .. } => {
            out.put_u8(EX_HEADER | (FRAME_KEY << 4) | PACKET_SEQUENCE_END);
            out.extend_from_slice(&fourcc);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn av1() -> Track {
        Track::new(TrackConfig::Av1 {
            record: Bytes::from_static(&[0x81, 0x08, 0x0c, 0x00]),
        })
    }

    #[test]
    fn av1_config_and_frame_bytes() {
        let mut out = BytesMut::new();
        assert_eq!(write_video_config(&mut out, &av1()), Ok(()));
        assert_eq!(&out[..], b"\x90av01\x81\x08\x0c\x00");
        out.clear();
        assert_eq!(video_frame_header(&mut out, &av1(), false, 0), Ok(()));
        assert_eq!(&out[..], b"\xa1av01");
        assert!(video_frame_header(&mut out, &av1(), false, 3).is_err());
    }

    #[test]
    fn vp8_is_parsed_and_written_like_vp9() {
        let record = Bytes::from_static(&[1, 0, 0, 0, 0, 10, 0x80, 2, 2, 2, 0, 0]);
        let start = Bytes::from([&b"\x90vp08"[..], &record[..]].concat());
        let track = Track::new(TrackConfig::Vp8 {
            record: record.clone(),
        });
        assert_eq!(parse_video(&start), Ok(VideoTag::Config(track.clone())));
        let mut out = BytesMut::new();
        assert_eq!(write_video_config(&mut out, &track), Ok(()));
        assert_eq!(&out[..], &start[..]);
        out.clear();
        assert_eq!(video_frame_header(&mut out, &track, true, 0), Ok(()));
        assert_eq!(&out[..], b"\x91vp08");
        let frame = Bytes::from_static(b"\x91vp08\x10\x02\x00");
        assert_eq!(
            parse_video(&frame),
            Ok(VideoTag::Frame {
                codec: VideoCodec::Vp8,
                keyframe: true,
                cts_ms: 0,
                data: Bytes::from_static(&[0x10, 0x02, 0x00]),
            })
        );
    }

    #[test]
    fn command_frames_and_metadata_are_other() {
        assert_eq!(
            parse_video(&Bytes::from_static(&[0x57, 0x00])),
            Ok(VideoTag::Other)
        );
        assert_eq!(
            parse_video(&Bytes::from_static(&[0xd0, 0x01])),
            Ok(VideoTag::Other)
        );
        let meta = Bytes::from_static(b"\x94hvc1\x02\x00\x09colorInfo");
        assert_eq!(parse_video(&meta), Ok(VideoTag::Other));
    }

    #[test]
    fn unknown_codecs_are_named() {
        let r = parse_video(&Bytes::from_static(b"\x92vvc1"));
        assert_eq!(
            r,
            Err(FlvError::UnsupportedCodec {
                codec: CodecTag::FourCc(*b"vvc1")
            })
        );
        assert!(matches!(
            parse_video(&Bytes::from_static(&[0x22, 0, 0])),
            Err(FlvError::UnsupportedCodec { .. })
        ));
    }

    #[test]
    fn audio_track_is_caller_error() {
        let t = Track::new(TrackConfig::Pcma { channels: 1 });
        let mut out = BytesMut::new();
        assert!(matches!(
            write_video_config(&mut out, &t),
            Err(FlvError::WrongTrack { .. })
        ));
        assert!(video_frame_header(&mut out, &t, true, 0).is_err());
        assert!(out.is_empty());
    }
}
