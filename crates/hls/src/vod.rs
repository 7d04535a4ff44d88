//! HLS of a file on demand: segments planned from the demuxed sample index, a VOD
//! playlist (`EXT-X-PLAYLIST-TYPE:VOD`, `EXT-X-ENDLIST`), and each segment muxed
//! when it is first asked for.
//!
//! Why plan from the index: the playlist lists every segment with its duration
//! before any is made, so a player can seek anywhere at once; a segment is then just
//! the samples between two planned keyframes, muxed from the file's mapped bytes.
//! The cuts follow the live segmenters' rules ([`CutRules`]) and the bytes come from
//! the same [`Muxer`], so a file and a live stream of it segment alike.

use bytes::{Bytes, BytesMut};
use sluice_media::fragment::{Container, Cut, CutRules, FragmentError, Muxer, Progress};
use sluice_media::mp4::{Movie, Mp4Error, Sample};
use sluice_media::{Timestamp, CLOCK_HZ};
use std::fmt::Write;
use std::ops::Range;

/// Why a segment could not be made.
#[derive(Debug, thiserror::Error)]
pub enum VodError {
    /// No such segment in the plan.
    #[error("no segment {0}")]
    NoSegment(usize),
    /// The file's samples could not be read (a truncated file).
    #[error(transparent)]
    Mp4(#[from] Mp4Error),
    /// The muxer refused the tracks or the samples.
    #[error(transparent)]
    Mux(#[from] FragmentError),
    /// The segment would be larger than [`MAX_SEGMENT_BYTES`] (a file with keyframes
    /// far apart).
    #[error("segment {n} holds {bytes} bytes of samples, more than {MAX_SEGMENT_BYTES}")]
    TooLarge {
        /// The segment.
        n: usize,
        /// Its samples' bytes.
        bytes: u64,
    },
}

/// Most sample bytes one segment may hold: a segment is built whole in memory.
pub const MAX_SEGMENT_BYTES: u64 = 64 << 20;

/// One planned segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VodSegment {
    /// Decode time of the first sample (90 kHz, the movie's time).
    pub start: Timestamp,
    /// Until the next segment's start, or the end of the movie.
    pub duration: Timestamp,
    video: Range<usize>,
    audio: Range<usize>,
}

/// The segments of one file.
#[derive(Debug, Clone)]
pub struct VodPlan {
    /// In order, covering the whole movie.
    pub segments: Vec<VodSegment>,
    video: Option<usize>,
    audio: Option<usize>,
    /// The decode time that is time 0 of every segment: the earliest one (at most 0),
    /// so that none is negative (fMP4 `tfdt` is unsigned).
    shift: Timestamp,
}

/// Which playlist: MPEG-TS or fMP4 segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VodVariant {
    /// `.ts` segments, playlist version 3.
    Ts,
    /// `.m4s` segments behind an `EXT-X-MAP` init segment, version 7.
    Fmp4,
}

/// Whether a start point decoded at `dts` begins a segment after the one that began at
/// `last` (any does when there is none).
fn begins(rules: &CutRules, last: Option<Timestamp>, dts: Timestamp) -> bool {
    last.is_none_or(|t| {
        let progress = Progress {
            fragment: dts.saturating_sub(t),
            ..Progress::default()
        };
        rules.cut(&progress, true, true) == Some(Cut::Fragment)
    })
}

/// The decode time after the last sample of `range` in `samples`: the next sample's,
/// else as far after it as it is after the one before, else `fallback` after it.
fn end_of(samples: &[Sample], range: &Range<usize>, fallback: Timestamp) -> Option<Timestamp> {
    let last = range.end.checked_sub(1)?;
    let s = samples.get(last)?;
    Some(
        match (
            samples.get(range.end),
            last.checked_sub(1).and_then(|p| samples.get(p)),
        ) {
            (Some(next), _) => next.dts,
            (None, Some(prev)) => s.dts.saturating_add(s.dts.saturating_sub(prev.dts)),
            (None, None) => s.dts.saturating_add(fallback),
        },
    )
}

