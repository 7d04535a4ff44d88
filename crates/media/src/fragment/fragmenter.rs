//! [`Fragmenter`]: a live stream's tracks and frames in, init segments and fragments
//! out, cut where [`CutRules`] say.
//!
//! Why a state machine of its own: live HLS (segments and LL-HLS parts) and recording
//! (fragments of files) cut the same stream by the same rules and differ only in what
//! they do with the pieces: a timeline and memory for one, a file for the other.
//!
//! # Call contract
//! [`Fragmenter::set_tracks`] whenever the stream's decoder configuration changes,
//! [`Fragmenter::push`] for each frame in decode order, [`Fragmenter::flush`] when the
//! source pauses (it may come back), [`Fragmenter::finish`] when the output ends.
//! After each call, drain [`Fragmenter::poll_output`] to `None`. Nothing here reads a
//! clock: the caller stamps what it needs as it drains.
//!
//! # States
//! - No output: frames are dropped until a start point, which begins an output: an
//!   [`Output::Init`], then a fragment ([`Output::Begin`]).
//! - A fragment in progress: each frame may end it (a [`Cut`]): the bytes so far as an
//!   [`Output::Piece`] and [`Output::End`], then the next fragment begins with the frame.
//!   A part cut only yields a piece. A track change waits for a start point (of the new
//!   tracks' leader), where a new [`Output::Init`] comes between the fragments.
//! - Paused ([`Fragmenter::flush`]): no fragment; the next frame taken begins one. A
//!   video track waits for a keyframe.
//!
//! `finish` ends the output with [`Output::Finished`]: the next one gets a new init,
//! origin and sequence numbers.

use super::cut::{Cut, CutRules, Progress};
use super::muxer::{Muxer, FIRST_SEQUENCE};
use super::{Container, FragmentError, FRAME_OVERHEAD};
use crate::{Frame, MediaKind, Timestamp, Track};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Where an output's time 0 is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// At the decode time of its first frame (a start point); frames that decode
    /// earlier are dropped. Each output starts at 0 (a recording's `tfdt`).
    FirstFrame,
    /// At this decode time: the stream's timestamps pass through (MPEG-TS keeps them).
    At(Timestamp),
}

/// What a [`Fragmenter`] writes and where it cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmenterConfig {
    /// The container.
    pub container: Container,
    /// Where fragments and parts end.
    pub rules: CutRules,
    /// Where time 0 is.
    pub origin: Origin,
    /// A track added before the output's first piece joins it at once (a new
    /// [`Output::Init`] replaces the one before), instead of waiting for the next start
    /// point. For a recording whose publisher learns parameter sets in band, this
    /// makes one file rather than a short one and another.
    pub late_tracks_join: bool,
}

/// What the fragmenter made, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// What a reader needs before the pieces that follow: the fMP4 init segment, or
    /// the MPEG-TS PAT and PMT. Comes when an output begins and when its tracks
    /// change; one that comes before any piece replaces the one before.
    Init(Bytes),
    /// A fragment begins with the frame decoded at `dts`; `independent` when that is a
    /// start point.
    Begin {
        /// Decode time of its first frame.
        dts: Timestamp,
        /// Whether it starts at a start point.
        independent: bool,
    },
    /// The bytes of the fragment in progress since the last piece: a part, or (without
    /// parts) the whole fragment. Pieces of a fragment concatenated are the fragment.
    Piece {
        /// fMP4 `moof` + `mdat`, or MPEG-TS packets starting with the PAT and PMT.
        bytes: Bytes,
        /// Ticks from its start to the frame that ended it (or to the end of its media).
        duration: Timestamp,
        /// Whether its first frame is a start point.
        independent: bool,
    },
    /// The fragment ended.
    End {
        /// Ticks from its start to the frame that ended it (or to the end of its media).
        duration: Timestamp,
    },
    /// [`Fragmenter::finish`] ended the output.
    Finished {
        /// Ticks from its origin to the end of its media.
        duration: Timestamp,
    },
}

