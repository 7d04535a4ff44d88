//! What a track carries, and the decoder configuration every output format needs.

use crate::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use crate::MediaKind;
use bytes::Bytes;

/// Video codecs Sluice carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VideoCodec {
    /// H.264 / AVC.
    H264,
    /// H.265 / HEVC.
    H265,
    /// AV1.
    Av1,
    /// VP9.
    Vp9,
    /// VP8.
    Vp8,
}

/// Audio codecs Sluice carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioCodec {
    /// AAC (any MPEG-4 audio object type), raw frames.
    Aac,
    /// Opus.
    Opus,
    /// MPEG-1/2 Layer III.
    Mp3,
    /// G.711 A-law.
    Pcma,
    /// G.711 µ-law.
    Pcmu,
}

/// The decoder configuration of a track, parsed from its sequence header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackConfig {
    /// H.264 with its `avcC` record.
    H264(AvcConfig),
    /// H.265 with its `hvcC` record.
    H265(HevcConfig),
    /// AV1 with its `av1C` record (opaque to Sluice).
    Av1 {
        /// The `av1C` box payload.
        record: Bytes,
    },
    /// VP9 with its `vpcC` record (opaque to Sluice).
    Vp9 {
        /// The `vpcC` box payload.
        record: Bytes,
    },
    /// VP8 with its `vpcC` record (opaque to Sluice).
    Vp8 {
        /// The `vpcC` box payload.
        record: Bytes,
    },
    /// AAC with its AudioSpecificConfig.
    Aac(AacConfig),
    /// Opus with its `OpusHead`.
    Opus(OpusConfig),
    /// MP3, which needs no configuration beyond what each frame says.
    Mp3 {
        /// Samples per second.
        sample_rate: u32,
        /// 1 or 2.
        channels: u8,
    },
    /// G.711 A-law, 8 kHz.
    Pcma {
        /// 1 or 2.
        channels: u8,
    },
    /// G.711 µ-law, 8 kHz.
    Pcmu {
        /// 1 or 2.
        channels: u8,
    },
}

/// One elementary stream of a live stream: what it is and how to decode it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Track {
    /// The decoder configuration.
    pub config: TrackConfig,
    /// The publisher sent this codec with a legacy FLV codec id (H.265 as id 12)
    /// rather than the Enhanced RTMP FourCC; FLV and RTMP players get the same form,
    /// since clients that understand one often do not understand the other.
    pub legacy_codec_id: bool,
}

impl Track {
    /// A track with the given configuration, in the standard (Enhanced RTMP) form.
    pub fn new(config: TrackConfig) -> Self {
        Track {
            config,
            legacy_codec_id: false,
        }
    }

    /// Video or audio.
    pub fn kind(&self) -> MediaKind {
        match self.config {
            TrackConfig::H264(_)
            | TrackConfig::H265(_)
            | TrackConfig::Av1 { .. }
            | TrackConfig::Vp9 { .. }
            | TrackConfig::Vp8 { .. } => MediaKind::Video,
            _ => MediaKind::Audio,
        }
    }

    /// The video codec, if this is a video track.
    pub fn video_codec(&self) -> Option<VideoCodec> {
        Some(match self.config {
            TrackConfig::H264(_) => VideoCodec::H264,
            TrackConfig::H265(_) => VideoCodec::H265,
            TrackConfig::Av1 { .. } => VideoCodec::Av1,
            TrackConfig::Vp9 { .. } => VideoCodec::Vp9,
            TrackConfig::Vp8 { .. } => VideoCodec::Vp8,
            _ => return None,
        })
    }

    /// The audio codec, if this is an audio track.
    pub fn audio_codec(&self) -> Option<AudioCodec> {
        Some(match self.config {
            TrackConfig::Aac(_) => AudioCodec::Aac,
            TrackConfig::Opus(_) => AudioCodec::Opus,
            TrackConfig::Mp3 { .. } => AudioCodec::Mp3,
            TrackConfig::Pcma { .. } => AudioCodec::Pcma,
            TrackConfig::Pcmu { .. } => AudioCodec::Pcmu,
            _ => return None,
        })
    }
}