impl VodPlan {
    /// Cuts `movie` into segments of at least `target_ms` each, starting at video
    /// keyframes (or anywhere, for audio-only files).
    pub fn new(movie: &Movie, target_ms: u32) -> VodPlan {
        let target = Timestamp::from(target_ms.max(100)) * Timestamp::from(CLOCK_HZ) / 1000;
        let rules = CutRules::at_start_points(target);
        let video = movie.video();
        let audio = movie.audio();
        let shift = movie.negative_start();
        let samples = |track: Option<usize>| {
            track
                .and_then(|t| movie.tracks.get(t))
                .map_or(&[][..], |t| t.samples.as_slice())
        };
        let (video_samples, audio_samples) = (samples(video), samples(audio));
        // Segment starts, as (video sample index, decode time).
        let mut starts: Vec<(usize, Timestamp)> = Vec::new();
        match video {
            Some(_) => {
                for (i, s) in video_samples.iter().enumerate() {
                    if s.keyframe && begins(&rules, starts.last().map(|s| s.1), s.dts) {
                        starts.push((i, s.dts));
                    }
                }
            }
            // Samples before the first keyframe cannot be decoded: not listed.
            None => {
                for (i, s) in audio_samples.iter().enumerate() {
                    if begins(&rules, starts.last().map(|s| s.1), s.dts) {
                        starts.push((i, s.dts));
                    }
                }
            }
        }
        let end = movie.duration.max(starts.last().map_or(0, |s| s.1 + 1));
        let video_len = video_samples.len();
        let mut segments = Vec::with_capacity(starts.len());
        for (n, &(first, start)) in starts.iter().enumerate() {
            let next = starts.get(n + 1).copied();
            let stop = next.map_or(end, |s| s.1);
            let (video_range, audio_range) = if video.is_some() {
                let a0 = if n == 0 {
                    0
                } else {
                    audio_samples.partition_point(|s| s.dts < start)
                };
                let a1 = match next {
                    Some(_) => audio_samples.partition_point(|s| s.dts < stop),
                    None => audio_samples.len(),
                };
                (first..next.map_or(video_len, |s| s.0), a0..a1)
            } else {
                (0..0, first..next.map_or(audio_samples.len(), |s| s.0))
            };
            segments.push(VodSegment {
                start,
                duration: (stop - start).max(1),
                video: video_range,
                audio: audio_range,
            });
        }
        VodPlan {
            segments,
            video,
            audio,
            shift,
        }
    }

    /// The playlist. Segment URIs are `{prefix}{tag}-{n}.ts` or `.m4s`, the init
    /// segment `{prefix}{tag}-init.mp4`.
    pub fn playlist(&self, variant: VodVariant, prefix: &str, tag: &str) -> String {
        let longest = self.segments.iter().map(|s| s.duration).max().unwrap_or(0);
        let target = (longest + Timestamp::from(CLOCK_HZ) - 1) / Timestamp::from(CLOCK_HZ);
        let mut out = String::with_capacity(128 + self.segments.len() * 40);
        let version = match variant {
            VodVariant::Ts => 3,
            VodVariant::Fmp4 => 7,
        };
        let _ = write!(
            out,
            "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{}\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n",
            target.max(1)
        );
        let ext = match variant {
            VodVariant::Ts => "ts",
            VodVariant::Fmp4 => {
                let _ = writeln!(out, "#EXT-X-MAP:URI=\"{prefix}{tag}-init.mp4\"");
                "m4s"
            }
        };
        for (n, s) in self.segments.iter().enumerate() {
            let ms = s.duration * 1000 / Timestamp::from(CLOCK_HZ);
            let _ = write!(
                out,
                "#EXTINF:{}.{:03},\n{prefix}{tag}-{n}.{ext}\n",
                ms / 1000,
                ms % 1000
            );
        }
        out.push_str("#EXT-X-ENDLIST\n");
        out
    }

