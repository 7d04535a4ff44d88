//! Segmenters: a stream's frames in, segment and part bytes out, on a [`Timeline`].
//!
//! Why here and not in the server: cutting at keyframes, part boundaries, sample
//! durations and discontinuities is pure logic; the server only feeds frames on the
//! publisher's thread and publishes what changed to the request path.
//!
//! # Invariants
//! - A segment starts at a start point: a video keyframe, or any audio frame of a
//!   stream without video. Frames before the first start point are dropped.
//! - Bytes are kept exactly for the segments the timeline keeps; a released msn is
//!   dropped at once.
//! - A track change (new decoder configuration) takes effect at the next start point,
//!   with a discontinuity, and for fMP4 a new init segment.

use crate::{HlsConfig, HlsError, Timeline, Variant};
use bytes::{Bytes, BytesMut};
use sluice_media::fmp4::{self, InitTrack, Sample, TrackRun};
use sluice_media::ts::TsMuxer;
use sluice_media::{Frame, MediaKind, Track, TrackConfig};
use std::collections::BTreeMap;
use thiserror::Error;

/// Largest segment accepted in bytes: past this (a stream without keyframes, say) the
/// segment is cut where it is.
const MAX_SEGMENT_BYTES: usize = 64 << 20;

/// Why a frame could not be segmented. The frame is dropped; the stream goes on.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// The timeline refused a call (a bug of ours, or an absurd duration).
    #[error(transparent)]
    Timeline(#[from] HlsError),
    /// The TS muxer refused the frame or the tracks.
    #[error("ts: {0}")]
    Ts(#[from] sluice_media::ts::TsError),
    /// The fMP4 writer refused the samples or the tracks.
    #[error("fmp4: {0}")]
    Fmp4(#[from] sluice_media::fmp4::Fmp4Error),
}

/// Whether `frame` can start a segment in a stream that does (not) have video.
fn is_start(frame: &Frame, has_video: bool) -> bool {
    match frame.kind {
        MediaKind::Video => frame.keyframe,
        MediaKind::Audio => !has_video,
    }
}

/// The MPEG-TS variant: whole segments only.
#[derive(Debug)]
pub struct TsSegmenter {
    timeline: Timeline,
    video: Option<Track>,
    audio: Option<Track>,
    tracks_changed: bool,
    muxer: Option<TsMuxer>,
    current: BytesMut,
    seg_start: Option<i64>,
    last_dts: i64,
    discontinuity: bool,
    segments: BTreeMap<u64, Bytes>,
    target_ticks: i64,
}

impl TsSegmenter {
    /// A segmenter for `config` (low latency does not apply to TS and is ignored).
    pub fn new(config: HlsConfig) -> Result<Self, HlsError> {
        let config = HlsConfig {
            low_latency: false,
            ..config
        };
        Ok(TsSegmenter {
            target_ticks: i64::from(config.target_duration_ms) * 90,
            timeline: Timeline::new(config, Variant::Ts)?,
            video: None,
            audio: None,
            tracks_changed: false,
            muxer: None,
            current: BytesMut::new(),
            seg_start: None,
            last_dts: 0,
            discontinuity: false,
            segments: BTreeMap::new(),
        })
    }

    /// The stream's tracks now; a change applies from the next start point.
    pub fn set_tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        if self.video.as_ref() != video || self.audio.as_ref() != audio {
            self.video = video.cloned();
            self.audio = audio.cloned();
            self.tracks_changed = true;
        }
    }

    /// The publisher restarted: the next segment starts with a discontinuity.
    pub fn discontinuity(&mut self) {
        self.discontinuity = true;
    }

    /// Adds one frame; returns whether the timeline changed (a segment completed).
    pub fn push(&mut self, frame: &Frame, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let mut changed = false;
        let start = is_start(frame, self.video.is_some());
        let due = match self.seg_start {
            None => true,
            Some(s) => {
                frame.dts - s >= self.target_ticks
                    || self.tracks_changed
                    || self.current.len() > MAX_SEGMENT_BYTES
            }
        };
        if (start && due) || self.current.len() > MAX_SEGMENT_BYTES {
            self.finish_segment(frame.dts)?;
            if self.tracks_changed || self.muxer.is_none() {
                // New tracks after earlier ones: players must reset their decoders.
                if self.muxer.is_some() {
                    self.discontinuity = true;
                }
                self.muxer = Some(TsMuxer::new(self.video.as_ref(), self.audio.as_ref())?);
                self.tracks_changed = false;
            }
            self.timeline
                .start_segment(std::mem::take(&mut self.discontinuity), wall_clock_ms)?;
            if let Some(muxer) = &mut self.muxer {
                muxer.write_tables(&mut self.current);
            }
            self.seg_start = Some(frame.dts);
            changed = true;
        }
        let Some(muxer) = &mut self.muxer else {
            return Ok(changed);
        };
        if self.seg_start.is_none() {
            return Ok(changed);
        }
        let wanted = match frame.kind {
            MediaKind::Video => self.video.is_some(),
            MediaKind::Audio => self.audio.is_some(),
        };
        if wanted {
            muxer.write_frame(frame, &mut self.current)?;
        }
        self.last_dts = self.last_dts.max(frame.dts);
        Ok(changed)
    }

    fn finish_segment(&mut self, end_dts: i64) -> Result<(), SegmentError> {
        let Some(start) = self.seg_start.take() else {
            return Ok(());
        };
        // The next segment is likely this one's size: one allocation for it, not a
        // chain of doublings that each copy the bytes and fault in fresh pages.
        let next = self.current.len() + self.current.len() / 8;
        let bytes = std::mem::replace(&mut self.current, BytesMut::with_capacity(next)).freeze();
        let released = self.timeline.end_segment((end_dts - start).max(1))?;
        if let Some(msn) = self.timeline.kept().end.checked_sub(1) {
            self.segments.insert(msn, bytes);
        }
        for msn in released {
            self.segments.remove(&msn);
        }
        Ok(())
    }

    /// The stream ended: the segment in progress is completed and the playlist closed.
    pub fn end(&mut self) -> Result<(), SegmentError> {
        let end = self.last_dts + 3600;
        self.finish_segment(end)?;
        for msn in self.timeline.end_stream() {
            self.segments.remove(&msn);
        }
        Ok(())
    }

    /// The timeline, for playlists and request decisions.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The bytes of every kept segment, by msn.
    pub fn segments(&self) -> &BTreeMap<u64, Bytes> {
        &self.segments
    }

    /// Moves kept segment `msn` to `whole`, the same bytes in other storage (page-cache
    /// backed, for `sendfile`), so the old buffer is freed once readers let go of it.
    /// Returns false, changing nothing, when the segment is not kept or differs.
    pub fn replace_segment(&mut self, msn: u64, whole: Bytes) -> bool {
        match self.segments.get_mut(&msn) {
            Some(old) if *old == whole => {
                *old = whole;
                true
            }
            _ => false,
        }
    }
}

/// One sample waiting for its duration (known when the next one of its track comes).
#[derive(Debug)]
struct Pending {
    dts: i64,
    cts: i64,
    keyframe: bool,
    data: Bytes,
}

#[derive(Debug)]
struct FmpTrack {
    id: u32,
    track: Track,
    timescale: u32,
    pending: Option<Pending>,
    /// Samples with known durations, for the part in progress.
    samples: Vec<Sample>,
    /// Decode time of `samples[0]` in the track's timescale.
    base: u64,
}

/// The fMP4 (CMAF) variant, with Low-Latency HLS parts when the config asks.
#[derive(Debug)]
pub struct Fmp4Segmenter {
    timeline: Timeline,
    video: Option<FmpTrack>,
    audio: Option<FmpTrack>,
    tracks_changed: bool,
    init: Option<Bytes>,
    seg_start: Option<i64>,
    part_start: i64,
    part_independent: bool,
    /// The decode time that maps to 0 in every track's timescale.
    origin: Option<i64>,
    sequence: u32,
    discontinuity: bool,
    parts: BTreeMap<(u64, u32), Bytes>,
    /// Parts of the segment in progress, so a segment without LL-HLS is one fragment.
    open_parts: Vec<Bytes>,
    segments: BTreeMap<u64, Vec<Bytes>>,
    target_ticks: i64,
    part_ticks: i64,
    low_latency: bool,
}

impl Fmp4Segmenter {
    /// A segmenter for `config`.
    pub fn new(config: HlsConfig) -> Result<Self, HlsError> {
        Ok(Fmp4Segmenter {
            target_ticks: i64::from(config.target_duration_ms) * 90,
            part_ticks: i64::from(config.part_duration_ms) * 90,
            low_latency: config.low_latency,
            timeline: Timeline::new(config, Variant::Fmp4)?,
            video: None,
            audio: None,
            tracks_changed: false,
            init: None,
            seg_start: None,
            part_start: 0,
            part_independent: false,
            origin: None,
            sequence: 0,
            discontinuity: false,
            parts: BTreeMap::new(),
            open_parts: Vec::new(),
            segments: BTreeMap::new(),
        })
    }

    /// The stream's tracks now; a change applies from the next start point.
    pub fn set_tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        let same =
            |have: &Option<FmpTrack>, want: Option<&Track>| have.as_ref().map(|t| &t.track) == want;
        if same(&self.video, video) && same(&self.audio, audio) {
            return;
        }
        let timescale = |t: &Track| match &t.config {
            TrackConfig::Aac(c) => c.sample_rate.max(1),
            TrackConfig::Opus(_) => 48_000,
            _ => 90_000,
        };
        let mut id = 0;
        let mut make = |t: Option<&Track>| {
            t.map(|t| {
                id += 1;
                FmpTrack {
                    id,
                    track: t.clone(),
                    timescale: timescale(t),
                    pending: None,
                    samples: Vec::new(),
                    base: 0,
                }
            })
        };
        // Audio MP3/G.711 have no fMP4 form here: drop such a track rather than the stream.
        let audio =
            audio.filter(|t| matches!(t.config, TrackConfig::Aac(_) | TrackConfig::Opus(_)));
        let video =
            video.filter(|t| matches!(t.config, TrackConfig::H264(_) | TrackConfig::H265(_)));
        self.video = make(video);
        self.audio = make(audio);
        self.tracks_changed = true;
    }

    /// The publisher restarted: the next segment starts with a discontinuity.
    pub fn discontinuity(&mut self) {
        self.discontinuity = true;
    }

    /// Adds one frame; returns whether the timeline changed (a part or segment).
    pub fn push(&mut self, frame: &Frame, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let has_video = self.video.is_some();
        let wanted = match frame.kind {
            MediaKind::Video => has_video,
            MediaKind::Audio => self.audio.is_some(),
        };
        if !wanted {
            return Ok(false);
        }
        let mut changed = false;
        let start = is_start(frame, has_video);
        // Boundaries are decided on the track that defines start points.
        let leader = matches!(frame.kind, MediaKind::Video) || !has_video;
        if leader {
            let seg_due = match self.seg_start {
                None => true,
                Some(s) => frame.dts - s >= self.target_ticks || self.tracks_changed,
            };
            if start && seg_due {
                if self.seg_start.is_some() {
                    self.close_part(frame.dts)?;
                    self.finish_segment(frame.dts)?;
                }
                if self.tracks_changed || self.init.is_none() {
                    self.write_init()?;
                    if self.timeline.kept().end > 0 {
                        self.discontinuity = true;
                    }
                }
                self.origin.get_or_insert(frame.dts);
                self.timeline
                    .start_segment(std::mem::take(&mut self.discontinuity), wall_clock_ms)?;
                self.seg_start = Some(frame.dts);
                self.part_start = frame.dts;
                self.part_independent = true;
                changed = true;
            } else if self.seg_start.is_some()
                && self.low_latency
                && frame.dts - self.part_start >= self.part_ticks
            {
                self.close_part(frame.dts)?;
                self.part_start = frame.dts;
                self.part_independent = start;
                changed = true;
            }
        }
        if self.seg_start.is_none() {
            return Ok(changed);
        }
        let pending = Pending {
            dts: frame.dts,
            cts: frame.pts - frame.dts,
            keyframe: frame.keyframe,
            data: frame.payload.clone(),
        };
        self.commit_next(frame.kind, pending);
        Ok(changed)
    }

    /// Gives the pending sample of `kind` its duration, now that `next` arrived.
    fn commit_next(&mut self, kind: MediaKind, next: Pending) {
        let next_dts = next.dts;
        let origin = self.origin;
        let track = match kind {
            MediaKind::Video => self.video.as_mut(),
            MediaKind::Audio => self.audio.as_mut(),
        };
        let Some(track) = track else { return };
        if let Some(prev) = track.pending.replace(next) {
            let conv = |dts: i64| {
                let rel = dts - origin.unwrap_or(dts);
                i128::from(rel) * i128::from(track.timescale) / 90_000
            };
            let duration = u32::try_from((conv(next_dts) - conv(prev.dts)).max(1)).unwrap_or(1);
            let cts = i32::try_from(i128::from(prev.cts) * i128::from(track.timescale) / 90_000)
                .unwrap_or(0);
            if track.samples.is_empty() {
                track.base = u64::try_from(conv(prev.dts)).unwrap_or(0);
            }
            track.samples.push(Sample {
                duration,
                cts_offset: cts,
                keyframe: prev.keyframe || kind == MediaKind::Audio,
                data: prev.data,
            });
        }
    }

    fn write_init(&mut self) -> Result<(), SegmentError> {
        let mut tracks = Vec::new();
        for t in [&self.video, &self.audio].into_iter().flatten() {
            tracks.push(InitTrack {
                track_id: t.id,
                track: &t.track,
                timescale: t.timescale,
            });
        }
        let mut out = BytesMut::new();
        fmp4::write_init(&mut out, &tracks)?;
        self.init = Some(out.freeze());
        self.tracks_changed = false;
        Ok(())
    }

    /// Writes the committed samples of every track as one fragment: a part (LL-HLS)
    /// or, without low latency, a piece of the segment.
    fn close_part(&mut self, cut_dts: i64) -> Result<(), SegmentError> {
        let mut runs = Vec::new();
        for t in [&self.video, &self.audio].into_iter().flatten() {
            if !t.samples.is_empty() {
                runs.push(TrackRun {
                    track_id: t.id,
                    base_decode_time: t.base,
                    samples: &t.samples,
                });
            }
        }
        if runs.is_empty() {
            return Ok(());
        }
        let mut out = BytesMut::new();
        fmp4::write_fragment(&mut out, self.sequence, &runs)?;
        self.sequence = self.sequence.wrapping_add(1);
        for t in [&mut self.video, &mut self.audio].into_iter().flatten() {
            t.samples.clear();
        }
        let bytes = out.freeze();
        if self.low_latency {
            let duration = (cut_dts - self.part_start).max(1);
            let (msn, index) = self.timeline.add_part(duration, self.part_independent)?;
            self.parts.insert((msn, index), bytes.clone());
        }
        self.open_parts.push(bytes);
        Ok(())
    }

    fn finish_segment(&mut self, end_dts: i64) -> Result<(), SegmentError> {
        let Some(start) = self.seg_start.take() else {
            return Ok(());
        };
        let released = self.timeline.end_segment((end_dts - start).max(1))?;
        if let Some(msn) = self.timeline.kept().end.checked_sub(1) {
            self.segments
                .insert(msn, std::mem::take(&mut self.open_parts));
        }
        for msn in released {
            self.segments.remove(&msn);
            self.parts.retain(|(m, _), _| *m != msn);
        }
        Ok(())
    }

    /// The stream ended: the playlist is closed.
    pub fn end(&mut self) {
        for msn in self.timeline.end_stream() {
            self.segments.remove(&msn);
            self.parts.retain(|(m, _), _| *m != msn);
        }
    }

    /// The timeline, for playlists and request decisions.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The init segment of the current tracks.
    pub fn init(&self) -> Option<&Bytes> {
        self.init.as_ref()
    }

    /// Every kept complete segment, as its fragments in order.
    pub fn segments(&self) -> &BTreeMap<u64, Vec<Bytes>> {
        &self.segments
    }

    /// Every kept part, by (msn, index).
    pub fn parts(&self) -> &BTreeMap<(u64, u32), Bytes> {
        &self.parts
    }

    /// Moves kept segment `msn` to `whole`, its fragments' bytes concatenated in other
    /// storage (page-cache backed, for `sendfile`): the segment becomes that one
    /// buffer and each of its parts a slice of it, so the old buffers are freed once
    /// readers let go of them. Returns false, changing nothing, when the segment is not
    /// kept or its bytes differ.
    pub fn replace_segment(&mut self, msn: u64, whole: Bytes) -> bool {
        let Some(pieces) = self.segments.get(&msn) else {
            return false;
        };
        let mut offset = 0;
        for piece in pieces {
            if whole.get(offset..offset + piece.len()) != Some(&piece[..]) {
                return false;
            }
            offset += piece.len();
        }
        if offset != whole.len() {
            return false;
        }
        // Parts are this segment's fragments in order (in low-latency mode).
        let mut offset = 0;
        let mut slices = Vec::with_capacity(pieces.len());
        for piece in pieces {
            slices.push(whole.slice(offset..offset + piece.len()));
            offset += piece.len();
        }
        for (index, slice) in slices.iter().enumerate() {
            if let Some(part) = u32::try_from(index)
                .ok()
                .and_then(|i| self.parts.get_mut(&(msn, i)))
            {
                if part.len() == slice.len() {
                    *part = slice.clone();
                }
            }
        }
        self.segments.insert(msn, vec![whole]);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::{AacConfig, AvcConfig};

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

    /// Names TS segments `N.ts`.
    struct Names;

    impl crate::SegmentNames for Names {
        fn segment(&self, msn: u64, out: &mut String) {
            out.push_str(&format!("{msn}.ts"));
        }
        fn part(&self, _: u64, _: u32, _: &mut String) {}
        fn init(&self, _: &mut String) {}
    }

    /// 25 fps video with a keyframe every `gop` frames, and 48 kHz AAC between.
    fn frames(seconds: i64, gop: i64) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut audio_dts = 0i64;
        for n in 0..seconds * 25 {
            let dts = n * 3600;
            while audio_dts <= dts {
                out.push(Frame {
                    kind: MediaKind::Audio,
                    dts: audio_dts,
                    pts: audio_dts,
                    keyframe: true,
                    payload: Bytes::from_static(&[0x21, 0x10, 0x04, 0x60]),
                });
                audio_dts += 1920;
            }
            let key = n % gop == 0;
            let mut payload = vec![0, 0, 0, 5, if key { 0x65 } else { 0x41 }];
            payload.extend_from_slice(&[1, 2, 3, 4]);
            out.push(Frame {
                kind: MediaKind::Video,
                dts,
                pts: dts,
                keyframe: key,
                payload: Bytes::from(payload),
            });
        }
        out
    }

    #[test]
    fn ts_cuts_two_second_segments_at_keyframes() {
        let mut seg = TsSegmenter::new(HlsConfig::default()).unwrap();
        seg.set_tracks(Some(&video()), Some(&audio()));
        for f in frames(11, 25) {
            seg.push(&f, 0).unwrap();
        }
        let kept = seg.timeline().kept();
        assert_eq!(
            kept,
            0..5,
            "5 complete 2 s segments of 11 s (the 6th in progress)"
        );
        for (msn, bytes) in seg.segments() {
            assert!(bytes.len() % 188 == 0 && bytes[0] == 0x47, "segment {msn}");
        }
        let mut playlist = String::new();
        seg.timeline().render(&Names, &mut playlist);
        assert!(playlist.contains("#EXTINF:2.000,\n0.ts"), "{playlist}");
    }

    #[test]
    fn fmp4_makes_parts_and_whole_segments() {
        let mut seg = Fmp4Segmenter::new(HlsConfig::default()).unwrap();
        seg.set_tracks(Some(&video()), Some(&audio()));
        for f in frames(5, 50) {
            seg.push(&f, 0).unwrap();
        }
        assert!(seg.init().is_some());
        assert_eq!(seg.timeline().kept(), 0..2);
        let parts_of_0: Vec<_> = seg.parts().range((0, 0)..(1, 0)).collect();
        assert_eq!(
            parts_of_0.len(),
            7,
            "2 s in parts of at least 300 ms at 25 fps (320 ms)"
        );
        let segment: usize = seg.segments()[&0].iter().map(|b| b.len()).sum();
        let parts: usize = parts_of_0.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(segment, parts, "a segment is its parts");
        assert!(seg.timeline().part_state(2, 1) != crate::Availability::Gone);
    }

    #[test]
    fn segments_move_to_other_storage_with_their_parts() {
        let mut ts = TsSegmenter::new(HlsConfig::default()).unwrap();
        let mut fmp4 = Fmp4Segmenter::new(HlsConfig::default()).unwrap();
        for seg in [&mut ts as &mut dyn PushFrames, &mut fmp4] {
            seg.tracks(Some(&video()), Some(&audio()));
            for f in frames(5, 50) {
                seg.frame(&f);
            }
        }
        let copy = Bytes::copy_from_slice(&ts.segments()[&0]);
        assert!(!ts.replace_segment(0, Bytes::from_static(b"other")));
        assert!(!ts.replace_segment(9, copy.clone()));
        assert!(ts.replace_segment(0, copy.clone()));
        assert_eq!(ts.segments()[&0].as_ptr(), copy.as_ptr());

        let whole: Vec<u8> = fmp4.segments()[&0]
            .iter()
            .flat_map(|b| b.to_vec())
            .collect();
        let whole = Bytes::from(whole);
        assert!(!fmp4.replace_segment(0, whole.slice(1..)));
        assert!(fmp4.replace_segment(0, whole.clone()));
        assert_eq!(fmp4.segments()[&0], vec![whole.clone()]);
        let mut offset = 0;
        for ((msn, _), part) in fmp4.parts().range((0, 0)..(1, 0)) {
            assert_eq!(*msn, 0);
            assert_eq!(
                part.as_ptr(),
                whole[offset..].as_ptr(),
                "a slice of the new storage"
            );
            offset += part.len();
        }
        assert_eq!(offset, whole.len());
    }

    /// Both segmenters, for tests that feed them alike.
    trait PushFrames {
        fn tracks(&mut self, video: Option<&Track>, audio: Option<&Track>);
        fn frame(&mut self, frame: &Frame);
    }

    impl PushFrames for TsSegmenter {
        fn tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
            self.set_tracks(video, audio);
        }
        fn frame(&mut self, frame: &Frame) {
            self.push(frame, 0).unwrap();
        }
    }

    impl PushFrames for Fmp4Segmenter {
        fn tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
            self.set_tracks(video, audio);
        }
        fn frame(&mut self, frame: &Frame) {
            self.push(frame, 0).unwrap();
        }
    }

    #[test]
    fn a_track_change_starts_a_discontinuity() {
        let mut seg = TsSegmenter::new(HlsConfig::default()).unwrap();
        seg.set_tracks(Some(&video()), Some(&audio()));
        let all = frames(6, 25);
        for f in &all[..all.len() / 2] {
            seg.push(f, 0).unwrap();
        }
        seg.set_tracks(Some(&video()), None);
        for f in &all[all.len() / 2..] {
            seg.push(f, 0).unwrap();
        }
        let mut playlist = String::new();
        seg.timeline().render(&Names, &mut playlist);
        assert!(playlist.contains("#EXT-X-DISCONTINUITY"), "{playlist}");
    }
}