/// The output in progress, as far as one init segment describes it.
#[derive(Debug)]
struct Run {
    muxer: Muxer,
    fragment: Option<Open>,
    /// Pieces written since the init segment: late tracks join only before the first.
    pieces: u64,
    /// The video track waits for a keyframe (at the start, and after a flush).
    video_waits: bool,
}

/// The fragment in progress.
#[derive(Debug, Clone, Copy)]
struct Open {
    start: Timestamp,
    part_start: Timestamp,
    part_independent: bool,
    bytes: usize,
}

/// Cuts one stream into fragments; see the module docs for the call contract.
#[derive(Debug)]
pub struct Fragmenter {
    config: FragmenterConfig,
    /// The stream's tracks that the container carries, as last set.
    video: Option<Track>,
    audio: Option<Track>,
    /// The output's tracks differ from the stream's.
    changed: bool,
    run: Option<Run>,
    /// The output's origin, kept across track changes.
    origin: Option<Timestamp>,
    /// The next `mfhd` sequence number while no run holds it.
    sequence: u32,
    /// Splice points ([`Fragmenter::splice_at`]) not reached yet, at most
    /// [`MAX_SPLICES`].
    splices: VecDeque<Timestamp>,
    out: VecDeque<Output>,
}

/// Splice points waiting at once: a feed's cues come seconds apart, so more is a
/// source gone wrong, and the oldest are dropped.
pub const MAX_SPLICES: usize = 32;

impl Fragmenter {
    /// A fragmenter with no tracks and no output.
    pub fn new(config: FragmenterConfig) -> Fragmenter {
        Fragmenter {
            config,
            video: None,
            audio: None,
            changed: false,
            run: None,
            origin: None,
            sequence: FIRST_SEQUENCE,
            splices: VecDeque::new(),
            out: VecDeque::new(),
        }
    }

    /// Asks for a fragment boundary at the first start point that decodes at or after
    /// `dts` (an ad splice point: players switch content at segment boundaries), on
    /// top of the cut rules. A point the fragment in progress began at or after is
    /// met already.
    pub fn splice_at(&mut self, dts: Timestamp) {
        if self.splices.len() == MAX_SPLICES {
            self.splices.pop_front();
        }
        self.splices.push_back(dts);
    }

    /// Whether a start point at `dts` ends a fragment begun at `start` for a splice
    /// point; forgets the points it meets.
    fn splice_due(&mut self, dts: Timestamp, start: Timestamp) -> bool {
        let mut due = false;
        self.splices.retain(|&at| {
            due |= at > start && at <= dts;
            at > dts
        });
        due
    }

    /// The configuration.
    pub fn config(&self) -> &FragmenterConfig {
        &self.config
    }

    /// The stream's tracks now; either may be absent, and tracks the container does not
    /// carry are left out. A change takes effect at the next start point (of the new
    /// tracks), except that with [`FragmenterConfig::late_tracks_join`] a track added
    /// before the output's first piece joins at once. On error the output ended (the
    /// init segment with the joined track could not be written).
    pub fn set_tracks(
        &mut self,
        video: Option<&Track>,
        audio: Option<&Track>,
    ) -> Result<(), FragmentError> {
        let container = self.config.container;
        self.video = video.filter(|t| container.carries(t)).cloned();
        self.audio = audio.filter(|t| container.carries(t)).cloned();
        let Fragmenter {
            run,
            out,
            config,
            video,
            audio,
            ..
        } = self;
        let mut result = Ok(());
        if let Some(r) = run.as_mut() {
            if config.late_tracks_join && r.pieces == 0 {
                match r.muxer.join(video.as_ref(), audio.as_ref()) {
                    Ok(true) => {
                        let mut init = BytesMut::new();
                        match r.muxer.write_init(&mut init) {
                            Ok(()) => out.push_back(Output::Init(init.freeze())),
                            Err(e) => {
                                *run = None;
                                result = Err(e);
                            }
                        }
                    }
                    Ok(false) => {}
                    // The change waits for a start point, as any other.
                    Err(e) => result = Err(e),
                }
            }
        }
        self.changed = self.run.as_ref().is_some_and(|r| {
            r.muxer.track(MediaKind::Video) != self.video.as_ref()
                || r.muxer.track(MediaKind::Audio) != self.audio.as_ref()
        });
        result
    }