    /// The decode time that is 0 in segments (the movie's earliest, at most 0).
    pub fn shift(&self) -> Timestamp {
        self.shift
    }

    /// The decode time of the plan's first segment (the file's first keyframe).
    pub fn first_start(&self) -> Option<Timestamp> {
        self.segments.first().map(|s| s.start)
    }

    /// The span of decode times the plan's segments cover, from the first one's start.
    pub fn duration(&self) -> Timestamp {
        self.segments.iter().map(|s| s.duration).sum()
    }

    /// The segments, among the first `usable`, that overlap `[from, to)` (UTC ms) when
    /// the first segment starts at `start_ms`, and the UTC ms of the first of them: a
    /// segment's time is `start_ms` plus its decode time since the first segment's. The
    /// first segment chosen starts at or before `from` (at the keyframe before it).
    pub fn within(&self, usable: usize, start_ms: i64, from: i64, to: i64) -> (Range<usize>, i64) {
        let first = self.first_start().unwrap_or(0);
        let wall = |t: Timestamp| {
            start_ms.saturating_add(
                t.saturating_sub(first).saturating_mul(1000) / Timestamp::from(CLOCK_HZ),
            )
        };
        let segments = self.segments.get(..usable).unwrap_or(&self.segments);
        let end = segments.partition_point(|s| wall(s.start) < to);
        let begin = segments
            .partition_point(|s| wall(s.start.saturating_add(s.duration)) <= from)
            .min(end);
        let at = segments.get(begin).map_or(start_ms, |s| wall(s.start));
        (begin..end, at)
    }

    /// Sample bytes of segments `range` (what a download of them holds, less headers).
    pub fn sample_bytes(&self, movie: &Movie, range: Range<usize>) -> u64 {
        let Some(segments) = self.segments.get(range) else {
            return 0;
        };
        let bytes = |track: Option<usize>, r: &Range<usize>| {
            track
                .and_then(|t| movie.tracks.get(t))
                .and_then(|t| t.samples.get(r.clone()))
                .map_or(0, |s| s.iter().map(|s| u64::from(s.size)).sum::<u64>())
        };
        segments
            .iter()
            .map(|s| bytes(self.video, &s.video) + bytes(self.audio, &s.audio))
            .sum()
    }

    /// Segment `n`, if it exists, its samples are in `movie` (a plan used with another
    /// movie than its own may name some that are not), and it is not too large to build.
    fn checked(&self, movie: &Movie, n: usize) -> Result<&VodSegment, VodError> {
        let seg = self.segments.get(n).ok_or(VodError::NoSegment(n))?;
        let mut bytes = 0u64;
        for (track, range) in [(self.video, &seg.video), (self.audio, &seg.audio)] {
            if let Some(t) = track {
                let samples = movie
                    .tracks
                    .get(t)
                    .and_then(|mt| mt.samples.get(range.clone()))
                    .ok_or(Mp4Error::NoSuchSample {
                        track: t,
                        sample: range.end.saturating_sub(1),
                    })?;
                bytes += samples.iter().map(|s| u64::from(s.size)).sum::<u64>();
            }
        }
        if bytes > MAX_SEGMENT_BYTES {
            return Err(VodError::TooLarge { n, bytes });
        }
        Ok(seg)
    }

    /// A muxer for the tracks of the plan that `container` carries, whose time 0 is
    /// the movie's earliest decode time.
    fn muxer(
        &self,
        movie: &Movie,
        container: Container,
        offset: Timestamp,
    ) -> Result<Muxer, VodError> {
        let track = |i: Option<usize>| {
            i.and_then(|i| movie.tracks.get(i))
                .map(|t| &t.track)
                .filter(|t| container.carries(t))
        };
        Ok(Muxer::new(
            container,
            track(self.video),
            track(self.audio),
            self.shift.saturating_sub(offset),
        )?)
    }

