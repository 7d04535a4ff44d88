//! Audio tag bodies (= RTMP audio message payloads), legacy and Enhanced RTMP.
//!
//! Legacy: `SoundFormat(4) SoundRate(2) SoundSize(1) SoundType(1)`, then for AAC an
//! `AACPacketType` (0 AudioSpecificConfig, 1 raw frame). Enhanced: `SoundFormat 9`,
//! `AudioPacketType(4)`, optional ModEx and multitrack wrappers, a FourCC.
//!
//! Output forms: AAC as `0xAF` (AAC, 44 kHz, 16-bit, stereo: what the FLV spec requires
//! for AAC and what ffmpeg and flv.js write), MP3 and G.711 legacy with the flags
//! ffmpeg writes, Opus Enhanced (the only form that exists for it).

use super::enhanced::{read_fourcc, skip_mod_ex};
use super::{u8_at, CodecTag, FlvError};
use crate::codec::{AacConfig, OpusConfig};
use crate::{AudioCodec, MediaKind, Track, TrackConfig};
use bytes::{BufMut, Bytes, BytesMut};

const FORMAT_MP3: u8 = 2;
const FORMAT_PCMA: u8 = 7;
const FORMAT_PCMU: u8 = 8;
const FORMAT_EX_HEADER: u8 = 9;
const FORMAT_AAC: u8 = 10;
const FORMAT_MP3_8K: u8 = 14;

const AAC_SEQUENCE_HEADER: u8 = 0;
const AAC_RAW: u8 = 1;
/// AAC, 44 kHz, 16-bit, stereo.
const AAC_FLAGS: u8 = (FORMAT_AAC << 4) | 0x0f;

const PACKET_SEQUENCE_START: u8 = 0;
const PACKET_CODED_FRAMES: u8 = 1;
const PACKET_SEQUENCE_END: u8 = 2;
const PACKET_MULTICHANNEL_CONFIG: u8 = 4;
const PACKET_MULTITRACK: u8 = 5;

const FOURCC_OPUS: [u8; 4] = *b"Opus";
const FOURCC_AAC: [u8; 4] = *b"mp4a";
const FOURCC_MP3: [u8; 4] = *b".mp3";

/// What an audio tag body carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudioTag {
    /// A sequence header: the track's decoder configuration (AAC, Opus).
    /// `legacy_codec_id` is always false: audio has one output form per codec.
    Config(Track),
    /// Coded audio.
    Frame {
        /// The codec named by the tag.
        codec: AudioCodec,
        /// The raw frame (AAC without ADTS, one Opus packet, MP3 frames, G.711 bytes),
        /// a slice of the body.
        data: Bytes,
        /// For codecs without a sequence header (MP3, G.711): the track this frame
        /// implies, from the MP3 frame header or the G.711 sound flags. `None` for AAC
        /// and Opus, and for an MP3 frame that does not start with a readable header
        /// (the legacy rate flags cannot say 48 kHz, so guessing from them would make
        /// the implied track flip between frames): keep the track you had.
        implied: Option<Track>,
    },
    /// Something Sluice passes over: Opus comment headers, sequence ends, multichannel
    /// configs, multitrack tracks other than 0.
    Other,
}

/// Parses an audio tag body.
///
/// Errors: `Truncated`/`Malformed` for bad bytes, `UnsupportedCodec` for formats Sluice
/// does not carry (PCM, ADPCM, Nellymoser, Speex, `fLaC`, `ac-3`, ...), `Unsupported`
/// for many-track multitrack, `Codec` for a bad AudioSpecificConfig or `OpusHead`.
pub fn parse_audio(body: &Bytes) -> Result<AudioTag, FlvError> {
    let flags = u8_at(body, 0, "audio tag header")?;
    let format = flags >> 4;
    let channels = (flags & 1) + 1;
    match format {
        FORMAT_AAC => {
            let packet_type = u8_at(body, 1, "AAC packet header")?;
            let payload = body.slice(2..);
            match packet_type {
                AAC_SEQUENCE_HEADER => Ok(AudioTag::Config(Track::new(TrackConfig::Aac(
                    AacConfig::parse(payload)?,
                )))),
                AAC_RAW => Ok(AudioTag::Frame {
                    codec: AudioCodec::Aac,
                    data: payload,
                    implied: None,
                }),
                _ => Err(FlvError::Malformed {
                    what: "AACPacketType",
                }),
            }
        }
        FORMAT_MP3 | FORMAT_MP3_8K => {
            let data = body.slice(1..);
            Ok(AudioTag::Frame {
                codec: AudioCodec::Mp3,
                implied: mp3_track(&data),
                data,
            })
        }
        FORMAT_PCMA => Ok(AudioTag::Frame {
            codec: AudioCodec::Pcma,
            data: body.slice(1..),
            implied: Some(Track::new(TrackConfig::Pcma { channels })),
        }),
        FORMAT_PCMU => Ok(AudioTag::Frame {
            codec: AudioCodec::Pcmu,
            data: body.slice(1..),
            implied: Some(Track::new(TrackConfig::Pcmu { channels })),
        }),
        FORMAT_EX_HEADER => parse_enhanced(body, flags & 0x0f),
        id => Err(FlvError::UnsupportedCodec {
            codec: CodecTag::Legacy {
                kind: MediaKind::Audio,
                id,
            },
        }),
    }
}

