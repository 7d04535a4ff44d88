//! One access unit of one track.
//!
//! Why a fixed clock: every protocol converts from its own timebase (RTMP's
//! milliseconds, RTP's 90 kHz or audio rate) once at ingest, and every output converts
//! once at egress, so the hub never reasons about timebases. 90 kHz is exact for
//! RTMP milliseconds and for MPEG-TS/RTP video, which are the hot conversions.

use bytes::Bytes;

/// Ticks per second of every [`Timestamp`].
pub const CLOCK_HZ: u32 = 90_000;

/// A presentation or decode time in [`CLOCK_HZ`] ticks. Signed, since composition
/// offsets and timestamp rebasing can go below zero.
pub type Timestamp = i64;

/// Whether a track carries pictures or sound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// Pictures.
    Video,
    /// Sound.
    Audio,
}

/// One access unit: a picture or a block of audio samples.
///
/// Video payloads are length-prefixed NAL units (4-byte big-endian lengths, as in
/// FLV and MP4) for H.264/H.265, and the codec's native frame for AV1/VP9. Audio
/// payloads are raw frames: AAC without ADTS, one Opus packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Video or audio.
    pub kind: MediaKind,
    /// Decode time.
    pub dts: Timestamp,
    /// Presentation time; equals `dts` unless the stream has B-frames.
    pub pts: Timestamp,
    /// A random access point: a decoder can start here given the track configuration.
    pub keyframe: bool,
    /// The coded data, shared and never copied per viewer.
    pub payload: Bytes,
}

impl Frame {
    /// Converts milliseconds (RTMP, FLV) to [`CLOCK_HZ`] ticks.
    pub fn ticks_from_ms(ms: i64) -> Timestamp {
        ms.saturating_mul(i64::from(CLOCK_HZ / 1000))
    }

    /// Converts [`CLOCK_HZ`] ticks to milliseconds, rounding toward negative infinity
    /// so that converting back and forth never moves a frame later.
    pub fn ms_from_ticks(ticks: Timestamp) -> i64 {
        ticks.div_euclid(i64::from(CLOCK_HZ / 1000))
    }

    /// The composition offset (`pts - dts`) in milliseconds, as FLV carries it.
    pub fn cts_ms(&self) -> i64 {
        Self::ms_from_ticks(self.pts) - Self::ms_from_ticks(self.dts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_round_trip_is_exact() {
        for ms in [-5_i64, 0, 1, 40, 1_000_000, 1 << 40] {
            assert_eq!(Frame::ms_from_ticks(Frame::ticks_from_ms(ms)), ms);
        }
    }
}
