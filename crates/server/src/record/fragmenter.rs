//! The recording fragmenter: a stream's tracks and frames in, the bytes of recording
//! files out — a header (the fMP4 init segment, or the MPEG-TS tables), then whole
//! fragments — with the decisions of where a fragment ends and where a file begins.
//!
//! Why sans-IO: cutting at keyframes, sample durations, rotation, track changes and
//! timestamps that jump are pure logic, tested here with frame vectors. The writer
//! thread only opens, appends, patches, syncs and closes what [`Output`] says.
//!
//! # Call contract
//! [`Fragmenter::set_tracks`] whenever the stream's decoder configuration changes,
//! [`Fragmenter::push`] for each frame in decode order, [`Fragmenter::flush`] when the
//! publisher leaves (it may come back), [`Fragmenter::finish`] when the stream ends.
//! After each call, drain [`Fragmenter::poll_output`] to `None`.
//!
//! # Invariants
//! - A file starts at a start point: a video keyframe, or any audio frame of a stream
//!   without video. Frames before it are dropped. Its header is written with its first
//!   fragment, so a track configured moments after the first frame (RTSP learns
//!   parameter sets in band) joins the file instead of starting another.
//! - A fragment holds only samples whose duration is known: the last sample of each
//!   track waits for its successor, except the leader's at a cut (the cutting frame
//!   gives it) and every track's at a flush (its duration is estimated). So a fragment
//!   cut at a keyframe starts with it.
//! - A file is complete after each fragment: the writer appends fragments whole, so a
//!   file cut at any moment plays up to its last complete fragment.
//! - Memory: the samples of one fragment, which [`MAX_FRAGMENT_BYTES`] and
//!   [`FORCED_CUT_FACTOR`] bound whatever the publisher sends.
//! - Per track, decode times never go backwards in a file: a small step back is clamped,
//!   a jump of more than [`CLAMP_TICKS`] back or [`MAX_GAP_TICKS`] forward ends the file.

use bytes::{Bytes, BytesMut};
use sluice_media::fmp4::{self, Fmp4Error, InitTrack, Sample, TrackRun};
use sluice_media::ts::{TsError, TsMuxer};
use sluice_media::{Frame, MediaKind, Timestamp, Track, TrackConfig, CLOCK_HZ};
use std::collections::VecDeque;

/// Largest fragment in bytes of media: a stream that sends no keyframe for a long time,
/// or absurdly large frames, gets a fragment cut here, so the writer never holds more.
/// 16 MiB is several seconds of 4K video.
pub const MAX_FRAGMENT_BYTES: usize = 16 << 20;
/// Counted per frame on top of its payload, so floods of tiny frames are bounded too.
const FRAME_OVERHEAD: usize = 64;
/// A fragment is cut after this many fragment durations even without a keyframe: the
/// loss on `kill -9` stays bounded when the GOP is long.
pub const FORCED_CUT_FACTOR: i64 = 4;
/// A decode time this far (or less) behind its track's last one is clamped to it
/// (encoders and RTP clocks jitter by a few ms); further back starts a new file.
pub const CLAMP_TICKS: Timestamp = CLOCK_HZ as Timestamp / 2;
/// A decode time this far past its track's last one starts a new file: the source
/// jumped, and one sample must not last half a minute.
pub const MAX_GAP_TICKS: Timestamp = 30 * CLOCK_HZ as Timestamp;
/// Fragments of one file are numbered from 1 (`mfhd` sequence numbers).
const FIRST_SEQUENCE: u32 = 1;

/// The container of recording files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Fragmented MP4: `ftyp` + `moov` (with `mvex`), then `moof` + `mdat` pairs.
    Fmp4,
    /// MPEG-TS: PAT and PMT at the start of each fragment, then PES packets.
    Ts,
}

impl Format {
    /// Parses a configuration value (`fmp4` or `ts`).
    pub fn parse(value: &str) -> Option<Format> {
        match value {
            "fmp4" => Some(Format::Fmp4),
            "ts" => Some(Format::Ts),
            _ => None,
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Fmp4 => "mp4",
            Format::Ts => "ts",
        }
    }

    /// Whether this container can carry `track`.
    fn carries(self, track: &Track) -> bool {
        match self {
            Format::Fmp4 => matches!(
                track.config,
                TrackConfig::H264(_)
                    | TrackConfig::H265(_)
                    | TrackConfig::Aac(_)
                    | TrackConfig::Opus(_)
            ),
            Format::Ts => match track.kind() {
                MediaKind::Video => TsMuxer::new(Some(track), None).is_ok(),
                MediaKind::Audio => TsMuxer::new(None, Some(track)).is_ok(),
            },
        }
    }
}

/// Where fragments and files end.
#[derive(Debug, Clone, Copy)]
pub struct FragmenterConfig {
    /// The container.
    pub format: Format,
    /// A fragment ends at the first start point this long (90 kHz ticks) after its start.
    pub fragment_ticks: Timestamp,
    /// A file ends at the first start point this long after its start.
    pub rotate_ticks: Timestamp,
}