fn parse_enhanced(body: &Bytes, first_packet_type: u8) -> Result<AudioTag, FlvError> {
    let mut pos = 1;
    let packet_type = skip_mod_ex(body, first_packet_type, &mut pos)?;
    let ex = read_fourcc(body, packet_type, PACKET_MULTITRACK, pos)?;
    let codec = match ex.fourcc {
        FOURCC_OPUS => AudioCodec::Opus,
        FOURCC_AAC => AudioCodec::Aac,
        FOURCC_MP3 => AudioCodec::Mp3,
        cc => {
            return Err(FlvError::UnsupportedCodec {
                codec: CodecTag::FourCc(cc),
            })
        }
    };
    if !ex.main_track {
        return Ok(AudioTag::Other);
    }
    let payload = body.slice(ex.payload_at.min(body.len())..);
    match ex.packet_type {
        PACKET_SEQUENCE_START => match codec {
            AudioCodec::Aac => Ok(AudioTag::Config(Track::new(TrackConfig::Aac(
                AacConfig::parse(payload)?,
            )))),
            // A sequence start may carry the comment header instead; we need only the
            // identification header.
            AudioCodec::Opus if payload.starts_with(b"OpusHead") => Ok(AudioTag::Config(
                Track::new(TrackConfig::Opus(OpusConfig::parse(payload)?)),
            )),
            _ => Ok(AudioTag::Other),
        },
        PACKET_CODED_FRAMES => {
            let implied = match codec {
                AudioCodec::Mp3 => mp3_track(&payload),
                _ => None,
            };
            Ok(AudioTag::Frame {
                codec,
                data: payload,
                implied,
            })
        }
        PACKET_SEQUENCE_END | PACKET_MULTICHANNEL_CONFIG => Ok(AudioTag::Other),
        _ => Err(FlvError::Malformed {
            what: "AudioPacketType",
        }),
    }
}

/// The track an MP3 frame implies, if it starts with a readable frame header.
fn mp3_track(data: &[u8]) -> Option<Track> {
    let (sample_rate, channels) = mp3_header(data)?;
    Some(Track::new(TrackConfig::Mp3 {
        sample_rate,
        channels,
    }))
}

/// Sample rate and channel count from an MPEG audio frame header, if `data` starts
/// with a valid one.
fn mp3_header(data: &[u8]) -> Option<(u32, u8)> {
    let (&b1, &b2, &b3) = (data.get(1)?, data.get(2)?, data.get(3)?);
    if data.first() != Some(&0xff) || b1 & 0xe0 != 0xe0 {
        return None;
    }
    let version = (b1 >> 3) & 3; // 0: MPEG-2.5, 1: reserved, 2: MPEG-2, 3: MPEG-1
    let layer = (b1 >> 1) & 3;
    let rate_index = usize::from((b2 >> 2) & 3);
    if version == 1 || layer == 0 || rate_index == 3 || b2 >> 4 == 0x0f {
        return None;
    }
    let base = [44100, 48000, 32000].get(rate_index)?;
    let sample_rate = match version {
        3 => *base,
        2 => base / 2,
        _ => base / 4,
    };
    let channels = if b3 >> 6 == 3 { 1 } else { 2 };
    Some((sample_rate, channels))
}

/// The legacy flags byte ffmpeg writes for MP3 at this rate and channel count.
fn mp3_flags(sample_rate: u32, channels: u8) -> u8 {
    let stereo = u8::from(channels > 1);
    if sample_rate == 8000 {
        return (FORMAT_MP3_8K << 4) | 0x02 | stereo;
    }
    let rate = match sample_rate {
        r if r >= 32000 => 3,
        r if r >= 16000 => 2,
        r if r >= 11025 => 1,
        _ => 0,
    };
    (FORMAT_MP3 << 4) | (rate << 2) | 0x02 | stereo
}