    /// Whether `frame` is a start point: a video keyframe, or an audio frame of a
    /// stream without video (by the tracks last set).
    pub fn is_start(&self, frame: &Frame) -> bool {
        match frame.kind {
            MediaKind::Video => self.video.is_some() && frame.keyframe,
            MediaKind::Audio => self.audio.is_some() && self.video.is_none(),
        }
    }

    /// The stream's track of `kind`, as last set, if the container carries it.
    pub fn track(&self, kind: MediaKind) -> Option<&Track> {
        match kind {
            MediaKind::Video => self.video.as_ref(),
            MediaKind::Audio => self.audio.as_ref(),
        }
    }

    /// Whether tracks of `kind` lead the cutting: video, or audio without video.
    fn leads(&self, kind: MediaKind) -> bool {
        kind == MediaKind::Video || self.video.is_none()
    }

    /// Whether an output is in progress (since a start point, until `finish`).
    pub fn has_output(&self) -> bool {
        self.run.is_some()
    }

    /// Whether the output's tracks differ from the stream's (a change waiting for a
    /// start point).
    pub fn tracks_changed(&self) -> bool {
        self.changed
    }

    /// The output's time 0, while there is one.
    pub fn origin(&self) -> Option<Timestamp> {
        self.run.as_ref().map(|r| r.muxer.origin())
    }

    /// Numbers the next fragment (fMP4 `mfhd`) `sequence`; the ones after follow it.
    /// Live HLS numbers each segment's first fragment from its start time, so two
    /// servers write the same bytes for the same segment.
    pub fn set_sequence(&mut self, sequence: u32) {
        match self.run.as_mut() {
            Some(r) => r.muxer.set_sequence(sequence),
            None => self.sequence = sequence,
        }
    }

    /// Decode time of the newest frame of `kind` in the output.
    pub fn last_dts(&self, kind: MediaKind) -> Option<Timestamp> {
        self.run.as_ref().and_then(|r| r.muxer.last_dts(kind))
    }

    /// Ticks from the output's origin to the end of its media written so far (whose
    /// durations are known), while there is an output.
    pub fn duration(&self) -> Option<Timestamp> {
        let r = self.run.as_ref()?;
        let origin = r.muxer.origin();
        Some(
            r.muxer
                .end()
                .unwrap_or(origin)
                .saturating_sub(origin)
                .max(0),
        )
    }

    /// One frame, in decode order. A frame of a kind without a track is ignored; one
    /// before the output's first start point is dropped. On error the media of the
    /// piece it completed (or the frames that failed, in MPEG-TS) was dropped.
    pub fn push(&mut self, frame: &Frame) -> Result<(), FragmentError> {
        if self.track(frame.kind).is_none() {
            return Ok(());
        }
        let start = self.is_start(frame);
        let leader = self.leads(frame.kind);
        let mut result = Ok(());
        match &self.run {
            None => {
                if !start {
                    return Ok(());
                }
                let origin = match self.config.origin {
                    Origin::FirstFrame => self.origin.unwrap_or(frame.dts),
                    Origin::At(t) => t,
                };
                self.begin_run(origin)?;
                self.origin = Some(origin);
            }
            Some(run) => match run.fragment {
                Some(open) => {
                    let progress = Progress {
                        start: open.start,
                        fragment: frame.dts.saturating_sub(open.start),
                        part: frame.dts.saturating_sub(open.part_start),
                        bytes: open.bytes,
                    };
                    let splice = start && self.splice_due(frame.dts, open.start);
                    let cut = if start && (self.changed || splice) {
                        Some(Cut::Fragment)
                    } else {
                        self.config.rules.cut(&progress, start, leader)
                    };
                    if let Some(cut) = cut {
                        result = self.cut(cut, frame, start, open);
                    }
                }
                // Paused: the next fragment begins with the frame, on new tracks if
                // they changed and it can start them.
                None if start && self.changed => result = self.replace_run(),
                None => {}
            },
        }
        self.take(frame, start);
        result
    }