    /// The fMP4 init segment.
    pub fn init(&self, movie: &Movie) -> Result<Bytes, VodError> {
        let mut muxer = self.muxer(movie, Container::Fmp4, 0)?;
        let mut out = BytesMut::new();
        muxer.write_init(&mut out)?;
        Ok(out.freeze())
    }

    /// fMP4 segment `n`: one fragment with a run per track, numbered `n + 1`.
    pub fn fmp4_segment(&self, movie: &Movie, file: &Bytes, n: usize) -> Result<Bytes, VodError> {
        let sequence = u32::try_from(n + 1).unwrap_or(u32::MAX);
        self.fmp4_fragment(movie, file, n, sequence, 0)
    }

    /// Segment `n` as fragment `sequence` of a longer movie in which this file begins
    /// `offset` ticks in: decode times are the file's from its earliest, plus `offset`
    /// (a download stitched from several files).
    pub fn fmp4_fragment(
        &self,
        movie: &Movie,
        file: &Bytes,
        n: usize,
        sequence: u32,
        offset: Timestamp,
    ) -> Result<Bytes, VodError> {
        let seg = self.checked(movie, n)?;
        let mut muxer = self.muxer(movie, Container::Fmp4, offset)?;
        muxer.set_sequence(sequence);
        for (index, range) in [(self.video, &seg.video), (self.audio, &seg.audio)] {
            let Some(t) = index else { continue };
            let track = movie.tracks.get(t).ok_or(Mp4Error::NoSuchSample {
                track: t,
                sample: range.start,
            })?;
            let kind = track.track.kind();
            if muxer.track(kind).is_none() {
                continue;
            }
            for i in range.clone() {
                muxer.take(&movie.frame(file, t, i)?);
            }
            if let Some(end) = end_of(&track.samples, range, seg.duration) {
                muxer.end_sample(kind, end);
            }
        }
        let mut out = BytesMut::new();
        muxer.write_fragment(&mut out)?;
        Ok(out.freeze())
    }

    /// MPEG-TS segment `n`: tables, then every sample in decode order.
    pub fn ts_segment(&self, movie: &Movie, file: &Bytes, n: usize) -> Result<Bytes, VodError> {
        self.ts_segment_at(movie, file, n, 0)
    }

    /// [`VodPlan::ts_segment`] with decode times from the file's earliest plus `offset`
    /// (times past 2^33 wrap, as MPEG-TS times do).
    pub fn ts_segment_at(
        &self,
        movie: &Movie,
        file: &Bytes,
        n: usize,
        offset: Timestamp,
    ) -> Result<Bytes, VodError> {
        let seg = self.checked(movie, n)?;
        let mut muxer = self.muxer(movie, Container::Ts, offset)?;
        let (mut v, mut a) = (seg.video.clone(), seg.audio.clone());
        // `checked` found every sample of both ranges in the movie.
        let dts = |t: Option<usize>, i: usize| {
            let track = movie.tracks.get(t?)?;
            track.samples.get(i).map(|s| s.dts)
        };
        loop {
            let vd = if v.is_empty() {
                None
            } else {
                dts(self.video, v.start)
            };
            let ad = if a.is_empty() {
                None
            } else {
                dts(self.audio, a.start)
            };
            let (t, i) = match (vd, ad) {
                (Some(x), Some(y)) if y < x => (self.audio, a.next()),
                (Some(_), _) => (self.video, v.next()),
                (None, Some(_)) => (self.audio, a.next()),
                (None, None) => break,
            };
            let (Some(t), Some(i)) = (t, i) else { break };
            muxer.take(&movie.frame(file, t, i)?);
        }
        let mut out = BytesMut::new();
        muxer.write_fragment(&mut out)?;
        Ok(out.freeze())
    }
}

