//! Which timescale and track id each track gets, and which tracks a container carries.
//!
//! Why a rule of its own: a player computes every sample time from the timescale, and
//! audio whose timescale is its sample rate has durations that are whole numbers of
//! samples (1024 per AAC frame), where 90 kHz would round them. Video keeps the
//! stream's own 90 kHz clock, which every protocol already converted to. MPEG-TS has
//! only the 90 kHz clock.

use super::Container;
use crate::ts::TsMuxer;
use crate::{MediaKind, Timestamp, Track, TrackConfig, CLOCK_HZ};

/// Track id of video in every output: fixed per kind, so a track that joins or leaves
/// never renumbers the other.
pub const VIDEO_TRACK_ID: u32 = 1;
/// Track id of audio in every output.
pub const AUDIO_TRACK_ID: u32 = 2;

/// The track id of a kind of track.
pub fn track_id(kind: MediaKind) -> u32 {
    match kind {
        MediaKind::Video => VIDEO_TRACK_ID,
        MediaKind::Audio => AUDIO_TRACK_ID,
    }
}

/// Ticks per second of `track`'s sample times in `container`: the sample rate for
/// audio in fMP4 (48 kHz for Opus, which always decodes at 48 kHz; 8 kHz for G.711),
/// [`CLOCK_HZ`] for video and for everything in MPEG-TS.
pub fn timescale(container: Container, track: &Track) -> u32 {
    if container == Container::Ts {
        return CLOCK_HZ;
    }
    match &track.config {
        TrackConfig::Aac(c) => c.sample_rate.max(1),
        TrackConfig::Opus(_) => 48_000,
        TrackConfig::Mp3 { sample_rate, .. } => (*sample_rate).max(1),
        TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => 8000,
        TrackConfig::H264(_) | TrackConfig::H265(_) | TrackConfig::Av1 { .. } => CLOCK_HZ,
        TrackConfig::Vp9 { .. } | TrackConfig::Vp8 { .. } => CLOCK_HZ,
    }
}

/// The duration assumed for a sample whose successor never came (the last one before a
/// flush), before the track has shown its own: as `(units, units per second)`. One
/// codec frame for audio (1024 samples of AAC, 20 ms of Opus or G.711, 1152 samples of
/// MP3); a 25 fps frame for video.
pub fn default_duration(track: &Track) -> (u32, u32) {
    match &track.config {
        TrackConfig::Aac(c) => (1024, c.sample_rate.max(1)),
        TrackConfig::Opus(_) => (960, 48_000),
        TrackConfig::Mp3 { sample_rate, .. } => (1152, (*sample_rate).max(1)),
        TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => (160, 8000),
        _ => (1, 25),
    }
}

/// [`default_duration`] in `timescale` ticks, at least 1.
pub(super) fn default_ticks(track: &Track, timescale: u32) -> u32 {
    let (units, per_second) = default_duration(track);
    let ticks = u64::from(units) * u64::from(timescale) / u64::from(per_second.max(1));
    u32::try_from(ticks.max(1)).unwrap_or(u32::MAX)
}

/// `ticks` of `timescale` in [`CLOCK_HZ`] ticks.
pub(super) fn to_clock(ticks: u32, timescale: u32) -> Timestamp {
    i64::from(ticks) * i64::from(CLOCK_HZ) / i64::from(timescale.max(1))
}

impl Container {
    /// Whether this container (as Sluice writes it) can carry `track`: H.264, H.265,
    /// AAC and Opus in fMP4; what [`TsMuxer`] accepts (H.264, H.265, AAC that ADTS
    /// describes, MP3) in MPEG-TS. Outputs leave other tracks out rather than the stream.
    pub fn carries(self, track: &Track) -> bool {
        match self {
            Container::Fmp4 => matches!(
                track.config,
                TrackConfig::H264(_)
                    | TrackConfig::H265(_)
                    | TrackConfig::Aac(_)
                    | TrackConfig::Opus(_)
            ),
            Container::Ts => match track.kind() {
                MediaKind::Video => TsMuxer::new(Some(track), None).is_ok(),
                MediaKind::Audio => TsMuxer::new(None, Some(track)).is_ok(),
            },
        }
    }

    /// The file name extension of a whole output: `mp4` or `ts`.
    pub fn extension(self) -> &'static str {
        match self {
            Container::Fmp4 => "mp4",
            Container::Ts => "ts",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{AacConfig, OpusConfig};
    use bytes::Bytes;

    #[test]
    fn audio_gets_its_sample_rate_in_fmp4_and_90khz_in_ts() {
        let aac = Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x12, 0x10])).expect("ASC"),
        ));
        let opus = Track::new(TrackConfig::Opus(OpusConfig::stereo_48k()));
        assert_eq!(timescale(Container::Fmp4, &aac), 44_100);
        assert_eq!(timescale(Container::Fmp4, &opus), 48_000);
        assert_eq!(timescale(Container::Ts, &aac), CLOCK_HZ);
        assert_eq!(default_ticks(&aac, 44_100), 1024);
        assert_eq!(default_ticks(&aac, CLOCK_HZ), 2089);
        assert_eq!(to_clock(1024, 48_000), 1920);
        assert!(Container::Fmp4.carries(&opus));
        assert!(!Container::Ts.carries(&opus));
        assert!(Container::Ts.carries(&aac));
    }
}