    /// Ends the fragment or part in progress before `frame`: its track's newest sample
    /// lasts until it, so the next piece starts with it.
    fn cut(
        &mut self,
        cut: Cut,
        frame: &Frame,
        start: bool,
        open: Open,
    ) -> Result<(), FragmentError> {
        let Fragmenter { run, out, .. } = self;
        let Some(r) = run.as_mut() else {
            return Ok(());
        };
        r.muxer.end_sample(frame.kind, frame.dts);
        let duration = frame.dts.saturating_sub(open.part_start).max(0);
        let result = write_piece(r, duration, open.part_independent, out);
        match cut {
            Cut::Part => {
                r.fragment = Some(Open {
                    part_start: frame.dts,
                    part_independent: start,
                    ..open
                });
                result
            }
            Cut::Fragment => {
                r.fragment = None;
                out.push_back(Output::End {
                    duration: frame.dts.saturating_sub(open.start).max(0),
                });
                if start && self.changed {
                    result.and(self.replace_run())
                } else {
                    result
                }
            }
        }
    }

    /// A new output's first run: an init segment for the stream's tracks.
    fn begin_run(&mut self, origin: Timestamp) -> Result<(), FragmentError> {
        let mut muxer = Muxer::new(
            self.config.container,
            self.video.as_ref(),
            self.audio.as_ref(),
            origin,
        )?;
        muxer.set_sequence(self.sequence);
        let mut init = BytesMut::new();
        muxer.write_init(&mut init)?;
        self.out.push_back(Output::Init(init.freeze()));
        self.run = Some(Run {
            muxer,
            fragment: None,
            pieces: 0,
            video_waits: true,
        });
        self.changed = false;
        Ok(())
    }

    /// The stream's tracks replace the output's, between two fragments: same origin,
    /// sequence numbers go on, a new init segment. On error the output waits for the
    /// next start point.
    fn replace_run(&mut self) -> Result<(), FragmentError> {
        let Some(old) = self.run.take() else {
            return Ok(());
        };
        self.sequence = old.muxer.sequence();
        self.begin_run(old.muxer.origin())
    }

    /// Takes `frame` into the fragment in progress (beginning one if there is none),
    /// unless its track waits for a keyframe or it decodes before the origin.
    fn take(&mut self, frame: &Frame, start: bool) {
        let Fragmenter {
            run, out, config, ..
        } = self;
        let Some(r) = run.as_mut() else { return };
        let Some(last) = r
            .muxer
            .track(frame.kind)
            .map(|_| r.muxer.last_dts(frame.kind))
        else {
            return;
        };
        if frame.kind == MediaKind::Video && r.video_waits && !frame.keyframe {
            return;
        }
        // As clamped: only a track's first frame can decode before the origin.
        let dts = last.map_or(frame.dts, |l| l.max(frame.dts));
        if config.origin == Origin::FirstFrame && dts < r.muxer.origin() {
            return;
        }
        let open = r.fragment.get_or_insert_with(|| {
            out.push_back(Output::Begin {
                dts: frame.dts,
                independent: start,
            });
            Open {
                start: frame.dts,
                part_start: frame.dts,
                part_independent: start,
                bytes: 0,
            }
        });
        open.bytes = open
            .bytes
            .saturating_add(frame.payload.len())
            .saturating_add(FRAME_OVERHEAD);
        r.muxer.take(frame);
        if frame.kind == MediaKind::Video {
            r.video_waits = false;
        }
    }