/// One file's share of a playlist stitched from several files: segments `segments` of
/// its plan, under URIs `{base}-{n}.ts` or `.m4s` with `n` the segment's number in the
/// file's plan, and the init segment `{base}-init.mp4`.
#[derive(Debug, Clone)]
pub struct RangePart<'a> {
    /// The URI of the file's objects, less `-N.ext`.
    pub base: String,
    /// The plan of the whole file.
    pub plan: &'a VodPlan,
    /// The segments of the plan in the playlist.
    pub segments: Range<usize>,
    /// `EXT-X-PROGRAM-DATE-TIME` of the first one (RFC 3339).
    pub date_time: String,
}

/// A VOD playlist of the segments of several files, in order: each file's timeline is
/// its own, so every file after the first begins with `EXT-X-DISCONTINUITY` (and, for
/// fMP4, its own `EXT-X-MAP`), and each with its wall-clock time. Gaps between
/// recordings show only as the date times' jump.
pub fn range_playlist(variant: VodVariant, parts: &[RangePart<'_>]) -> String {
    fn listed<'p>(p: &RangePart<'p>) -> std::slice::Iter<'p, VodSegment> {
        p.plan
            .segments
            .get(p.segments.clone())
            .unwrap_or_default()
            .iter()
    }
    let longest = parts
        .iter()
        .flat_map(listed)
        .map(|s| s.duration)
        .max()
        .unwrap_or(0);
    let target = (longest + Timestamp::from(CLOCK_HZ) - 1) / Timestamp::from(CLOCK_HZ);
    let (version, ext) = match variant {
        VodVariant::Ts => (3, "ts"),
        VodVariant::Fmp4 => (7, "m4s"),
    };
    let mut out = String::with_capacity(160 + parts.len() * 120);
    let _ = write!(
        out,
        "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{}\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-DISCONTINUITY-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n",
        target.max(1)
    );
    for (i, part) in parts.iter().enumerate() {
        if listed(part).len() == 0 {
            continue;
        }
        if i > 0 {
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        if variant == VodVariant::Fmp4 {
            let _ = writeln!(out, "#EXT-X-MAP:URI=\"{}-init.mp4\"", part.base);
        }
        let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", part.date_time);
        for (n, s) in part.segments.clone().zip(listed(part)) {
            let ms = s.duration * 1000 / Timestamp::from(CLOCK_HZ);
            let _ = write!(
                out,
                "#EXTINF:{}.{:03},\n{}-{n}.{ext}\n",
                ms / 1000,
                ms % 1000,
                part.base
            );
        }
    }
    out.push_str("#EXT-X-ENDLIST\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::mp4::{MovieTrack, Sample};
    use sluice_media::{Track, TrackConfig};

    fn video() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ))
    }

    fn audio() -> Track {
        Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).unwrap(),
        ))
    }

    /// `seconds` of 25 fps video with a keyframe every `gop` frames, the first dts at
    /// `-3600` (one B-frame delay), and 48 kHz AAC; every sample is the same 9 bytes
    /// of the returned file (a 5-byte NAL behind its length, or AAC bytes).
    fn movie(seconds: i64, gop: usize, with_audio: bool) -> (Movie, Bytes) {
        let file = Bytes::from_static(&[0, 0, 0, 5, 0x65, 1, 2, 3, 4]);
        let sample = |dts, cts, keyframe| Sample {
            offset: 0,
            size: 9,
            dts,
            cts,
            keyframe,
        };
        let frames = seconds as usize * 25;
        let v: Vec<Sample> = (0..frames)
            .map(|n| sample(n as i64 * 3600 - 3600, 3600, n % gop == 0))
            .collect();
        let mut tracks = vec![MovieTrack {
            track_id: 1,
            track: video(),
            timescale: 90_000,
            samples: v,
        }];
        if with_audio {
            let count = seconds * 90_000 / 1920;
            tracks.push(MovieTrack {
                track_id: 2,
                track: audio(),
                timescale: 48_000,
                samples: (0..count).map(|n| sample(n * 1920, 0, true)).collect(),
            });
        }
        let movie = Movie {
            tracks,
            duration: seconds * 90_000,
            fragmented: false,
            skipped: Vec::new(),
        };
        (movie, file)
    }

    #[test]
    fn segments_start_at_keyframes_and_cover_every_sample() {
        let (movie, _) = movie(10, 25, true);
        let plan = VodPlan::new(&movie, 2000);
        // Keyframes every second, 2 s target: five segments of 50 frames.
        assert_eq!(plan.segments.len(), 5);
        let mut video = 0;
        let mut audio = 0;
        for (n, s) in plan.segments.iter().enumerate() {
            assert_eq!(s.video.start, n * 50);
            assert!(movie.tracks[0].samples[s.video.start].keyframe);
            video += s.video.len();
            audio += s.audio.len();
        }
        assert_eq!(video, movie.tracks[0].samples.len());
        assert_eq!(audio, movie.tracks[1].samples.len());
        let total: Timestamp = plan.segments.iter().map(|s| s.duration).sum();
        assert_eq!(
            total,
            movie.duration + 3600,
            "from the first dts to the end"
        );
    }

    #[test]
    fn playlist_lists_every_segment_and_ends() {
        let (movie, _) = movie(5, 25, true);
        let plan = VodPlan::new(&movie, 2000);
        let ts = plan.playlist(VodVariant::Ts, "clip.mp4/", "abc");
        assert!(ts.starts_with("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n"));
        assert!(ts.contains("#EXT-X-PLAYLIST-TYPE:VOD\n"));
        assert!(ts.contains("#EXTINF:2.000,\nclip.mp4/abc-0.ts\n"));
        assert!(ts.contains("clip.mp4/abc-2.ts\n#EXT-X-ENDLIST\n"));
        assert!(!ts.contains("EXT-X-MAP"));
        let fmp4 = plan.playlist(VodVariant::Fmp4, "", "abc");
        assert!(fmp4.contains("#EXT-X-MAP:URI=\"abc-init.mp4\"\n"));
        assert!(fmp4.contains("abc-1.m4s\n"));
        let parsed = m3u8_rs::parse_media_playlist_res(fmp4.as_bytes()).unwrap();
        assert!(parsed.end_list);
        assert_eq!(parsed.segments.len(), 3);
    }

    #[test]
    fn audio_only_files_are_cut_by_time() {
        let (mut movie, _) = movie(6, 25, true);
        movie.tracks.remove(0);
        let plan = VodPlan::new(&movie, 2000);
        assert_eq!(plan.segments.len(), 3);
        let total: usize = plan.segments.iter().map(|s| s.audio.len()).sum();
        assert_eq!(total, movie.tracks[0].samples.len());
    }

    #[test]
    fn segments_mux_from_the_file() {
        let (movie, file) = movie(4, 25, true);
        let plan = VodPlan::new(&movie, 2000);
        let init = plan.init(&movie).unwrap();
        assert_eq!(&init[4..8], b"ftyp");
        let seg = plan.fmp4_segment(&movie, &file, 1).unwrap();
        assert_eq!(&seg[4..8], b"moof");
        let ts = plan.ts_segment(&movie, &file, 0).unwrap();
        assert_eq!(ts.len() % 188, 0);
        assert_eq!(ts[0], 0x47);
        assert!(matches!(
            plan.fmp4_segment(&movie, &file, 2),
            Err(VodError::NoSegment(2))
        ));
    }

    #[test]
    fn a_range_playlist_stitches_files_with_discontinuities() {
        let (a, _) = movie(10, 25, true);
        let (b, _) = movie(4, 25, true);
        let (pa, pb) = (VodPlan::new(&a, 2000), VodPlan::new(&b, 2000));
        let parts = [
            RangePart {
                base: "cam@x/10".into(),
                plan: &pa,
                segments: 3..5,
                date_time: "2026-11-27T10:00:06.000Z".into(),
            },
            RangePart {
                base: "cam@x/20".into(),
                plan: &pb,
                segments: 0..2,
                date_time: "2026-11-27T10:01:00.000Z".into(),
            },
        ];
        let fmp4 = range_playlist(VodVariant::Fmp4, &parts);
        let parsed = m3u8_rs::parse_media_playlist_res(fmp4.as_bytes()).unwrap();
        assert!(parsed.end_list);
        assert_eq!(parsed.segments.len(), 4);
        assert_eq!(parsed.segments[0].uri, "cam@x/10-3.m4s");
        assert!(!parsed.segments[1].discontinuity);
        assert!(parsed.segments[2].discontinuity);
        assert_eq!(parsed.segments[3].uri, "cam@x/20-1.m4s");
        assert_eq!(fmp4.matches("#EXT-X-MAP:").count(), 2);
        assert_eq!(fmp4.matches("#EXT-X-PROGRAM-DATE-TIME:").count(), 2);
        let ts = range_playlist(VodVariant::Ts, &parts);
        assert!(ts.contains("#EXT-X-DISCONTINUITY\n#EXT-X-PROGRAM-DATE-TIME:2026-11-27T10:01:00.000Z\n#EXTINF:2.000,\ncam@x/20-0.ts\n"));
        assert!(!ts.contains("EXT-X-MAP"));
        assert_eq!(
            pa.sample_bytes(&a, 0..5),
            (250 + a.tracks[1].samples.len() as u64) * 9
        );
    }

    #[test]
    fn a_range_takes_the_segments_it_overlaps_from_the_keyframe_before_it() {
        // Ten 2 s segments from 10 000 ms (UTC).
        let (movie, _) = movie(20, 25, true);
        let plan = VodPlan::new(&movie, 2000);
        assert_eq!(plan.segments.len(), 10);
        let t0 = 10_000;
        // From 3.3 s in: the segment of 2..4 s, which starts before it.
        assert_eq!(plan.within(10, t0, t0 + 3300, t0 + 8000), (1..4, t0 + 2000));
        // Exactly at a segment's start: that segment.
        assert_eq!(plan.within(10, t0, t0 + 4000, t0 + 4001), (2..3, t0 + 4000));
        // Before and after the file (its last segment runs to 20.04 s): everything, or
        // nothing.
        assert_eq!(plan.within(10, t0, 0, i64::MAX), (0..10, t0));
        assert_eq!(plan.within(10, t0, t0 + 20_100, i64::MAX).0.len(), 0);
        assert_eq!(plan.within(10, t0, 0, t0).0.len(), 0);
        // The file being written: its last segment is left out.
        assert_eq!(plan.within(9, t0, 0, i64::MAX).0, 0..9);
        assert_eq!(plan.within(0, t0, 0, i64::MAX).0, 0..0);
    }

    #[test]
    fn fragments_of_a_later_file_start_at_its_offset() {
        let (movie, file) = movie(4, 25, false);
        let plan = VodPlan::new(&movie, 2000);
        let first = plan.fmp4_fragment(&movie, &file, 0, 7, 90_000).unwrap();
        let plain = plan.fmp4_segment(&movie, &file, 0).unwrap();
        assert_eq!(first.len(), plain.len());
        assert_ne!(first, plain, "sequence and tfdt differ");
    }

    #[test]
    fn a_sample_outside_the_file_is_an_error_not_a_panic() {
        let (mut movie, file) = movie(2, 25, false);
        movie.tracks[0].samples[3].offset = 1 << 40;
        let plan = VodPlan::new(&movie, 2000);
        assert!(matches!(
            plan.fmp4_segment(&movie, &file, 0),
            Err(VodError::Mp4(_))
        ));
    }
}
