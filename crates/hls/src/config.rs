//! What a timeline is configured with, and the limits that bound it.
//!
//! Why: every input shows in `Timeline::new`'s signature (no global settings), and
//! every number a publisher or viewer can push on is capped by a named constant here.

use crate::HlsError;

/// The media clock of every duration given to this crate: 90 kHz, as in MPEG-TS.
pub const TICKS_PER_SECOND: i64 = 90_000;

/// Longest segment accepted: 60 s. Players assume segments of seconds and wait a
/// whole target duration between reloads; a longer "segment" is a publisher whose
/// keyframes stopped or whose timestamps jumped, and would inflate the target
/// duration for the rest of the stream.
pub const MAX_SEGMENT_TICKS: i64 = 60 * TICKS_PER_SECOND;

/// Most parts in one segment: 60 s of 60 ms parts. Bounds the memory of one segment.
pub const MAX_PARTS_PER_SEGMENT: u32 = 1000;

/// Largest playlist window and extra kept range, in segments: bounds the timeline's
/// memory and the playlist's size (a few dozen bytes per segment).
pub const MAX_WINDOW: usize = 1000;

/// Most segments encrypted with one key: a key served for longer than this many
/// segments protects little, and the kept range covers at most `2 * MAX_WINDOW`.
pub const MAX_KEY_ROTATION: u32 = 1000;

/// Whether and how segments are encrypted (RFC 8216 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encryption {
    /// Segments in the clear.
    #[default]
    None,
    /// `METHOD=AES-128`: each whole segment in AES-128-CBC with PKCS#7 padding, a new
    /// key every `rotation` segments (see `crypt`). Not with Low-Latency HLS: parts
    /// would each need encrypting apart from their segment.
    Aes128 {
        /// Segments per key, 1..=[`MAX_KEY_ROTATION`].
        rotation: u32,
    },
}

/// Which segment format a variant carries; it decides the playlist's tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// MPEG-TS segments (`EXT-X-VERSION:3`, no init segment, no parts).
    Ts,
    /// fMP4/CMAF segments with an init segment (`EXT-X-MAP`), optionally Low-Latency.
    Fmp4,
}

/// The settings of one variant's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HlsConfig {
    /// Target segment duration in ms (segments are cut at the first keyframe after
    /// it). The playlist's `EXT-X-TARGETDURATION` is never below it. 1..=60000.
    pub target_duration_ms: u32,
    /// Target part duration in ms for Low-Latency HLS; at most the target duration.
    pub part_duration_ms: u32,
    /// Completed segments listed in the playlist. 1..=[`MAX_WINDOW`].
    pub window: usize,
    /// Completed segments kept (and served) after they leave the playlist, for slow
    /// clients. 0..=[`MAX_WINDOW`].
    pub keep_extra: usize,
    /// Low-Latency HLS: parts, preload hints, blocking reload. fMP4 only.
    pub low_latency: bool,
    /// Segment encryption; [`Encryption::Aes128`] needs `low_latency` off for fMP4.
    pub encryption: Encryption,
}

impl Default for HlsConfig {
    fn default() -> Self {
        Self {
            target_duration_ms: 2000,
            part_duration_ms: 200,
            window: 6,
            keep_extra: 3,
            low_latency: true,
            encryption: Encryption::None,
        }
    }
}

impl HlsConfig {
    /// Checks every value against its range.
    pub fn validate(&self, variant: Variant) -> Result<(), HlsError> {
        let max_target_ms = MAX_SEGMENT_TICKS / (TICKS_PER_SECOND / 1000);
        if self.target_duration_ms == 0 || i64::from(self.target_duration_ms) > max_target_ms {
            return Err(HlsError::Config {
                what: "target_duration_ms must be 1..=60000",
            });
        }
        if self.part_duration_ms == 0 || self.part_duration_ms > self.target_duration_ms {
            return Err(HlsError::Config {
                what: "part_duration_ms must be 1..=target_duration_ms",
            });
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(HlsError::Config {
                what: "window must be 1..=1000",
            });
        }
        if self.keep_extra > MAX_WINDOW {
            return Err(HlsError::Config {
                what: "keep_extra must be 0..=1000",
            });
        }
        if self.low_latency && variant == Variant::Ts {
            return Err(HlsError::Config {
                what: "low_latency needs the fMP4 variant",
            });
        }
        if let Encryption::Aes128 { rotation } = self.encryption {
            if rotation == 0 || rotation > MAX_KEY_ROTATION {
                return Err(HlsError::Config {
                    what: "key rotation must be 1..=1000 segments",
                });
            }
            if self.low_latency {
                return Err(HlsError::Config {
                    what: "AES-128 encryption needs low_latency off (parts are not encrypted)",
                });
            }
        }
        Ok(())
    }
}