    /// The source paused and may come back: everything taken so far goes out as a
    /// piece (last durations estimated) and the fragment ends. The next frame taken
    /// begins a fragment; a video track waits for a keyframe.
    pub fn flush(&mut self) -> Result<(), FragmentError> {
        let Fragmenter { run, out, .. } = self;
        let Some(r) = run.as_mut() else {
            return Ok(());
        };
        r.muxer.end_all();
        r.video_waits = true;
        let Some(open) = r.fragment.take() else {
            return Ok(());
        };
        let end = r.muxer.end().unwrap_or(open.start);
        let result = write_piece(
            r,
            end.saturating_sub(open.part_start).max(0),
            open.part_independent,
            out,
        );
        out.push_back(Output::End {
            duration: end.saturating_sub(open.start).max(0),
        });
        result
    }

    /// Ends the output: the fragment in progress goes out whole, then
    /// [`Output::Finished`]. With `cut`, the decode time of the start point that ends it
    /// (the first of the next output): the leading track's newest sample lasts until
    /// then; other last durations are estimated.
    pub fn finish(&mut self, cut: Option<Timestamp>) -> Result<(), FragmentError> {
        let Some(mut r) = self.run.take() else {
            return Ok(());
        };
        if let Some(cut) = cut {
            let leader = if r.muxer.track(MediaKind::Video).is_some() {
                MediaKind::Video
            } else {
                MediaKind::Audio
            };
            r.muxer.end_sample(leader, cut);
        }
        r.muxer.end_all();
        let origin = r.muxer.origin();
        let end = r.muxer.end().unwrap_or(origin);
        let mut result = Ok(());
        if let Some(open) = r.fragment.take() {
            result = write_piece(
                &mut r,
                end.saturating_sub(open.part_start).max(0),
                open.part_independent,
                &mut self.out,
            );
            self.out.push_back(Output::End {
                duration: end.saturating_sub(open.start).max(0),
            });
        }
        self.out.push_back(Output::Finished {
            duration: end.saturating_sub(origin).max(0),
        });
        self.origin = None;
        self.sequence = FIRST_SEQUENCE;
        self.changed = false;
        result
    }