/// Writes the sequence-header tag body of an audio track, if its codec has one:
/// `[0xAF, 0] + AudioSpecificConfig` for AAC, Enhanced `SequenceStart` with the
/// `OpusHead` for Opus. Returns whether anything was written (nothing for MP3, G.711).
pub fn write_audio_config(out: &mut BytesMut, track: &Track) -> Result<bool, FlvError> {
    match &track.config {
        TrackConfig::Aac(c) => {
            out.extend_from_slice(&[AAC_FLAGS, AAC_SEQUENCE_HEADER]);
            out.extend_from_slice(&c.asc);
            Ok(true)
        }
        TrackConfig::Opus(c) => {
            out.put_u8((FORMAT_EX_HEADER << 4) | PACKET_SEQUENCE_START);
            out.extend_from_slice(&FOURCC_OPUS);
            out.extend_from_slice(&c.head);
            Ok(true)
        }
        TrackConfig::Mp3 { .. } | TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => Ok(false),
        _ => Err(FlvError::WrongTrack {
            what: "audio sequence header",
        }),
    }
}

/// Writes the bytes of an audio tag body that precede a frame's payload: `[0xAF, 1]`
/// for AAC, `[0x91] + "Opus"` for Opus, one flags byte for MP3 and G.711.
pub fn audio_frame_header(out: &mut BytesMut, track: &Track) -> Result<(), FlvError> {
    match &track.config {
        TrackConfig::Aac(_) => out.extend_from_slice(&[AAC_FLAGS, AAC_RAW]),
        TrackConfig::Opus(_) => {
            out.put_u8((FORMAT_EX_HEADER << 4) | PACKET_CODED_FRAMES);
            out.extend_from_slice(&FOURCC_OPUS);
        }
        TrackConfig::Mp3 {
            sample_rate,
            channels,
        } => out.put_u8(mp3_flags(*sample_rate, *channels)),
        // G.711: rate bits 0 and 16-bit, as ffmpeg writes them; decoders assume 8 kHz.
        TrackConfig::Pcma { channels } => {
            out.put_u8((FORMAT_PCMA << 4) | 0x02 | u8::from(*channels > 1))
        }
        TrackConfig::Pcmu { channels } => {
            out.put_u8((FORMAT_PCMU << 4) | 0x02 | u8::from(*channels > 1))
        }
        _ => {
            return Err(FlvError::WrongTrack {
                what: "audio frame",
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aac_header_bytes_are_what_players_expect() {
        let asc = Bytes::from_static(&[0x11, 0x90]);
        let c = AacConfig::parse(asc.clone());
        let Ok(c) = c else { panic!("{c:?}") };
        let t = Track::new(TrackConfig::Aac(c));
        let mut out = BytesMut::new();
        assert_eq!(write_audio_config(&mut out, &t), Ok(true));
        assert_eq!(&out[..], &[0xaf, 0x00, 0x11, 0x90]);
        out.clear();
        assert_eq!(audio_frame_header(&mut out, &t), Ok(()));
        assert_eq!(&out[..], &[0xaf, 0x01]);
    }

    #[test]
    fn mp3_header_fields() {
        assert_eq!(mp3_header(&[0xff, 0xfb, 0x94, 0x64]), Some((48000, 2)));
        assert_eq!(mp3_header(&[0xff, 0xfb, 0x90, 0xc4]), Some((44100, 1)));
        assert_eq!(mp3_header(&[0xff, 0xf3, 0x94, 0x64]), Some((24000, 2)));
        assert_eq!(mp3_header(&[0xff, 0xe3, 0x94, 0x64]), Some((12000, 2)));
        assert_eq!(mp3_header(&[0xff, 0xfb, 0x9c, 0x64]), None);
        assert_eq!(mp3_header(&[0xff, 0xfb]), None);
    }

    #[test]
    fn mp3_without_readable_header_implies_nothing() {
        let body = Bytes::from_static(&[0x2e, 0x00, 0x00]);
        let implied = None;
        assert_eq!(
            parse_audio(&body),
            Ok(AudioTag::Frame {
                codec: AudioCodec::Mp3,
                data: body.slice(1..),
                implied
            })
        );
    }

    #[test]
    fn opus_comment_header_is_other() {
        let body = Bytes::from_static(b"\x90OpusOpusTags\0\0\0\0");
        assert_eq!(parse_audio(&body), Ok(AudioTag::Other));
    }

    #[test]
    fn unsupported_formats_are_named() {
        assert!(matches!(
            parse_audio(&Bytes::from_static(&[0xb6, 0])),
            Err(FlvError::UnsupportedCodec { .. })
        ));
        assert!(matches!(
            parse_audio(&Bytes::from_static(b"\x91fLaC")),
            Err(FlvError::UnsupportedCodec { .. })
        ));
    }
}
