//! Segmenters: a stream's frames in, segment and part bytes out, on a [`Timeline`].
//!
//! Why here and not in the server: segments, parts and discontinuities are the
//! timeline's business; the server only feeds frames on the publisher's thread and
//! publishes what changed to the request path. Where segments and parts are cut, and
//! how frames become their bytes, is `sluice_media::fragment`'s: each segmenter is a
//! [`Fragmenter`] whose outputs it records on its timeline.
//!
//! # Invariants
//! - A segment starts at a start point: a video keyframe, or any audio frame of a
//!   stream without video (or wherever [`MAX_SEGMENT_BYTES`] cut it). Frames before the
//!   first start point are dropped.
//! - Bytes are kept exactly for the segments the timeline keeps; a released msn is
//!   dropped at once.
//! - A track change (new decoder configuration) takes effect at the next start point,
//!   with a discontinuity, and for fMP4 a new init segment.
//! - Segments follow the stream's timeline, not the moment segmenting began: they are
//!   cut by aligned rules (a segment ends at the first keyframe nearest another
//!   multiple of the target duration), named by the decode time of their first frame
//!   (90 kHz ticks), and the first one is numbered by its slot of the timeline
//!   ([`CutRules::slot`]). fMP4 decode times are the stream's own, and each segment's
//!   first fragment is numbered from its start. So two servers segmenting the same
//!   stream, from whichever keyframe, give the same media the same name and bytes
//!   (TS segments may differ in their continuity counters) and, while every slot holds
//!   a keyframe, the same msn.
//! - With encryption ([`Encryption::Aes128`]), a segment's bytes are encrypted once,
//!   whole, when it completes: what `segments` holds is the ciphertext, never the
//!   plain bytes (see `crypt`). The fMP4 init segment stays in the clear.

use crate::{Encryption, HlsConfig, HlsError, KeySecret, SegmentKeys, Splices, Timeline, Variant};
use bytes::{Bytes, BytesMut};
use sluice_media::fragment::{
    Container, CutRules, FragmentError, Fragmenter, FragmenterConfig, Origin, Output,
};
use sluice_media::ts::SpliceInfo;
use sluice_media::{Frame, Timestamp, Track};
use std::collections::BTreeMap;
use thiserror::Error;

/// Largest segment accepted in bytes of media: past this (a stream without keyframes,
/// say) the segment is cut where it is.
const MAX_SEGMENT_BYTES: usize = 64 << 20;