    /// The next output, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}

/// Writes the samples of `run` that are ready as one piece, if there are any.
fn write_piece(
    run: &mut Run,
    duration: Timestamp,
    independent: bool,
    out: &mut VecDeque<Output>,
) -> Result<(), FragmentError> {
    if !run.muxer.has_fragment() {
        return Ok(());
    }
    let mut bytes = BytesMut::new();
    let result = run.muxer.write_fragment(&mut bytes);
    if !bytes.is_empty() {
        run.pieces = run.pieces.saturating_add(1);
        out.push_back(Output::Piece {
            bytes: bytes.freeze(),
            duration,
            independent,
        });
    }
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{AacConfig, AvcConfig};
    use crate::fmp4::SAMPLE_FLAGS_SYNC;
    use crate::TrackConfig;

    fn video() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        ))
    }

    fn audio() -> Track {
        Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("ASC"),
        ))
    }

    /// 25 fps video from frame `from` (a keyframe every `gop`), with 48 kHz AAC.
    fn frames(from: i64, count: i64, gop: i64) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut audio_dts = from * 3600;
        for n in from..from + count {
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
            out.push(Frame {
                kind: MediaKind::Video,
                dts,
                pts: dts,
                keyframe: key,
                payload: Bytes::from(vec![0, 0, 0, 2, if key { 0x65 } else { 0x41 }, 0x80]),
            });
        }
        out
    }

    fn config(rules: CutRules) -> FragmenterConfig {
        FragmenterConfig {
            container: Container::Fmp4,
            rules,
            origin: Origin::FirstFrame,
            late_tracks_join: false,
        }
    }

    fn drain(f: &mut Fragmenter) -> Vec<Output> {
        std::iter::from_fn(|| f.poll_output()).collect()
    }

    /// The sample flags of the first sample of a fragment's first run.
    fn first_flags(fragment: &[u8]) -> u32 {
        let pos = fragment
            .windows(4)
            .position(|w| w == b"trun")
            .expect("trun");
        let f = pos + 4 + 4 + 4 + 4 + 4 + 4;
        u32::from_be_bytes(fragment[f..f + 4].try_into().expect("4 bytes"))
    }

    #[test]
    fn fragments_begin_at_the_keyframe_that_cut_them() {
        let mut f = Fragmenter::new(config(CutRules::at_start_points(90_000)));
        f.set_tracks(Some(&video()), Some(&audio()))
            .expect("tracks");
        for frame in frames(0, 100, 25) {
            f.push(&frame).expect("push");
        }
        let out = drain(&mut f);
        assert!(matches!(out.first(), Some(Output::Init(_))));
        let pieces: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Piece {
                    bytes, duration, ..
                } => Some((bytes, *duration)),
                _ => None,
            })
            .collect();
        assert_eq!(pieces.len(), 3, "cut at 1, 2 and 3 s");
        for (bytes, duration) in pieces {
            assert_eq!(duration, 90_000);
            assert_eq!(first_flags(bytes), SAMPLE_FLAGS_SYNC);
        }
        let ends = out
            .iter()
            .filter(|o| matches!(o, Output::End { duration: 90_000 }))
            .count();
        assert_eq!(ends, 3);
    }

    #[test]
    fn a_splice_point_ends_the_fragment_at_the_next_keyframe_only() {
        // Keyframes every 1 s, fragments of 4 s: without splices, cuts at 4 and 8 s.
        let mut f = Fragmenter::new(config(CutRules::at_start_points(360_000)));
        f.set_tracks(Some(&video()), Some(&audio()))
            .expect("tracks");
        // 5.5 s is met at the 6 s keyframe; 0 s (where the first fragment begins) and
        // 9 s (a keyframe) are met where they are; 20 s is never reached.
        for at in [0, 495_000, 810_000, 1_800_000] {
            f.splice_at(at);
        }
        for frame in frames(0, 300, 25) {
            f.push(&frame).expect("push");
        }
        let begins: Vec<Timestamp> = drain(&mut f)
            .iter()
            .filter_map(|o| match o {
                Output::Begin { dts, .. } => Some(*dts),
                _ => None,
            })
            .collect();
        let s = 90_000;
        assert_eq!(begins, [0, 4 * s, 6 * s, 9 * s]);
        assert_eq!(f.splices.len(), 1, "the one beyond the frames waits");
    }

    #[test]
    fn splice_points_are_bounded() {
        let mut f = Fragmenter::new(config(CutRules::at_start_points(90_000)));
        for at in 0..1000 {
            f.splice_at(at);
        }
        assert_eq!(f.splices.len(), MAX_SPLICES);
        assert_eq!(f.splices.front(), Some(&(1000 - MAX_SPLICES as Timestamp)));
    }

    #[test]
    fn parts_are_cut_on_the_leader_and_add_up_to_the_fragment() {
        let mut f = Fragmenter::new(config(CutRules {
            part_ticks: Some(27_000),
            ..CutRules::at_start_points(180_000)
        }));
        f.set_tracks(Some(&video()), Some(&audio()))
            .expect("tracks");
        for frame in frames(0, 51, 50) {
            f.push(&frame).expect("push");
        }
        let out = drain(&mut f);
        let parts: Vec<(Timestamp, bool)> = out
            .iter()
            .filter_map(|o| match o {
                Output::Piece {
                    duration,
                    independent,
                    ..
                } => Some((*duration, *independent)),
                _ => None,
            })
            .collect();
        // 300 ms parts at 25 fps are 320 ms; 2 s is six of them and 80 ms.
        assert_eq!(parts.len(), 7);
        assert_eq!(parts.iter().map(|p| p.0).sum::<Timestamp>(), 180_000);
        assert!(parts[0].1 && parts[1..].iter().all(|p| !p.1));
        assert!(out.contains(&Output::End { duration: 180_000 }));
    }

    #[test]
    fn a_track_change_waits_for_a_start_point_of_the_new_tracks() {
        let mut f = Fragmenter::new(config(CutRules::at_start_points(90_000)));
        f.set_tracks(None, Some(&audio())).expect("tracks");
        let all = frames(0, 100, 25);
        for frame in &all[..60] {
            f.push(frame).expect("push");
        }
        f.set_tracks(Some(&video()), Some(&audio()))
            .expect("tracks");
        assert!(f.tracks_changed());
        for frame in &all[60..] {
            f.push(frame).expect("push");
        }
        let out = drain(&mut f);
        let inits: Vec<usize> = out
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, Output::Init(_)))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(inits.len(), 2);
        // The second init comes after an End and before the Begin of a keyframe.
        assert!(matches!(out[inits[1] - 1], Output::End { .. }));
        assert!(matches!(
            out[inits[1] + 1],
            Output::Begin {
                dts: 90_000,
                independent: true
            }
        ));
        assert!(!f.tracks_changed());
    }

    #[test]
    fn late_tracks_join_before_the_first_piece_only_when_asked() {
        for join in [false, true] {
            let mut f = Fragmenter::new(FragmenterConfig {
                late_tracks_join: join,
                ..config(CutRules::at_start_points(90_000))
            });
            f.set_tracks(Some(&video()), None).expect("tracks");
            let all = frames(0, 50, 25);
            f.push(&all[1]).expect("keyframe");
            f.set_tracks(Some(&video()), Some(&audio()))
                .expect("tracks");
            assert_eq!(f.tracks_changed(), !join);
            let inits = drain(&mut f)
                .iter()
                .filter(|o| matches!(o, Output::Init(_)))
                .count();
            assert_eq!(inits, if join { 2 } else { 1 });
        }
    }

    #[test]
    fn flush_estimates_and_finish_starts_over() {
        let mut f = Fragmenter::new(FragmenterConfig {
            rules: CutRules::at_start_points(10 * 90_000),
            ..config(CutRules::at_start_points(0))
        });
        f.set_tracks(Some(&video()), None).expect("tracks");
        for frame in frames(0, 10, 25) {
            f.push(&frame).expect("push");
        }
        f.flush().expect("flush");
        assert_eq!(f.duration(), Some(10 * 3600));
        let out = drain(&mut f);
        assert!(matches!(out.last(), Some(Output::End { duration: 36_000 })));
        // After the flush a P-frame waits; the keyframe begins a fragment.
        let later: Vec<Frame> = frames(24, 2, 25)
            .into_iter()
            .filter(|f| f.kind == MediaKind::Video)
            .collect();
        f.push(&later[0]).expect("P");
        assert!(drain(&mut f).is_empty());
        f.push(&later[1]).expect("I");
        assert!(matches!(
            drain(&mut f)[..],
            [Output::Begin {
                dts: 90_000,
                independent: true
            }]
        ));
        f.finish(None).expect("finish");
        let out = drain(&mut f);
        assert!(matches!(
            out.last(),
            Some(Output::Finished { duration: 93_600 })
        ));
        assert!(!f.has_output());
        // A new output starts at its own origin.
        for frame in frames(100, 2, 25) {
            f.push(&frame).expect("push");
        }
        assert_eq!(f.origin(), Some(100 * 3600));
    }

    #[test]
    fn forced_and_size_cuts_bound_a_fragment() {
        let mut f = Fragmenter::new(config(CutRules {
            forced_cut_factor: Some(4),
            max_bytes: Some(1000),
            ..CutRules::at_start_points(90_000)
        }));
        f.set_tracks(Some(&video()), None).expect("tracks");
        for frame in frames(0, 250, 1000) {
            f.push(&frame).expect("push");
        }
        // 70 bytes a frame: a cut every 15 frames, well before 4 s.
        let pieces = drain(&mut f)
            .iter()
            .filter(|o| matches!(o, Output::Piece { .. }))
            .count();
        assert_eq!(pieces, 250 / 15);
    }
}