/// What the writer does next, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Create a new file and write `header`. A file before it got its [`Output::End`]
    /// first.
    Begin {
        /// The init segment or the tables.
        header: Bytes,
        /// Wall-clock time (Unix ms) when the file's first frame was pushed, for its name.
        unix_ms: i64,
    },
    /// Append these bytes (one whole fragment) to the current file.
    Append(Bytes),
    /// Overwrite the bytes at `offset` of the current file (the duration in the header).
    Patch {
        /// From the start of the file.
        offset: u64,
        /// The new bytes.
        bytes: [u8; 4],
    },
    /// The file is consistent and complete as it is: make it durable.
    Sync,
    /// The current file is complete; close it.
    End {
        /// From its first sample to the end of its last one.
        duration_ms: u64,
    },
}

/// Why media was dropped. The recording goes on with the next fragment or file.
#[derive(Debug, thiserror::Error)]
pub enum FragmentError {
    /// The fMP4 writer refused the tracks or the samples.
    #[error("fmp4: {0}")]
    Fmp4(#[from] Fmp4Error),
    /// The MPEG-TS muxer refused the tracks or a frame.
    #[error("ts: {0}")]
    Ts(#[from] TsError),
}

/// One sample with its decode time and, once committed, its duration.
#[derive(Debug)]
struct Pending {
    dts: Timestamp,
    pts: Timestamp,
    keyframe: bool,
    data: Bytes,
}

/// A sample whose duration is known, waiting for its fragment.
#[derive(Debug)]
struct Committed {
    sample: Pending,
    /// In the track's timescale.
    duration: u32,
}

/// One track of the file in progress.
#[derive(Debug)]
struct FileTrack {
    id: u32,
    kind: MediaKind,
    track: Track,
    /// Ticks per second of sample times in the file: 90 kHz for video, the sample rate
    /// for audio.
    timescale: u32,
    /// Whether the track has taken a sample since the file began or the last flush; a
    /// video track (re)starts at a keyframe.
    started: bool,
    last_dts: Option<Timestamp>,
    /// The newest sample, waiting for its successor to know its duration.
    pending: Option<Pending>,
    samples: Vec<Committed>,
    /// Duration of the newest committed sample, the estimate for a last sample.
    last_duration: u32,
    /// End of the newest committed sample (90 kHz).
    end: Option<Timestamp>,
}

impl FileTrack {
    fn new(id: u32, track: &Track) -> FileTrack {
        let (timescale, default_duration) = match &track.config {
            TrackConfig::Aac(c) => (c.sample_rate.max(1), 1024),
            TrackConfig::Opus(_) => (48_000, 960),
            TrackConfig::Mp3 { sample_rate, .. } => ((*sample_rate).max(1), 1152),
            TrackConfig::Pcma { .. } | TrackConfig::Pcmu { .. } => (8000, 160),
            // 25 fps until the track shows its own frame rate.
            _ => (CLOCK_HZ, CLOCK_HZ / 25),
        };
        FileTrack {
            id,
            kind: track.kind(),
            track: track.clone(),
            timescale,
            started: false,
            last_dts: None,
            pending: None,
            samples: Vec::new(),
            last_duration: default_duration,
            end: None,
        }
    }

    /// `dts` (90 kHz) in the track's timescale, counted from the file's origin.
    fn scaled(&self, dts: Timestamp, origin: Timestamp) -> i128 {
        i128::from(dts.saturating_sub(origin)) * i128::from(self.timescale) / i128::from(CLOCK_HZ)
    }

    /// Gives `sample` its duration: up to `next_dts` when known, else the estimate.
    fn commit(&mut self, sample: Pending, next_dts: Option<Timestamp>, origin: Timestamp) {
        let duration = match next_dts {
            Some(next) => {
                let d = self.scaled(next, origin) - self.scaled(sample.dts, origin);
                let d = u32::try_from(d.max(1)).unwrap_or(u32::MAX);
                self.last_duration = d;
                d
            }
            None => self.last_duration,
        };
        let ticks = i64::from(duration) * i64::from(CLOCK_HZ) / i64::from(self.timescale);
        let end = sample.dts.saturating_add(ticks);
        self.end = Some(self.end.map_or(end, |e| e.max(end)));
        self.samples.push(Committed { sample, duration });
    }
}

/// The file in progress.
#[derive(Debug)]
struct File {
    video: Option<FileTrack>,
    audio: Option<FileTrack>,
    /// Decode time of the file's first sample: time 0 of every track.
    origin: Timestamp,
    /// Decode time of the first sample taken since the last cut.
    fragment_start: Option<Timestamp>,
    /// Media bytes (plus per-frame overhead) taken since the last cut.
    fragment_bytes: usize,
    /// The next fragment's sequence number.
    sequence: u32,
    /// Bytes handed to the writer for this file; 0 until its header is out.
    written: u64,
    /// Wall-clock time (Unix ms) of the file's first frame.
    unix_ms: i64,
    /// Where the movie duration (`mvhd`, milliseconds) is in the header.
    duration_field: Option<u64>,
    /// The MPEG-TS muxer, made with the header.
    ts: Option<TsMuxer>,
}

impl File {
    fn new(origin: Timestamp, unix_ms: i64, video: Option<&Track>, audio: Option<&Track>) -> File {
        let mut file = File {
            video: None,
            audio: None,
            origin,
            fragment_start: None,
            fragment_bytes: 0,
            sequence: FIRST_SEQUENCE,
            written: 0,
            unix_ms,
            duration_field: None,
            ts: None,
        };
        file.adopt(video, audio);
        file
    }

    /// Adds the tracks the file lacks. Track ids are fixed per kind, so a track that
    /// joins does not renumber the other.
    fn adopt(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        if self.video.is_none() {
            self.video = video.map(|t| FileTrack::new(1, t));
        }
        if self.audio.is_none() {
            self.audio = audio.map(|t| FileTrack::new(2, t));
        }
    }

    fn header_written(&self) -> bool {
        self.written > 0
    }

    fn track_mut(&mut self, kind: MediaKind) -> Option<&mut FileTrack> {
        match kind {
            MediaKind::Video => self.video.as_mut(),
            MediaKind::Audio => self.audio.as_mut(),
        }
    }

    fn tracks_mut(&mut self) -> impl Iterator<Item = &mut FileTrack> {
        [self.video.as_mut(), self.audio.as_mut()]
            .into_iter()
            .flatten()
    }

    fn tracks(&self) -> impl Iterator<Item = &FileTrack> {
        [self.video.as_ref(), self.audio.as_ref()]
            .into_iter()
            .flatten()
    }

    /// Whether `frame` jumped too far from its track's last decode time to stay in
    /// this file.
    fn jumped(&self, frame: &Frame) -> bool {
        let track = match frame.kind {
            MediaKind::Video => self.video.as_ref(),
            MediaKind::Audio => self.audio.as_ref(),
        };
        let Some(last) = track.and_then(|t| t.last_dts) else {
            return false;
        };
        frame.dts < last.saturating_sub(CLAMP_TICKS)
            || frame.dts > last.saturating_add(MAX_GAP_TICKS)
    }

    /// Whether the fragment in progress must end before `frame` (which is a start point
    /// of the leading track when `start_of_leader`).
    fn cut_due(&self, frame: &Frame, start_of_leader: bool, fragment_ticks: Timestamp) -> bool {
        let Some(start) = self.fragment_start else {
            return false;
        };
        let elapsed = frame.dts.saturating_sub(start);
        (start_of_leader && elapsed >= fragment_ticks)
            || elapsed >= fragment_ticks.saturating_mul(FORCED_CUT_FACTOR)
            || self.fragment_bytes >= MAX_FRAGMENT_BYTES
    }

    /// Takes one frame into its track: dropped before the track's first keyframe or
    /// before the file's origin, clamped if it steps back a little.
    fn take(&mut self, frame: &Frame) {
        let origin = self.origin;
        let Some(track) = self.track_mut(frame.kind) else {
            return;
        };
        if !track.started && track.kind == MediaKind::Video && !frame.keyframe {
            return;
        }
        let (mut dts, mut pts) = (frame.dts, frame.pts);
        if let Some(last) = track.last_dts {
            if dts < last {
                pts = pts.saturating_add(last.saturating_sub(dts));
                dts = last;
            }
        }
        if dts < origin {
            return;
        }
        track.started = true;
        track.last_dts = Some(dts);
        let next = Pending {
            dts,
            pts,
            keyframe: frame.keyframe || track.kind == MediaKind::Audio,
            data: frame.payload.clone(),
        };
        if let Some(prev) = track.pending.replace(next) {
            track.commit(prev, Some(dts), origin);
        }
        self.fragment_start.get_or_insert(dts);
        self.fragment_bytes = self
            .fragment_bytes
            .saturating_add(frame.payload.len())
            .saturating_add(FRAME_OVERHEAD);
    }

    /// Decode time of the end of the file's media so far, from its origin.
    fn duration_ms(&self) -> u64 {
        let end = self
            .tracks()
            .filter_map(|t| t.end)
            .max()
            .unwrap_or(self.origin);
        let ticks = end.saturating_sub(self.origin).max(0);
        u64::try_from(Frame::ms_from_ticks(ticks)).unwrap_or(0)
    }
}

/// Where a stream's recording stands.
#[derive(Debug)]
enum State {
    /// No file: waiting for a start point with tracks to record.
    ExpectStart,
    /// A file is in progress.
    Recording(Box<File>),
}

/// Cuts one stream into recording files; see the module docs for the call contract.
#[derive(Debug)]
pub struct Fragmenter {
    config: FragmenterConfig,
    /// The stream's tracks that the format carries, as the publisher last said.
    video: Option<Track>,
    audio: Option<Track>,
    state: State,
    out: VecDeque<Output>,
}

impl Fragmenter {
    /// A fragmenter with no tracks and no file.
    pub fn new(config: FragmenterConfig) -> Fragmenter {
        Fragmenter {
            config,
            video: None,
            audio: None,
            state: State::ExpectStart,
            out: VecDeque::new(),
        }
    }

    /// The stream's tracks now; either may be absent. Codecs the format cannot carry
    /// are left out. A change ends the file at the next start point, except that a
    /// track added before the file's first fragment joins it.
    pub fn set_tracks(&mut self, video: Option<&Track>, audio: Option<&Track>) {
        let format = self.config.format;
        self.video = video.filter(|t| format.carries(t)).cloned();
        self.audio = audio.filter(|t| format.carries(t)).cloned();
        if let State::Recording(file) = &mut self.state {
            if !file.header_written() {
                file.adopt(self.video.as_ref(), self.audio.as_ref());
            }
        }
    }

    /// Whether the file in progress has exactly the stream's tracks.
    fn tracks_match(&self, file: &File) -> bool {
        file.video.as_ref().map(|t| &t.track) == self.video.as_ref()
            && file.audio.as_ref().map(|t| &t.track) == self.audio.as_ref()
    }

    /// One frame, in decode order, pushed at wall-clock time `unix_ms` (which names the
    /// files). A frame of a kind without a track is ignored. On error the media of the
    /// fragment or file it completed was dropped.
    pub fn push(&mut self, frame: &Frame, unix_ms: i64) -> Result<(), FragmentError> {
        let has_video = self.video.is_some();
        let wanted = match frame.kind {
            MediaKind::Video => has_video,
            MediaKind::Audio => self.audio.is_some(),
        };
        if !wanted {
            return Ok(());
        }
        let start = match frame.kind {
            MediaKind::Video => frame.keyframe,
            MediaKind::Audio => !has_video,
        };
        let leader = frame.kind == MediaKind::Video || !has_video;
        let mut result = Ok(());
        if let State::Recording(file) = &self.state {
            if file.jumped(frame) {
                result = self.end_file(None);
            } else if start
                && leader
                && (!self.tracks_match(file)
                    || frame.dts.saturating_sub(file.origin) >= self.config.rotate_ticks)
            {
                result = self.end_file(Some(frame.dts));
            }
        }
        if matches!(self.state, State::ExpectStart) {
            if !start {
                return result;
            }
            self.state = State::Recording(Box::new(File::new(
                frame.dts,
                unix_ms,
                self.video.as_ref(),
                self.audio.as_ref(),
            )));
        }
        let State::Recording(file) = &mut self.state else {
            return result;
        };
        if file.cut_due(frame, start && leader, self.config.fragment_ticks) {
            let leader_end = leader.then_some(frame.dts);
            let r = write_fragment(file, self.config.format, leader_end, &mut self.out);
            result = result.and(r);
        }
        file.take(frame);
        result
    }

    /// The publisher left and may come back: everything taken so far goes out as a
    /// fragment (last durations estimated), the duration is updated, and the file is
    /// synced. A video track then waits for a keyframe.
    pub fn flush(&mut self) -> Result<(), FragmentError> {
        let State::Recording(file) = &mut self.state else {
            return Ok(());
        };
        let origin = file.origin;
        for t in file.tracks_mut() {
            if let Some(p) = t.pending.take() {
                t.commit(p, None, origin);
            }
            t.started = false;
        }
        let result = write_fragment(file, self.config.format, None, &mut self.out);
        if file.header_written() {
            patch_duration(file, &mut self.out);
            self.out.push_back(Output::Sync);
        }
        result
    }

    /// The stream ended: the file in progress is completed.
    pub fn finish(&mut self) -> Result<(), FragmentError> {
        self.end_file(None)
    }

    /// Completes the file in progress; with `leader_end`, the leading track's last
    /// sample lasts until then.
    fn end_file(&mut self, leader_end: Option<Timestamp>) -> Result<(), FragmentError> {
        let State::Recording(mut file) = std::mem::replace(&mut self.state, State::ExpectStart)
        else {
            return Ok(());
        };
        let origin = file.origin;
        let leader = if file.video.is_some() {
            MediaKind::Video
        } else {
            MediaKind::Audio
        };
        for t in file.tracks_mut() {
            if let Some(p) = t.pending.take() {
                let end = leader_end.filter(|_| t.kind == leader);
                t.commit(p, end, origin);
            }
        }
        let result = write_fragment(&mut file, self.config.format, None, &mut self.out);
        if file.header_written() {
            patch_duration(&file, &mut self.out);
            self.out.push_back(Output::End {
                duration_ms: file.duration_ms(),
            });
        }
        result
    }

    /// The next thing for the writer to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}

/// Writes the committed samples as one fragment (after the file's header if it is
/// the first). With `leader_end`, the leading track's pending sample is committed
/// first, lasting until then, so the next fragment starts with the cutting frame.
fn write_fragment(
    file: &mut File,
    format: Format,
    leader_end: Option<Timestamp>,
    out: &mut VecDeque<Output>,
) -> Result<(), FragmentError> {
    let origin = file.origin;
    if let Some(end) = leader_end {
        let leader = if file.video.is_some() {
            file.video.as_mut()
        } else {
            file.audio.as_mut()
        };
        if let Some(t) = leader {
            if let Some(p) = t.pending.take() {
                t.commit(p, Some(end), origin);
            }
        }
    }
    file.fragment_start = None;
    file.fragment_bytes = 0;
    if file.tracks().all(|t| t.samples.is_empty()) {
        return Ok(());
    }
    let result = match format {
        Format::Fmp4 => write_fmp4(file, out),
        Format::Ts => write_ts(file, out),
    };
    // Whatever happened, these samples are done with: memory stays bounded.
    for t in file.tracks_mut() {
        t.samples.clear();
    }
    result
}

fn write_fmp4(file: &mut File, out: &mut VecDeque<Output>) -> Result<(), FragmentError> {
    if !file.header_written() {
        let tracks: Vec<InitTrack<'_>> = file
            .tracks()
            .map(|t| InitTrack {
                track_id: t.id,
                track: &t.track,
                timescale: t.timescale,
            })
            .collect();
        let mut init = BytesMut::new();
        fmp4::write_init(&mut init, &tracks)?;
        file.duration_field = mvhd_duration_offset(&init);
        file.written = init.len() as u64;
        out.push_back(Output::Begin {
            header: init.freeze(),
            unix_ms: file.unix_ms,
        });
    }
    let origin = file.origin;
    let runs: Vec<(u32, u64, Vec<Sample>)> = file
        .tracks_mut()
        .filter(|t| !t.samples.is_empty())
        .map(|t| {
            let base = t.samples.first().map_or(0, |c| {
                u64::try_from(t.scaled(c.sample.dts, origin)).unwrap_or(0)
            });
            let samples = t
                .samples
                .drain(..)
                .map(|c| Sample {
                    duration: c.duration,
                    cts_offset: i32::try_from(
                        i128::from(c.sample.pts.saturating_sub(c.sample.dts))
                            * i128::from(t.timescale)
                            / i128::from(CLOCK_HZ),
                    )
                    .unwrap_or(0),
                    keyframe: c.sample.keyframe,
                    data: c.sample.data,
                })
                .collect();
            (t.id, base, samples)
        })
        .collect();
    let runs: Vec<TrackRun<'_>> = runs
        .iter()
        .map(|(id, base, samples)| TrackRun {
            track_id: *id,
            base_decode_time: *base,
            samples,
        })
        .collect();
    let mut fragment = BytesMut::new();
    fmp4::write_fragment(&mut fragment, file.sequence, &runs)?;
    file.sequence = file.sequence.wrapping_add(1);
    file.written = file.written.saturating_add(fragment.len() as u64);
    out.push_back(Output::Append(fragment.freeze()));
    Ok(())
}

fn write_ts(file: &mut File, out: &mut VecDeque<Output>) -> Result<(), FragmentError> {
    if !file.header_written() {
        let track = |t: &Option<FileTrack>| t.as_ref().map(|t| t.track.clone());
        let (video, audio) = (track(&file.video), track(&file.audio));
        let mut muxer = TsMuxer::new(video.as_ref(), audio.as_ref())?;
        let mut header = BytesMut::new();
        muxer.write_tables(&mut header);
        file.written = header.len() as u64;
        file.ts = Some(muxer);
        out.push_back(Output::Begin {
            header: header.freeze(),
            unix_ms: file.unix_ms,
        });
    }
    let origin = file.origin;
    // Both tracks' samples, in decode order (video first on a tie).
    let mut frames: Vec<Frame> = file
        .tracks_mut()
        .flat_map(|t| {
            let kind = t.kind;
            t.samples.drain(..).map(move |c| Frame {
                kind,
                dts: c.sample.dts.saturating_sub(origin),
                pts: c.sample.pts.saturating_sub(origin),
                keyframe: c.sample.keyframe,
                payload: c.sample.data,
            })
        })
        .collect();
    frames.sort_by_key(|f| (f.dts, f.kind == MediaKind::Audio));
    let Some(muxer) = file.ts.as_mut() else {
        return Ok(());
    };
    let mut fragment = BytesMut::new();
    muxer.write_tables(&mut fragment);
    let mut first_error = None;
    for f in &frames {
        if let Err(e) = muxer.write_frame(f, &mut fragment) {
            first_error.get_or_insert(e);
        }
    }
    file.written = file.written.saturating_add(fragment.len() as u64);
    out.push_back(Output::Append(fragment.freeze()));
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Sets the movie duration of an fMP4 file to what it holds now.
fn patch_duration(file: &File, out: &mut VecDeque<Output>) {
    if let Some(offset) = file.duration_field {
        let ms = u32::try_from(file.duration_ms()).unwrap_or(u32::MAX);
        out.push_back(Output::Patch {
            offset,
            bytes: ms.to_be_bytes(),
        });
    }
}

/// Where the 32-bit duration of `mvhd` (version 0) is in an init segment: `ftyp`,
/// then `moov` whose first box is `mvhd`.
fn mvhd_duration_offset(init: &[u8]) -> Option<u64> {
    let be32 = |at: usize| -> Option<usize> {
        let b = init.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let moov = be32(0)?;
    let mvhd = moov.checked_add(8)?;
    if init.get(moov + 4..moov + 8)? != b"moov" || init.get(mvhd + 4..mvhd + 8)? != b"mvhd" {
        return None;
    }
    // header 8, version and flags 4, creation and modification times 8, timescale 4.
    if *init.get(mvhd + 8)? != 0 {
        return None;
    }
    let field = mvhd + 24;
    init.get(field..field + 4)?;
    u64::try_from(field).ok()
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

    fn other_video() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1f, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
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

    fn video_frame(n: i64, gop: i64) -> Frame {
        let key = n % gop == 0;
        let mut payload = vec![0, 0, 0, 5, if key { 0x65 } else { 0x41 }];
        payload.extend_from_slice(&(n as u32).to_be_bytes());
        Frame {
            kind: MediaKind::Video,
            dts: n * 3600,
            pts: n * 3600,
            keyframe: key,
            payload: Bytes::from(payload),
        }
    }

    fn audio_frame(dts: i64) -> Frame {
        Frame {
            kind: MediaKind::Audio,
            dts,
            pts: dts,
            keyframe: true,
            payload: Bytes::from_static(&[0x21, 0x10, 0x04, 0x60]),
        }
    }

    /// 25 fps video (keyframe every `gop` frames) from frame `from`, with 48 kHz AAC
    /// (1920 ticks a frame) interleaved when `with_audio`.
    fn frames(from: i64, count: i64, gop: i64, with_audio: bool) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut audio_dts = from * 3600;
        for n in from..from + count {
            let dts = n * 3600;
            while with_audio && audio_dts <= dts {
                out.push(audio_frame(audio_dts));
                audio_dts += 1920;
            }
            out.push(video_frame(n, gop));
        }
        out
    }

    fn config(format: Format) -> FragmenterConfig {
        FragmenterConfig {
            format,
            fragment_ticks: 90_000,
            rotate_ticks: 3600 * 90_000,
        }
    }

    fn drain(f: &mut Fragmenter) -> Vec<Output> {
        std::iter::from_fn(|| f.poll_output()).collect()
    }

    /// Top-level boxes of an fMP4 byte string: (type, size).
    fn boxes(bytes: &[u8]) -> Vec<([u8; 4], usize)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 8 <= bytes.len() {
            let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            out.push((bytes[at + 4..at + 8].try_into().unwrap(), size));
            assert!(size >= 8);
            at += size;
        }
        assert_eq!(at, bytes.len(), "boxes end where the bytes do");
        out
    }

    /// Whether the first sample of a fragment's first run is a sync sample.
    fn first_sample_is_sync(fragment: &[u8]) -> bool {
        let pos = fragment.windows(4).position(|w| w == b"trun").unwrap();
        let flags = u32::from_be_bytes(fragment[pos + 4..pos + 8].try_into().unwrap()) & 0xff_ffff;
        assert!(flags & 0x400 != 0, "per-sample flags");
        // trun: flags(4) count(4) data_offset(4), then duration(4) size(4) flags(4).
        let f = pos + 4 + 4 + 4 + 4 + 4 + 4;
        u32::from_be_bytes(fragment[f..f + 4].try_into().unwrap()) == SAMPLE_FLAGS_SYNC
    }

    use sluice_media::fmp4::SAMPLE_FLAGS_SYNC;

    /// Splits outputs into files: each is its header, then its fragments; plus whether
    /// the file got its End and its duration.
    fn files(outputs: &[Output]) -> Vec<(Bytes, Vec<Bytes>, Option<u64>)> {
        let mut files: Vec<(Bytes, Vec<Bytes>, Option<u64>)> = Vec::new();
        for o in outputs {
            match o {
                Output::Begin { header: h, .. } => {
                    assert!(
                        files.last().is_none_or(|f| f.2.is_some()),
                        "End before Begin"
                    );
                    files.push((h.clone(), Vec::new(), None));
                }
                Output::Append(b) => files.last_mut().unwrap().1.push(b.clone()),
                Output::End { duration_ms } => files.last_mut().unwrap().2 = Some(*duration_ms),
                Output::Patch { .. } | Output::Sync => {}
            }
        }
        files
    }

    #[test]
    fn waits_for_tracks_and_a_keyframe_then_cuts_at_keyframes() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        // Frames before any track are ignored.
        f.push(&video_frame(0, 25), 0).unwrap();
        f.set_tracks(Some(&video()), Some(&audio()));
        // Not a keyframe: dropped.
        f.push(&video_frame(3, 25), 0).unwrap();
        for frame in frames(10, 90, 25, true) {
            f.push(&frame, 0).unwrap();
        }
        let out = drain(&mut f);
        let files = files(&out);
        assert_eq!(files.len(), 1);
        let (init, fragments, end) = &files[0];
        let init_boxes: Vec<_> = boxes(init).iter().map(|b| b.0).collect();
        assert_eq!(init_boxes, [*b"ftyp", *b"moov"]);
        assert!(init.windows(4).any(|w| w == b"mvex"));
        assert!(end.is_none());
        // Keyframes at 25, 50, 75: the first file starts at 25 and is cut at 50 and 75.
        assert_eq!(fragments.len(), 2);
        for fr in fragments {
            let kinds: Vec<_> = boxes(fr).iter().map(|b| b.0).collect();
            assert_eq!(kinds, [*b"moof", *b"mdat"]);
            assert!(first_sample_is_sync(fr));
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        assert!(matches!(out.first(), Some(Output::Append(_))));
        assert!(
            matches!(out.last(), Some(Output::End { duration_ms }) if *duration_ms == 3000),
            "{out:?}"
        );
        assert!(out.iter().any(|o| matches!(o, Output::Patch { .. })));
    }

    #[test]
    fn mvhd_duration_is_patched_where_it_is() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None);
        for frame in frames(0, 50, 25, false) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        let Some(Output::Begin { header: init, .. }) = out.first() else {
            panic!("{out:?}")
        };
        let Some(Output::Patch { offset, bytes }) =
            out.iter().find(|o| matches!(o, Output::Patch { .. }))
        else {
            panic!("no patch")
        };
        let at = *offset as usize;
        assert_eq!(&init[at - 20..at - 16], b"mvhd");
        assert_eq!(&init[at - 4..at], &1000u32.to_be_bytes(), "timescale");
        assert_eq!(u32::from_be_bytes(*bytes), 2000);
    }

    #[test]
    fn audio_only_cuts_every_fragment_duration() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(None, Some(&audio()));
        // 5 s of audio; video frames are ignored (no video track).
        for n in 0..(5 * 90_000 / 1920) {
            f.push(&audio_frame(1000 + n * 1920), 0).unwrap();
            f.push(&video_frame(n, 1), 0).unwrap();
        }
        f.finish().unwrap();
        let files = files(&drain(&mut f));
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].1.len(), 5, "4 cuts at 1 s and the last fragment");
        assert_eq!(files[0].2, Some(4992));
    }

    #[test]
    fn video_only_and_long_gops_are_cut_anyway() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None);
        // A keyframe every 10 s: fragments are forced every 4 s.
        for frame in frames(0, 250, 250, false) {
            f.push(&frame, 0).unwrap();
        }
        let files = files(&drain(&mut f));
        assert_eq!(files[0].1.len(), 2);
        assert!(first_sample_is_sync(&files[0].1[0]));
        assert!(!first_sample_is_sync(&files[0].1[1]));
    }

    #[test]
    fn rotates_at_the_first_keyframe_after_the_rotation_time() {
        let mut f = Fragmenter::new(FragmenterConfig {
            rotate_ticks: 2 * 90_000,
            ..config(Format::Fmp4)
        });
        f.set_tracks(Some(&video()), Some(&audio()));
        // 7 s, keyframes every 1.2 s: files start at 0, 2.4 s, 4.8 s.
        for frame in frames(0, 175, 30, true) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let files = files(&drain(&mut f));
        assert_eq!(files.len(), 3);
        // Video decides: 2.4 s, 2.4 s, 2.2 s; the last audio frame before a cut may
        // end a few ms past the keyframe.
        for ((_, _, duration), video_ms) in files.iter().zip([2400, 2400, 2200]) {
            let d = duration.unwrap();
            assert!(
                (video_ms..video_ms + 40).contains(&d),
                "{d} ms, not {video_ms}"
            );
        }
        for (_, fragments, _) in &files {
            assert!(first_sample_is_sync(&fragments[0]));
        }
    }

    #[test]
    fn a_changed_track_starts_a_new_file_and_an_added_one_joins() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None);
        let all = frames(0, 100, 25, true);
        // Audio configured just after the first keyframe: it joins the first file.
        f.push(&all[0], 0).unwrap();
        f.push(&all[1], 0).unwrap();
        f.set_tracks(Some(&video()), Some(&audio()));
        for frame in &all[2..all.len() / 2] {
            f.push(frame, 0).unwrap();
        }
        // New video parameters: a new file at the next keyframe.
        f.set_tracks(Some(&other_video()), Some(&audio()));
        for frame in &all[all.len() / 2..] {
            f.push(frame, 0).unwrap();
        }
        f.finish().unwrap();
        let files = files(&drain(&mut f));
        assert_eq!(files.len(), 2);
        for (init, _, _) in &files {
            assert_eq!(init.windows(4).filter(|w| *w == b"trak").count(), 2);
        }
        // 2 s of video up to the keyframe that changed; audio ends within a frame of it.
        assert!(
            (2000..2040).contains(&files[0].2.unwrap()),
            "{:?}",
            files[0].2
        );
    }

    #[test]
    fn timestamps_stepping_back_are_clamped_and_jumps_start_a_new_file() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None);
        for frame in frames(0, 30, 25, false) {
            f.push(&frame, 0).unwrap();
        }
        // 10 ms back: clamped.
        let mut back = video_frame(30, 25);
        back.dts = 29 * 3600 - 900;
        back.pts = back.dts;
        f.push(&back, 0).unwrap();
        for frame in frames(31, 20, 25, false) {
            f.push(&frame, 0).unwrap();
        }
        assert!(drain(&mut f)
            .iter()
            .all(|o| !matches!(o, Output::End { .. })));
        // Back to 0 (a publisher restarting its clock): a new file at the keyframe.
        for frame in frames(0, 50, 25, false) {
            f.push(&frame, 0).unwrap();
        }
        // A jump forward by an hour: another.
        for frame in frames(3600 * 25, 50, 25, false) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        let ends = out
            .iter()
            .filter(|o| matches!(o, Output::End { .. }))
            .count();
        let begins = out
            .iter()
            .filter(|o| matches!(o, Output::Begin { .. }))
            .count();
        assert_eq!((begins, ends), (2, 3));
    }

    #[test]
    fn flush_completes_the_file_and_a_returning_publisher_continues_it() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), Some(&audio()));
        for frame in frames(0, 60, 25, true) {
            f.push(&frame, 0).unwrap();
        }
        f.flush().unwrap();
        let out = drain(&mut f);
        assert!(matches!(out.last(), Some(Output::Sync)));
        let Some(Output::Patch { bytes, .. }) = out.iter().rev().nth(1) else {
            panic!("{out:?}")
        };
        assert_eq!(u32::from_be_bytes(*bytes), 2400);
        // The publisher comes back on the same timeline; a P-frame first is dropped.
        f.set_tracks(Some(&video()), Some(&audio()));
        f.push(&video_frame(61, 25), 0).unwrap();
        for frame in frames(75, 50, 25, true) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        assert!(!out.iter().any(|o| matches!(o, Output::Begin { .. })));
        let frags: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Append(b) => Some(b),
                _ => None,
            })
            .collect();
        assert!(first_sample_is_sync(frags[0]));
        assert!(matches!(
            out.last(),
            Some(Output::End { duration_ms: 5000 })
        ));
    }

    #[test]
    fn fragments_are_bounded_in_bytes() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None);
        let big = Bytes::from(vec![0u8; 4 << 20]);
        for n in 0..10 {
            let mut frame = video_frame(n, 1000);
            let mut payload = BytesMut::new();
            payload.extend_from_slice(&((big.len() - 4) as u32).to_be_bytes());
            payload.extend_from_slice(&big[4..]);
            frame.payload = payload.freeze();
            f.push(&frame, 0).unwrap();
        }
        let fragments = files(&drain(&mut f))[0].1.len();
        assert_eq!(
            fragments, 2,
            "a cut after 4 frames of 4 MiB, then after 4 more"
        );
    }

    #[test]
    fn unsupported_codecs_are_left_out() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        let mp3 = Track::new(TrackConfig::Mp3 {
            sample_rate: 44_100,
            channels: 2,
        });
        f.set_tracks(Some(&video()), Some(&mp3));
        for frame in frames(0, 50, 25, true) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let files = files(&drain(&mut f));
        assert_eq!(files[0].0.windows(4).filter(|w| *w == b"trak").count(), 1);
    }

    #[test]
    fn ts_files_are_whole_packets_with_tables_first() {
        let mut f = Fragmenter::new(config(Format::Ts));
        f.set_tracks(Some(&video()), Some(&audio()));
        for frame in frames(0, 75, 25, true) {
            f.push(&frame, 0).unwrap();
        }
        f.finish().unwrap();
        let files = files(&drain(&mut f));
        assert_eq!(files.len(), 1);
        let (header, fragments, end) = &files[0];
        assert_eq!(header.len(), 2 * 188);
        assert_eq!(fragments.len(), 3);
        for fr in fragments {
            assert!(fr.len().is_multiple_of(188) && fr.chunks(188).all(|p| p[0] == 0x47));
        }
        assert_eq!(*end, Some(3000));
    }

    /// One step of a publisher gone wrong.
    #[derive(Debug, Clone)]
    enum Op {
        /// A frame `step` ticks after the previous one (or at `at` when given).
        Frame {
            video: bool,
            keyframe: bool,
            step: i64,
            at: Option<i64>,
            cts: i64,
            len: usize,
        },
        /// Tracks: bit 0 video, bit 1 audio, bit 2 the other video configuration.
        Tracks(u8),
        Flush,
        Finish,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            8 => (
                any::<bool>(),
                proptest::bool::weighted(0.1),
                -2000i64..8000,
                proptest::option::weighted(0.02, any::<i64>()),
                -4000i64..8000,
                0usize..64,
            )
                .prop_map(|(video, keyframe, step, at, cts, len)| Op::Frame {
                    video,
                    keyframe,
                    step,
                    at,
                    cts,
                    len,
                }),
            1 => (0u8..8).prop_map(Op::Tracks),
            1 => Just(Op::Flush),
            1 => Just(Op::Finish),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_publisher_gets_well_formed_files(
            ts in proptest::bool::ANY,
            ops in proptest::collection::vec(op(), 0..400),
        ) {
            let format = if ts { Format::Ts } else { Format::Fmp4 };
            let mut f = Fragmenter::new(FragmenterConfig {
                format,
                fragment_ticks: 20_000,
                rotate_ticks: 200_000,
            });
            let mut dts = 0i64;
            let mut open: Option<usize> = None;
            for op in ops {
                match op {
                    Op::Frame { video, keyframe, step, at, cts, len } => {
                        dts = at.unwrap_or(dts.saturating_add(step));
                        let frame = Frame {
                            kind: if video { MediaKind::Video } else { MediaKind::Audio },
                            dts,
                            pts: dts.saturating_add(cts),
                            keyframe,
                            payload: Bytes::from(vec![0; len]),
                        };
                        // Errors are allowed (random bytes are not NAL units); panics are not.
                        let _ = f.push(&frame, 0);
                    }
                    Op::Tracks(bits) => {
                        let v = if bits & 4 != 0 { other_video() } else { video() };
                        let a = audio();
                        f.set_tracks((bits & 1 != 0).then_some(&v), (bits & 2 != 0).then_some(&a));
                    }
                    Op::Flush => { let _ = f.flush(); }
                    Op::Finish => { let _ = f.finish(); }
                }
                while let Some(out) = f.poll_output() {
                    match out {
                        Output::Begin { header, .. } => {
                            proptest::prop_assert!(open.is_none(), "Begin without End");
                            if format == Format::Fmp4 {
                                let kinds: Vec<_> = boxes(&header).iter().map(|b| b.0).collect();
                                proptest::prop_assert_eq!(kinds, [*b"ftyp", *b"moov"]);
                            }
                            open = Some(header.len());
                        }
                        Output::Append(bytes) => {
                            proptest::prop_assert!(open.is_some(), "Append without Begin");
                            if format == Format::Fmp4 {
                                let kinds: Vec<_> = boxes(&bytes).iter().map(|b| b.0).collect();
                                proptest::prop_assert_eq!(kinds, [*b"moof", *b"mdat"]);
                            } else {
                                proptest::prop_assert!(bytes.len().is_multiple_of(188));
                            }
                        }
                        Output::Patch { offset, .. } => {
                            let header = open.unwrap_or(0) as u64;
                            proptest::prop_assert!(offset + 4 <= header, "patch outside the header");
                        }
                        Output::Sync => proptest::prop_assert!(open.is_some()),
                        Output::End { .. } => {
                            proptest::prop_assert!(open.is_some(), "End without Begin");
                            open = None;
                        }
                    }
                }
            }
        }
    }
}