/// Why a frame could not be segmented. The frame is dropped; the stream goes on.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// The timeline refused a call (a bug of ours, or an absurd duration).
    #[error(transparent)]
    Timeline(#[from] HlsError),
    /// The muxer refused the frames or the tracks.
    #[error(transparent)]
    Fragment(#[from] FragmentError),
}

/// The cut rules of a variant: segments of the target duration at start points,
/// aligned to the stream's timeline, LL-HLS parts when asked, and a size bound.
fn rules(config: &HlsConfig, parts: bool) -> CutRules {
    let ticks = |ms: u32| Timestamp::from(ms) * 90;
    CutRules {
        aligned: true,
        part_ticks: parts.then(|| ticks(config.part_duration_ms)),
        max_bytes: Some(MAX_SEGMENT_BYTES),
        ..CutRules::at_start_points(ticks(config.target_duration_ms))
    }
}

/// Starts the segment whose first frame decodes at `dts` on `timeline`: named by
/// `dts`, and, if it is the first, numbered by its slot of the stream's timeline; the
/// cues of `splices` due by then mark it.
fn start_segment(
    timeline: &mut Timeline,
    rules: &CutRules,
    splices: &mut Splices,
    discontinuity: bool,
    wall_clock_ms: i64,
    dts: Timestamp,
) -> Result<u64, HlsError> {
    if timeline.kept().end == 0 && timeline.in_progress().is_none() {
        // Before the first segment only; an error says it was not the first.
        let _ = timeline.set_first_msn(u64::try_from(rules.slot(dts)).unwrap_or(0));
    }
    let msn = timeline.start_named_segment(
        discontinuity,
        wall_clock_ms,
        u64::try_from(dts).unwrap_or(0),
    )?;
    timeline.add_date_ranges(splices.at_segment(dts, wall_clock_ms, msn));
    Ok(msn)
}

/// The keys of a segmenter of `config`: `None` without encryption.
///
/// Errors: encryption is configured and `secret` is `None`.
fn segment_keys(
    config: &HlsConfig,
    secret: Option<&KeySecret>,
) -> Result<Option<SegmentKeys>, HlsError> {
    match config.encryption {
        Encryption::None => Ok(None),
        Encryption::Aes128 { rotation } => {
            SegmentKeys::new(secret.ok_or(HlsError::NoSecret)?, rotation).map(Some)
        }
    }
}

/// The `mfhd` sequence number of a segment's first fragment: its start in ms (the low
/// 32 bits). Its parts follow it; they are at least a millisecond each, so the next
/// segment's number is above them.
fn first_sequence(dts: Timestamp) -> u32 {
    (dts.div_euclid(90) & i64::from(u32::MAX)) as u32
}

/// The MPEG-TS variant: whole segments only.
#[derive(Debug)]
pub struct TsSegmenter {
    timeline: Timeline,
    fragmenter: Fragmenter,
    /// Tables (an init) came before: the next ones are a track change.
    had_init: bool,
    discontinuity: bool,
    /// Pieces of the segment in progress (one, since TS segments have no parts).
    current: Vec<Bytes>,
    segments: BTreeMap<u64, Bytes>,
    /// Encrypts each completed segment, when the config asks.
    keys: Option<SegmentKeys>,
    /// SCTE-35 cues waiting for the segment they mark.
    splices: Splices,
}

impl TsSegmenter {
    /// A segmenter for `config` (low latency does not apply to TS and is ignored).
    /// Errors: a config out of range, or encryption (which needs [`Self::with_secret`]).
    pub fn new(config: HlsConfig) -> Result<Self, HlsError> {
        Self::with_secret(config, None)
    }

    /// [`new`](Self::new), with the secret its keys come from when the config asks for
    /// encryption (ignored otherwise).
    pub fn with_secret(config: HlsConfig, secret: Option<&KeySecret>) -> Result<Self, HlsError> {
        let config = HlsConfig {
            low_latency: false,
            ..config
        };
        Ok(TsSegmenter {
            keys: segment_keys(&config, secret)?,
            fragmenter: Fragmenter::new(FragmenterConfig {
                container: Container::Ts,
                rules: rules(&config, false),
                // The stream's own timestamps, as every TS segment has always had.
                origin: Origin::At(0),
                late_tracks_join: false,
            }),
            timeline: Timeline::new(config, Variant::Ts)?,
            had_init: false,
            discontinuity: false,
            current: Vec::new(),
            segments: BTreeMap::new(),
            splices: Splices::default(),
        })
    }

    /// The stream's tracks now; a change applies from the next start point.
    pub fn set_tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        // Only a track joining an output can fail, and TS segments do not join.
        let _ = self.fragmenter.set_tracks(video, audio);
    }

    /// An SCTE-35 cue that splices at `at` (the frames' clock): a segment begins at
    /// the first start point from there, listed with the cue's `EXT-X-DATERANGE`.
    pub fn cue(&mut self, at: Timestamp, info: SpliceInfo) {
        if let Some(at) = self.splices.cue(at, info) {
            self.fragmenter.splice_at(at);
        }
    }

    /// The publisher restarted: the next segment starts with a discontinuity.
    pub fn discontinuity(&mut self) {
        self.discontinuity = true;
    }

    /// Adds one frame; returns whether the timeline changed (a segment completed).
    pub fn push(&mut self, frame: &Frame, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let pushed = self.fragmenter.push(frame);
        let changed = self.drain(wall_clock_ms)?;
        pushed?;
        Ok(changed)
    }

    /// Records what the fragmenter made on the timeline; returns whether it changed.
    fn drain(&mut self, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let mut changed = false;
        let mut result = Ok(());
        while let Some(output) = self.fragmenter.poll_output() {
            let step = match output {
                Output::Init(_) => {
                    // New tracks after earlier ones: players must reset their decoders.
                    self.discontinuity |= self.had_init;
                    self.had_init = true;
                    Ok(())
                }
                Output::Begin { dts, .. } => {
                    changed = true;
                    let rules = self.fragmenter.config().rules;
                    start_segment(
                        &mut self.timeline,
                        &rules,
                        &mut self.splices,
                        std::mem::take(&mut self.discontinuity),
                        wall_clock_ms,
                        dts,
                    )
                    .map(|_| ())
                    .map_err(SegmentError::from)
                }
                Output::Piece { bytes, .. } => {
                    self.current.push(bytes);
                    Ok(())
                }
                Output::End { duration } => {
                    changed = true;
                    self.finish_segment(duration)
                }
                Output::Finished { .. } => Ok(()),
            };
            result = result.and(step);
        }
        result.map(|()| changed)
    }

    fn finish_segment(&mut self, duration: Timestamp) -> Result<(), SegmentError> {
        let bytes = match self.current.len() {
            1 => self.current.pop().unwrap_or_default(),
            _ => concat(&std::mem::take(&mut self.current)),
        };
        self.current.clear();
        let released = self.timeline.end_segment(duration.max(1))?;
        if let Some(msn) = self.timeline.kept().end.checked_sub(1) {
            let bytes = match &self.keys {
                Some(keys) => keys.encrypt(msn, &[bytes])?,
                None => bytes,
            };
            self.segments.insert(msn, bytes);
        }
        for msn in released {
            self.segments.remove(&msn);
        }
        Ok(())
    }

    /// The stream ended: the segment in progress is completed and the playlist closed.
    pub fn end(&mut self) -> Result<(), SegmentError> {
        let finished = self.fragmenter.finish(None);
        let drained = self.drain(0);
        for msn in self.timeline.end_stream() {
            self.segments.remove(&msn);
        }
        finished?;
        drained.map(|_| ())
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

/// `pieces` in one buffer.
fn concat(pieces: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in pieces {
        out.extend_from_slice(p);
    }
    out.freeze()
}

/// The fMP4 (CMAF) variant, with Low-Latency HLS parts when the config asks.
#[derive(Debug)]
pub struct Fmp4Segmenter {
    timeline: Timeline,
    fragmenter: Fragmenter,
    init: Option<Bytes>,
    discontinuity: bool,
    parts: BTreeMap<(u64, u32), Bytes>,
    /// Parts of the segment in progress (one fragment per segment without LL-HLS).
    open_parts: Vec<Bytes>,
    segments: BTreeMap<u64, Vec<Bytes>>,
    low_latency: bool,
    /// Encrypts each completed segment, when the config asks.
    keys: Option<SegmentKeys>,
    /// SCTE-35 cues waiting for the segment they mark.
    splices: Splices,
}

impl Fmp4Segmenter {
    /// A segmenter for `config`.
    /// Errors: a config out of range, or encryption (which needs [`Self::with_secret`]).
    pub fn new(config: HlsConfig) -> Result<Self, HlsError> {
        Self::with_secret(config, None)
    }

    /// [`new`](Self::new), with the secret its keys come from when the config asks for
    /// encryption (ignored otherwise). Encryption needs `low_latency` off.
    pub fn with_secret(config: HlsConfig, secret: Option<&KeySecret>) -> Result<Self, HlsError> {
        Ok(Fmp4Segmenter {
            keys: segment_keys(&config, secret)?,
            fragmenter: Fragmenter::new(FragmenterConfig {
                container: Container::Fmp4,
                rules: rules(&config, config.low_latency),
                // The stream's own decode times, as TS: a segment's bytes do not
                // depend on where segmenting began.
                origin: Origin::At(0),
                late_tracks_join: false,
            }),
            low_latency: config.low_latency,
            timeline: Timeline::new(config, Variant::Fmp4)?,
            init: None,
            discontinuity: false,
            parts: BTreeMap::new(),
            open_parts: Vec::new(),
            segments: BTreeMap::new(),
            splices: Splices::default(),
        })
    }

    /// The stream's tracks now; a change applies from the next start point. Tracks
    /// fMP4 does not carry here (MP3, G.711, AV1, VP9) are left out, not the stream.
    pub fn set_tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        // Only a track joining an output can fail, and segments do not join.
        let _ = self.fragmenter.set_tracks(video, audio);
    }

    /// An SCTE-35 cue that splices at `at` (the frames' clock): a segment begins at
    /// the first start point from there, listed with the cue's `EXT-X-DATERANGE`.
    pub fn cue(&mut self, at: Timestamp, info: SpliceInfo) {
        if let Some(at) = self.splices.cue(at, info) {
            self.fragmenter.splice_at(at);
        }
    }

    /// The publisher restarted: the next segment starts with a discontinuity.
    pub fn discontinuity(&mut self) {
        self.discontinuity = true;
    }

    /// Adds one frame; returns whether the timeline changed (a part or segment).
    pub fn push(&mut self, frame: &Frame, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let pushed = self.fragmenter.push(frame);
        let changed = self.drain(wall_clock_ms)?;
        pushed?;
        Ok(changed)
    }

    /// Records what the fragmenter made on the timeline; returns whether it changed.
    fn drain(&mut self, wall_clock_ms: i64) -> Result<bool, SegmentError> {
        let mut changed = false;
        let mut result = Ok(());
        while let Some(output) = self.fragmenter.poll_output() {
            let step = match output {
                Output::Init(bytes) => {
                    if self.timeline.kept().end > 0 {
                        self.discontinuity = true;
                    }
                    self.init = Some(bytes);
                    Ok(())
                }
                Output::Begin { dts, .. } => {
                    changed = true;
                    self.fragmenter.set_sequence(first_sequence(dts));
                    let rules = self.fragmenter.config().rules;
                    start_segment(
                        &mut self.timeline,
                        &rules,
                        &mut self.splices,
                        std::mem::take(&mut self.discontinuity),
                        wall_clock_ms,
                        dts,
                    )
                    .map(|_| ())
                    .map_err(SegmentError::from)
                }
                Output::Piece {
                    bytes,
                    duration,
                    independent,
                } => self.add_piece(bytes, duration, independent, &mut changed),
                Output::End { duration } => {
                    changed = true;
                    self.finish_segment(duration)
                }
                Output::Finished { .. } => Ok(()),
            };
            result = result.and(step);
        }
        result.map(|()| changed)
    }

    /// A fragment: a part (LL-HLS) or, without low latency, the whole segment.
    fn add_piece(
        &mut self,
        bytes: Bytes,
        duration: Timestamp,
        independent: bool,
        changed: &mut bool,
    ) -> Result<(), SegmentError> {
        let mut result = Ok(());
        if self.low_latency {
            *changed = true;
            match self.timeline.add_part(duration.max(1), independent) {
                Ok((msn, index)) => {
                    self.parts.insert((msn, index), bytes.clone());
                }
                Err(e) => result = Err(e.into()),
            }
        }
        self.open_parts.push(bytes);
        result
    }

    fn finish_segment(&mut self, duration: Timestamp) -> Result<(), SegmentError> {
        let pieces = std::mem::take(&mut self.open_parts);
        let released = self.timeline.end_segment(duration.max(1))?;
        let mut result = Ok(());
        if let Some(msn) = self.timeline.kept().end.checked_sub(1) {
            match self.sealed(msn, pieces) {
                Ok(pieces) => {
                    self.segments.insert(msn, pieces);
                }
                Err(e) => result = Err(e.into()),
            }
        }
        self.release(released);
        result
    }

    /// A completed segment's pieces as kept: encrypted into one when the config asks.
    fn sealed(&self, msn: u64, pieces: Vec<Bytes>) -> Result<Vec<Bytes>, HlsError> {
        match &self.keys {
            Some(keys) => Ok(vec![keys.encrypt(msn, &pieces)?]),
            None => Ok(pieces),
        }
    }

    fn release(&mut self, released: Vec<u64>) {
        for msn in released {
            self.segments.remove(&msn);
            self.parts.retain(|(m, _), _| *m != msn);
        }
    }

    /// The stream ended: the playlist is closed. A segment in progress with parts is
    /// completed by the timeline, and is then its parts.
    pub fn end(&mut self) {
        let open = self.timeline.in_progress();
        let released = self.timeline.end_stream();
        if let Some(msn) = open.filter(|m| self.timeline.kept().contains(m)) {
            let pieces = std::mem::take(&mut self.open_parts);
            // Only Low-Latency segments complete here, and encryption excludes it; a
            // failure leaves the segment out rather than in the clear.
            if let Ok(pieces) = self.sealed(msn, pieces) {
                self.segments.insert(msn, pieces);
            }
        }
        self.release(released);
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
    use sluice_media::{MediaKind, TrackConfig};

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
        for f in frames(11, 50) {
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
    fn a_cue_cuts_a_segment_at_its_splice_point_and_marks_it() {
        use crate::daterange::tests::insert;
        let s: Timestamp = 90_000;
        let mut ts = TsSegmenter::new(HlsConfig::default()).unwrap();
        let mut fmp4 = Fmp4Segmenter::new(HlsConfig::default()).unwrap();
        // Keyframes every second; 2 s segments begin at odd seconds (aligned slots).
        // A break from 5.5 s (met at the 6 s keyframe, inside a slot) to 8.5 s (met
        // at 9 s) of a planned 3 s.
        let out = insert(7, true, Some(s as u64 * 11 / 2), Some(3 * s as u64));
        let back = insert(7, false, Some(s as u64 * 17 / 2), None);
        for seg in [&mut ts as &mut dyn PushFrames, &mut fmp4] {
            seg.tracks(Some(&video()), Some(&audio()));
            let mut cued = false;
            for f in frames(12, 25) {
                // The cues come a second ahead, as a splicer sends them.
                if !cued && f.dts >= 4 * s {
                    seg.cue(s * 11 / 2, out.clone());
                    seg.cue(s * 17 / 2, back.clone());
                    cued = true;
                }
                // Wall clock: the frame's time, from 2025-11-24T16:00:00Z.
                seg.frame_at(&f, 1_764_000_000_000 + f.dts / 90);
            }
            let playlist = seg.playlist();
            let names: Vec<&str> = playlist.lines().filter(|l| !l.starts_with('#')).collect();
            assert_eq!(
                names,
                [
                    "90000.ts",
                    "270000.ts",
                    "450000.ts",
                    "540000.ts",
                    "630000.ts",
                    "810000.ts"
                ],
                "{playlist}"
            );
            let hex = |i: &SpliceInfo| i.raw.iter().map(|b| format!("{b:02X}")).collect::<String>();
            assert!(
                playlist.contains(&format!(
                    "#EXTINF:1.000,\n450000.ts\n\
                     #EXT-X-PROGRAM-DATE-TIME:2025-11-24T16:00:06.000Z\n\
                     #EXT-X-DATERANGE:ID=\"splice-7\",START-DATE=\"2025-11-24T16:00:06.000Z\",\
                     PLANNED-DURATION=3.000,SCTE35-OUT=0x{}\n",
                    hex(&out)
                )),
                "{playlist}"
            );
            assert!(
                playlist.contains(&format!(
                    "#EXT-X-PROGRAM-DATE-TIME:2025-11-24T16:00:09.000Z\n\
                     #EXT-X-DATERANGE:ID=\"splice-7\",START-DATE=\"2025-11-24T16:00:06.000Z\",\
                     DURATION=3.000,SCTE35-IN=0x{}\n",
                    hex(&back)
                )),
                "{playlist}"
            );
        }
    }

    #[test]
    fn fmp4_makes_parts_and_whole_segments() {
        let config = HlsConfig {
            part_duration_ms: 300,
            ..HlsConfig::default()
        };
        let mut seg = Fmp4Segmenter::new(config).unwrap();
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
    fn fmp4_segments_start_with_their_keyframe() {
        let mut seg = Fmp4Segmenter::new(HlsConfig::default()).unwrap();
        seg.set_tracks(Some(&video()), Some(&audio()));
        for f in frames(7, 25) {
            seg.push(&f, 0).unwrap();
        }
        assert_eq!(seg.timeline().kept(), 0..3);
        for (msn, pieces) in seg.segments() {
            let first = &pieces[0];
            let trun = first.windows(4).position(|w| w == b"trun").unwrap();
            // trun: flags, count, data offset, then the first sample's duration, size, flags.
            let at = trun + 24;
            let flags = u32::from_be_bytes(first[at..at + 4].try_into().unwrap());
            assert_eq!(
                flags,
                sluice_media::fmp4::SAMPLE_FLAGS_SYNC,
                "segment {msn} starts with its keyframe"
            );
        }
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
        fn frame(&mut self, frame: &Frame) {
            self.frame_at(frame, 0);
        }
        fn frame_at(&mut self, frame: &Frame, wall_clock_ms: i64);
        fn cue(&mut self, at: Timestamp, info: SpliceInfo);
        fn playlist(&self) -> String;
    }

    impl PushFrames for TsSegmenter {
        fn tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
            self.set_tracks(video, audio);
        }
        fn frame_at(&mut self, frame: &Frame, wall_clock_ms: i64) {
            self.push(frame, wall_clock_ms).unwrap();
        }
        fn cue(&mut self, at: Timestamp, info: SpliceInfo) {
            TsSegmenter::cue(self, at, info);
        }
        fn playlist(&self) -> String {
            let mut out = String::new();
            self.timeline().render(&Names, &mut out);
            out
        }
    }

    impl PushFrames for Fmp4Segmenter {
        fn tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
            self.set_tracks(video, audio);
        }
        fn frame_at(&mut self, frame: &Frame, wall_clock_ms: i64) {
            self.push(frame, wall_clock_ms).unwrap();
        }
        fn cue(&mut self, at: Timestamp, info: SpliceInfo) {
            Fmp4Segmenter::cue(self, at, info);
        }
        fn playlist(&self) -> String {
            let mut out = String::new();
            self.timeline().render(&Names, &mut out);
            out
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

    /// Names TS segments `N.ts` and parts `N.P.m4s`.
    struct Uris;

    impl crate::SegmentNames for Uris {
        fn segment(&self, name: u64, out: &mut String) {
            out.push_str(&format!("{name}.m4s"));
        }
        fn part(&self, name: u64, part: u32, out: &mut String) {
            out.push_str(&format!("{name}.{part}.m4s"));
        }
        fn init(&self, out: &mut String) {
            out.push_str("init.mp4");
        }
    }

    #[test]
    fn segmenters_started_at_different_keyframes_agree_on_names_numbers_and_bytes() {
        // Keyframes every second, 2 s segments: slot n holds the keyframes nearest
        // n * 2 s, so segments run from odd second to odd second. One server starts
        // segmenting at 0 s, another at 5 s (the first keyframe of slot 3), a third
        // at 6 s (the second).
        let all = frames(12, 25);
        let start_at = |seconds: i64| {
            let mut seg = Fmp4Segmenter::new(HlsConfig::default()).unwrap();
            seg.set_tracks(Some(&video()), Some(&audio()));
            for f in all.iter().filter(|f| f.dts >= seconds * 90_000) {
                seg.push(f, 0).unwrap();
            }
            seg
        };
        // Each listed segment as (msn, name, bytes).
        let listed = |s: &Fmp4Segmenter| {
            let mut text = String::new();
            s.timeline().render(&Uris, &mut text);
            let first: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
                .unwrap()
                .parse()
                .unwrap();
            let uris = text.lines().filter(|l| !l.starts_with('#'));
            (first..)
                .zip(uris)
                .map(|(msn, uri)| {
                    let name: u64 = uri.trim_end_matches(".m4s").parse().unwrap();
                    let bytes: Vec<u8> =
                        s.segments()[&msn].iter().flat_map(|b| b.to_vec()).collect();
                    (msn, name, bytes)
                })
                .collect::<Vec<_>>()
        };
        let a = listed(&start_at(0));
        let b = listed(&start_at(5));
        let c = listed(&start_at(6));
        let names =
            |l: &[(u64, u64, Vec<u8>)]| l.iter().map(|s| (s.0, s.1 / 90_000)).collect::<Vec<_>>();
        assert_eq!(names(&a), [(0, 0), (1, 1), (2, 3), (3, 5), (4, 7), (5, 9)]);
        assert_eq!(names(&b), [(3, 5), (4, 7), (5, 9)]);
        // The third began mid-slot: its first segment is its own, named for its start.
        assert_eq!(names(&c), [(3, 6), (4, 7), (5, 9)]);
        // From each one's second segment on, the bytes are the same too.
        assert_eq!(b[1..], a[4..]);
        assert_eq!(c[1..], a[4..]);
    }

    fn decrypt(keys: &SegmentKeys, msn: u64, data: &[u8]) -> Vec<u8> {
        use aws_lc_rs::cipher::{
            DecryptionContext, PaddedBlockDecryptingKey, UnboundCipherKey, AES_128,
        };
        let key = UnboundCipherKey::new(&AES_128, &keys.key(keys.period(msn))).unwrap();
        let key = PaddedBlockDecryptingKey::cbc_pkcs7(key).unwrap();
        let mut buf = data.to_vec();
        let iv = aws_lc_rs::iv::FixedLength::from(crate::iv(msn));
        key.decrypt(&mut buf, DecryptionContext::Iv128(iv))
            .unwrap()
            .to_vec()
    }

    #[test]
    fn encrypted_segments_decrypt_to_the_clear_ones_and_the_playlist_names_their_keys() {
        let secret = KeySecret::new([3; crate::SECRET_LEN]);
        let config = HlsConfig {
            low_latency: false,
            encryption: Encryption::Aes128 { rotation: 2 },
            ..HlsConfig::default()
        };
        let clear_config = HlsConfig {
            encryption: Encryption::None,
            ..config
        };
        let keys = SegmentKeys::new(&secret, 2).unwrap();
        let all = frames(13, 50);

        let mut ts = TsSegmenter::with_secret(config, Some(&secret)).unwrap();
        let mut clear = TsSegmenter::new(clear_config).unwrap();
        for seg in [&mut ts, &mut clear] {
            seg.set_tracks(Some(&video()), Some(&audio()));
            for f in &all {
                seg.push(f, 0).unwrap();
            }
        }
        assert_eq!(ts.timeline().kept(), 0..6);
        for (msn, sealed) in ts.segments() {
            assert_ne!(sealed[0], 0x47, "segment {msn} is not plain TS");
            assert_eq!(sealed.len() % 16, 0);
            assert_eq!(decrypt(&keys, *msn, sealed), clear.segments()[msn].to_vec());
        }
        let mut playlist = String::new();
        ts.timeline().render(&Names, &mut playlist);
        let keys_listed: Vec<&str> = playlist
            .lines()
            .filter(|l| l.starts_with("#EXT-X-KEY:"))
            .collect();
        assert_eq!(
            keys_listed,
            [
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/0\",IV=0x00000000000000000000000000000000",
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/0\",IV=0x00000000000000000000000000000001",
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/1\",IV=0x00000000000000000000000000000002",
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/1\",IV=0x00000000000000000000000000000003",
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/2\",IV=0x00000000000000000000000000000004",
                "#EXT-X-KEY:METHOD=AES-128,URI=\"key/2\",IV=0x00000000000000000000000000000005",
            ]
        );
        // Each key line just before its segment's duration.
        assert!(
            playlist.contains("IV=0x00000000000000000000000000000005\n#EXTINF:2.000,\n900000.ts\n"),
            "{playlist}"
        );
        // A player parses it (m3u8-rs reads the key's method, URI and IV).
        let parsed = m3u8_rs::parse_media_playlist_res(playlist.as_bytes()).unwrap();
        let key = parsed.segments[3].key.as_ref().expect("a key");
        assert_eq!(key.uri.as_deref(), Some("key/1"));
        assert_eq!(key.method, m3u8_rs::KeyMethod::AES128);

        let mut fmp4 = Fmp4Segmenter::with_secret(config, Some(&secret)).unwrap();
        let mut clear = Fmp4Segmenter::new(clear_config).unwrap();
        for seg in [&mut fmp4, &mut clear] {
            seg.set_tracks(Some(&video()), Some(&audio()));
            for f in &all {
                seg.push(f, 0).unwrap();
            }
        }
        assert_eq!(
            fmp4.init(),
            clear.init(),
            "the init segment stays in the clear"
        );
        assert!(fmp4.parts().is_empty());
        for (msn, sealed) in fmp4.segments() {
            assert_eq!(sealed.len(), 1, "one encrypted piece");
            let plain: Vec<u8> = clear.segments()[msn]
                .iter()
                .flat_map(|b| b.to_vec())
                .collect();
            assert_eq!(decrypt(&keys, *msn, &sealed[0]), plain);
        }
        let mut playlist = String::new();
        fmp4.timeline().render(&Uris, &mut playlist);
        let map = playlist.find("#EXT-X-MAP").unwrap();
        let first_key = playlist.find("#EXT-X-KEY").unwrap();
        assert!(map < first_key, "EXT-X-MAP before any key: {playlist}");
    }

    #[test]
    fn encryption_needs_a_secret_a_rotation_and_no_parts() {
        let config = HlsConfig {
            low_latency: false,
            encryption: Encryption::Aes128 { rotation: 5 },
            ..HlsConfig::default()
        };
        let secret = KeySecret::new([1; crate::SECRET_LEN]);
        assert!(matches!(TsSegmenter::new(config), Err(HlsError::NoSecret)));
        assert!(matches!(
            Fmp4Segmenter::new(config),
            Err(HlsError::NoSecret)
        ));
        let ll = HlsConfig {
            low_latency: true,
            ..config
        };
        assert!(matches!(
            Fmp4Segmenter::with_secret(ll, Some(&secret)),
            Err(HlsError::Config { .. })
        ));
        // TS has no parts: low latency is dropped there.
        assert!(TsSegmenter::with_secret(ll, Some(&secret)).is_ok());
        let never = HlsConfig {
            encryption: Encryption::Aes128 { rotation: 0 },
            ..config
        };
        assert!(matches!(
            TsSegmenter::with_secret(never, Some(&secret)),
            Err(HlsError::Config { .. })
        ));
    }
}
