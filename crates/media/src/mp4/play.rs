//! Playing a [`Movie`]: where to start for a time, the next sample in decode order, and
//! a sample as a [`Frame`].
//!
//! Why here and not in the server: the rules (start video at a keyframe, audio where
//! the video starts, interleave by decode time) are the same for every output, and they
//! are easy to test without a file or a socket.

use super::{Movie, Mp4Error};
use crate::codec::nal_units;
use crate::{Frame, MediaKind, Timestamp, TrackConfig};
use bytes::{BufMut, Bytes};

/// Most tracks a [`Position`] follows: [`parse_movie`](super::parse_movie) keeps one
/// video and one audio track.
const MAX_TRACKS: usize = 2;

/// Where playback of a [`Movie`] is: the next sample of each track. Made by
/// [`Movie::seek`] (or `Default`, the start of every track) and advanced by
/// [`Movie::next`]. Tracks beyond the first two are not followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    next: [usize; MAX_TRACKS],
}

impl Position {
    /// The index of the next sample of `track` (its sample count once it has ended);
    /// `None` for a track a position does not follow.
    pub fn sample(&self, track: usize) -> Option<usize> {
        self.next.get(track).copied()
    }
}

impl Movie {
    /// The earliest decode time of any sample, or 0 when none is earlier: subtracting
    /// it makes every timestamp non-negative (B-frames start decoding before 0), as
    /// outputs with unsigned times (RTMP, `tfdt`) need.
    pub fn negative_start(&self) -> Timestamp {
        self.tracks
            .iter()
            .filter_map(|t| t.samples.first())
            .map(|s| s.dts)
            .min()
            .unwrap_or(0)
            .min(0)
    }

    /// The index in [`Movie::tracks`] of the video track.
    pub fn video(&self) -> Option<usize> {
        self.tracks
            .iter()
            .position(|t| t.track.kind() == MediaKind::Video)
    }

    /// The index in [`Movie::tracks`] of the audio track.
    pub fn audio(&self) -> Option<usize> {
        self.tracks
            .iter()
            .position(|t| t.track.kind() == MediaKind::Audio)
    }

    /// Where to start playing at time `t` (90 kHz): video at the last keyframe presented
    /// at or before `t` (the first keyframe if none is); every other track at its first
    /// sample decoded at or after that keyframe's decode time (after `t` without video).
    /// A time past the end starts at the last keyframe.
    pub fn seek(&self, t: Timestamp) -> Position {
        let mut pos = Position::default();
        let video = self.video().filter(|&v| v < MAX_TRACKS);
        let mut start = t;
        if let Some(v) = video {
            let samples = self.tracks.get(v).map_or(&[][..], |t| &t.samples[..]);
            // Samples decoded after `t` are presented after it too (composition offsets
            // are not negative for keyframes in practice), so look before that point.
            let upto = samples.partition_point(|s| s.dts <= t);
            let at = samples
                .get(..upto)
                .and_then(|s| {
                    s.iter()
                        .rposition(|s| s.keyframe && s.dts.saturating_add(i64::from(s.cts)) <= t)
                })
                .or_else(|| samples.iter().position(|s| s.keyframe))
                .unwrap_or(0);
            if let Some(s) = samples.get(at) {
                start = s.dts;
            }
            if let Some(n) = pos.next.get_mut(v) {
                *n = at;
            }
        }
        for (i, track) in self.tracks.iter().enumerate().take(MAX_TRACKS) {
            if Some(i) != video {
                if let Some(n) = pos.next.get_mut(i) {
                    *n = track.samples.partition_point(|s| s.dts < start);
                }
            }
        }
        pos
    }

    /// The next sample in decode order across tracks (the lowest decode time, video first
    /// on ties) as (track index, sample index), advancing `pos`; `None` at the end.
    pub fn next(&self, pos: &mut Position) -> Option<(usize, usize)> {
        let (track, sample, _) = self.upcoming(pos)?;
        if let Some(n) = pos.next.get_mut(track) {
            *n = sample.saturating_add(1);
        }
        Some((track, sample))
    }

    /// The decode time (90 kHz) of the sample [`Movie::next`] would return.
    pub fn peek_dts(&self, pos: &Position) -> Option<Timestamp> {
        self.upcoming(pos).map(|(_, _, dts)| dts)
    }

    fn upcoming(&self, pos: &Position) -> Option<(usize, usize, Timestamp)> {
        let mut best: Option<(usize, usize, Timestamp)> = None;
        for (i, track) in self.tracks.iter().enumerate().take(MAX_TRACKS) {
            let Some((n, s)) = pos
                .next
                .get(i)
                .and_then(|&n| Some((n, track.samples.get(n)?)))
            else {
                continue;
            };
            // Strictly lower: on ties the earlier track (video) wins.
            if best.is_none_or(|(_, _, dts)| s.dts < dts) {
                best = Some((i, n, s.dts));
            }
        }
        best
    }

    /// Sample `sample` of track `track` as a frame whose payload is a slice of `file`,
    /// the bytes given to [`parse_movie`](super::parse_movie). H.264 and H.265 payloads
    /// are 4-byte length-prefixed NAL units; a file with 1- to 3-byte lengths is
    /// converted (copied), other payloads are never copied.
    ///
    /// Errors: no such track or sample; the sample is not inside `file`; a NAL length
    /// that runs past the sample (only checked when converting).
    pub fn frame(&self, file: &Bytes, track: usize, sample: usize) -> Result<Frame, Mp4Error> {
        let no_such = Mp4Error::NoSuchSample { track, sample };
        let t = self.tracks.get(track).ok_or(no_such.clone())?;
        let s = t.samples.get(sample).ok_or(no_such)?;
        let outside = Mp4Error::SampleOutsideFile {
            offset: s.offset,
            size: s.size,
            file_len: file.len() as u64,
        };
        let end = s
            .offset
            .checked_add(u64::from(s.size))
            .filter(|&end| end <= file.len() as u64)
            .ok_or(outside)?;
        // Both fit: `end` is at most `file.len()`.
        let payload = file.slice(s.offset as usize..end as usize);
        let payload = match &t.track.config {
            TrackConfig::H264(c) => four_byte_lengths(payload, c.nal_length_size)?,
            TrackConfig::H265(c) => four_byte_lengths(payload, c.nal_length_size)?,
            _ => payload,
        };
        Ok(Frame {
            kind: t.track.kind(),
            dts: s.dts,
            pts: s.dts.saturating_add(i64::from(s.cts)),
            keyframe: s.keyframe,
            payload,
        })
    }
}

/// Rewrites NAL units with `length_size`-byte length prefixes to 4-byte prefixes.
fn four_byte_lengths(payload: Bytes, length_size: u8) -> Result<Bytes, Mp4Error> {
    if length_size == 4 {
        return Ok(payload);
    }
    // Each unit takes at least 2 bytes with its prefix and gains at most 3.
    let mut out = Vec::with_capacity(payload.len().saturating_add(payload.len() / 2 * 3));
    for unit in nal_units(&payload, length_size) {
        let unit = unit.map_err(|_| Mp4Error::Malformed {
            what: "NAL unit length",
        })?;
        // A unit is shorter than the sample, whose size is a u32.
        out.put_u32(unit.len() as u32);
        out.extend_from_slice(&unit);
    }
    Ok(Bytes::from(out))
}
