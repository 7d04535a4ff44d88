//! The recording fragmenter: a stream's tracks and frames in, the bytes of recording
//! files out — a header (the fMP4 init segment, or the MPEG-TS tables), then whole
//! fragments — with the decisions of where a file begins and ends.
//!
//! Why an adapter: where a fragment ends, sample durations, timescales and the
//! container bytes are `sluice_media::fragment`'s, shared with HLS. What is the
//! recorder's own is the file: rotation after a duration, a new file when the tracks
//! change or the timestamps jump, the movie duration patched into the header, and
//! syncs. The writer thread only opens, appends, patches, syncs and closes what
//! [`Output`] says.
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
//! - A file is complete after each fragment: the writer appends fragments whole, so a
//!   file cut at any moment plays up to its last complete fragment.
//! - Memory: the samples of one fragment, which [`MAX_FRAGMENT_BYTES`] and
//!   [`FORCED_CUT_FACTOR`] bound whatever the publisher sends.
//! - Per track, decode times never go backwards in a file: a small step back is clamped,
//!   a jump of more than [`CLAMP_TICKS`] back or [`MAX_GAP_TICKS`] forward ends the file.
//! - Each fMP4 fragment starts with a `prft` box (see `sluice_archive::prft`) giving the
//!   wall-clock time of its first `traf`'s decode time: the file's first frame's arrival
//!   time (`unix_ms` of [`Fragmenter::push`]) plus the media time since. One anchor per
//!   file keeps the mapping monotonic and equal to what the index says; the publisher's
//!   clock drifting from the server's over a file (rotated hourly) is not corrected.

use bytes::{Bytes, BytesMut};
use sluice_archive::prft::{Prft, PRFT_LEN};
use sluice_media::fragment::{
    self, Container, CutRules, FragmentError, FragmenterConfig as CoreConfig, Origin,
};
use sluice_media::{Frame, Timestamp, Track, CLOCK_HZ};
use std::collections::VecDeque;

/// Largest fragment in bytes of media: a stream that sends no keyframe for a long time,
/// or absurdly large frames, gets a fragment cut here, so the writer never holds more.
/// 16 MiB is several seconds of 4K video.
pub const MAX_FRAGMENT_BYTES: usize = 16 << 20;
/// A fragment is cut after this many fragment durations even without a keyframe: the
/// loss on `kill -9` stays bounded when the GOP is long.
pub const FORCED_CUT_FACTOR: i64 = 4;
/// A decode time this far (or less) behind its track's last one is clamped to it
/// (encoders and RTP clocks jitter by a few ms); further back starts a new file.
pub const CLAMP_TICKS: Timestamp = CLOCK_HZ as Timestamp / 2;
/// A decode time this far past its track's last one starts a new file: the source
/// jumped, and one sample must not last half a minute.
pub const MAX_GAP_TICKS: Timestamp = 30 * CLOCK_HZ as Timestamp;

/// The container of recording files (`record.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Fragmented MP4: `ftyp` + `moov` (with `mvex`), then `moof` + `mdat` pairs.
    Fmp4,
    /// MPEG-TS: PAT and PMT at the start of each fragment, then PES packets.
    Ts,
}

impl Format {
    /// The file name extension.
    pub fn extension(self) -> &'static str {
        self.container().extension()
    }

    fn container(self) -> Container {
        match self {
            Format::Fmp4 => Container::Fmp4,
            Format::Ts => Container::Ts,
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
    /// Append these bytes (one whole fragment; in fMP4 a `prft` box, then `moof` and
    /// `mdat`) to the current file.
    Append {
        /// The fragment.
        bytes: Bytes,
        /// Wall-clock time (Unix ms) of the end of the file's media so far: the file's
        /// first frame's `unix_ms` plus the media time since (for the index).
        end_ms: i64,
    },
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

/// Cuts one stream into recording files; see the module docs for the call contract.
#[derive(Debug)]
pub struct Fragmenter {
    format: Format,
    rotate_ticks: Timestamp,
    /// Fragments and their bytes; one output of it is one file.
    core: fragment::Fragmenter,
    /// Wall-clock time (Unix ms) of the frame that began the file in progress.
    unix_ms: i64,
    /// The file's header, until it goes out with the file's first fragment.
    header: Option<Bytes>,
    /// The file in progress was begun: its header went to the writer.
    begun: bool,
    /// Where the movie duration (`mvhd`, milliseconds) is in the header.
    duration_field: Option<u64>,
    /// Track ids and timescales of the file's init segment (fMP4), for `prft`.
    timescales: Vec<(u32, u32)>,
    /// Decode time of the fragment in progress's first frame.
    fragment_dts: Timestamp,
    /// The file's time 0 (the core forgets it when the file ends, before its last
    /// fragment is drained).
    origin: Timestamp,
    out: VecDeque<Output>,
}

impl Fragmenter {
    /// A fragmenter with no tracks and no file.
    pub fn new(config: FragmenterConfig) -> Fragmenter {
        Fragmenter {
            format: config.format,
            rotate_ticks: config.rotate_ticks,
            core: fragment::Fragmenter::new(CoreConfig {
                container: config.format.container(),
                rules: CutRules {
                    forced_cut_factor: Some(FORCED_CUT_FACTOR),
                    max_bytes: Some(MAX_FRAGMENT_BYTES),
                    ..CutRules::at_start_points(config.fragment_ticks)
                },
                origin: Origin::FirstFrame,
                late_tracks_join: true,
            }),
            unix_ms: 0,
            header: None,
            begun: false,
            duration_field: None,
            timescales: Vec::new(),
            fragment_dts: 0,
            origin: 0,
            out: VecDeque::new(),
        }
    }

    /// The stream's tracks now; either may be absent. Codecs the format cannot carry
    /// are left out. A change ends the file at the next start point, except that a
    /// track added before the file's first fragment joins it. On error the file in
    /// progress, not yet begun, was dropped.
    pub fn set_tracks(
        &mut self,
        video: Option<&Track>,
        audio: Option<&Track>,
    ) -> Result<(), FragmentError> {
        let result = self.core.set_tracks(video, audio);
        self.drain_core();
        result
    }

    /// Whether `frame` jumped too far from its track's last decode time to stay in
    /// this file.
    fn jumped(&self, frame: &Frame) -> bool {
        let Some(last) = self.core.last_dts(frame.kind) else {
            return false;
        };
        frame.dts < last.saturating_sub(CLAMP_TICKS)
            || frame.dts > last.saturating_add(MAX_GAP_TICKS)
    }

    /// One frame, in decode order, pushed at wall-clock time `unix_ms` (which names the
    /// files). A frame of a kind without a track is ignored. On error the media of the
    /// fragment or file it completed was dropped.
    pub fn push(&mut self, frame: &Frame, unix_ms: i64) -> Result<(), FragmentError> {
        if self.core.track(frame.kind).is_none() {
            return Ok(());
        }
        let mut result = Ok(());
        if self.core.has_output() {
            let rotate = self
                .core
                .origin()
                .is_some_and(|o| frame.dts.saturating_sub(o) >= self.rotate_ticks);
            if self.jumped(frame) {
                result = self.end_file(None);
            } else if self.core.is_start(frame) && (self.core.tracks_changed() || rotate) {
                result = self.end_file(Some(frame.dts));
            }
        }
        if !self.core.has_output() {
            self.unix_ms = unix_ms;
        }
        let pushed = self.core.push(frame);
        self.drain_core();
        result.and(pushed)
    }

    /// The publisher left and may come back: everything taken so far goes out as a
    /// fragment (last durations estimated), the duration is updated, and the file is
    /// synced. A video track then waits for a keyframe.
    pub fn flush(&mut self) -> Result<(), FragmentError> {
        let result = self.core.flush();
        self.drain_core();
        if self.begun {
            if let Some(duration) = self.core.duration() {
                self.patch_duration(duration);
            }
            self.out.push_back(Output::Sync);
        }
        result
    }

    /// The stream ended: the file in progress is completed.
    pub fn finish(&mut self) -> Result<(), FragmentError> {
        self.end_file(None)
    }

    /// Completes the file in progress; with `cut`, the leading track's last sample
    /// lasts until then.
    fn end_file(&mut self, cut: Option<Timestamp>) -> Result<(), FragmentError> {
        let result = self.core.finish(cut);
        self.drain_core();
        result
    }

    /// Turns what the core made into file operations.
    fn drain_core(&mut self) {
        while let Some(output) = self.core.poll_output() {
            match output {
                // Before the first fragment, a later header (a track joined) replaces it.
                fragment::Output::Init(header) => self.header = Some(header),
                fragment::Output::Begin { dts, .. } => {
                    self.fragment_dts = dts;
                    self.origin = self.core.origin().unwrap_or(dts);
                }
                fragment::Output::End { .. } => {}
                fragment::Output::Piece {
                    bytes, duration, ..
                } => {
                    let end = self.fragment_dts.saturating_add(duration);
                    self.append(bytes, end);
                }
                fragment::Output::Finished { duration } => {
                    if self.begun {
                        self.patch_duration(duration);
                        let ms = Frame::ms_from_ticks(duration);
                        self.out.push_back(Output::End {
                            duration_ms: u64::try_from(ms).unwrap_or(0),
                        });
                    }
                    self.begun = false;
                    self.header = None;
                    self.duration_field = None;
                }
            }
        }
    }

    /// One fragment ending at decode time `end`, after the file's header if it is the
    /// first.
    fn append(&mut self, fragment: Bytes, end: Timestamp) {
        if !self.begun {
            // The core emits a header before any fragment of its output.
            let Some(header) = self.header.take() else {
                return;
            };
            if self.format == Format::Fmp4 {
                self.duration_field = mvhd_duration_offset(&header);
                self.timescales = sluice_archive::fmp4::init_timescales(&header);
            }
            self.out.push_back(Output::Begin {
                header,
                unix_ms: self.unix_ms,
            });
            self.begun = true;
        }
        let origin = self.origin;
        let since = |dts: Timestamp| Frame::ms_from_ticks(dts.saturating_sub(origin).max(0));
        let end_ms = self.unix_ms.saturating_add(since(end));
        let bytes = match self.format {
            Format::Fmp4 => self.with_prft(fragment),
            Format::Ts => fragment,
        };
        self.out.push_back(Output::Append { bytes, end_ms });
    }

    /// `fragment` (`moof` + `mdat`) after a `prft` box for its first `traf`; as it is
    /// when that cannot be read (it is our own muxer's output).
    fn with_prft(&self, fragment: Bytes) -> Bytes {
        let Some(first) = sluice_archive::fmp4::first_traf(&fragment) else {
            return fragment;
        };
        let Some(&(_, timescale)) = self.timescales.iter().find(|t| t.0 == first.track_id) else {
            return fragment;
        };
        let media_ms = u128::from(first.tfdt) * 1000 / u128::from(timescale.max(1));
        let wall = self
            .unix_ms
            .saturating_add(i64::try_from(media_ms).unwrap_or(i64::MAX));
        let mut out = BytesMut::with_capacity(PRFT_LEN + fragment.len());
        Prft::new(first.track_id, wall, first.tfdt).encode(&mut out);
        out.extend_from_slice(&fragment);
        out.freeze()
    }

    /// Sets the movie duration of an fMP4 file to `duration` (ticks).
    fn patch_duration(&mut self, duration: Timestamp) {
        if let Some(offset) = self.duration_field {
            let ms = u32::try_from(Frame::ms_from_ticks(duration).max(0)).unwrap_or(u32::MAX);
            self.out.push_back(Output::Patch {
                offset,
                bytes: ms.to_be_bytes(),
            });
        }
    }

    /// The next thing for the writer to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
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
pub(super) mod tests {
    use super::*;
    use bytes::BytesMut;
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::{MediaKind, TrackConfig};

    pub(in crate::record) fn video() -> Track {
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

    pub(in crate::record) fn audio() -> Track {
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
    pub(in crate::record) fn frames(
        from: i64,
        count: i64,
        gop: i64,
        with_audio: bool,
    ) -> Vec<Frame> {
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

    pub(in crate::record) fn config(format: Format) -> FragmenterConfig {
        FragmenterConfig {
            format,
            fragment_ticks: 90_000,
            rotate_ticks: 3600 * 90_000,
        }
    }

    pub(in crate::record) fn drain(f: &mut Fragmenter) -> Vec<Output> {
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
                Output::Append { bytes: b, .. } => files.last_mut().unwrap().1.push(b.clone()),
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
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
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
            assert_eq!(kinds, [*b"prft", *b"moof", *b"mdat"]);
            assert!(first_sample_is_sync(fr));
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        assert!(matches!(out.first(), Some(Output::Append { .. })));
        assert!(
            matches!(out.last(), Some(Output::End { duration_ms }) if *duration_ms == 3000),
            "{out:?}"
        );
        assert!(out.iter().any(|o| matches!(o, Output::Patch { .. })));
    }

    /// The bytes of each file as the writer leaves them (appends, then patches).
    pub(in crate::record) fn file_bytes(outputs: &[Output]) -> Vec<Vec<u8>> {
        let mut files: Vec<Vec<u8>> = Vec::new();
        for o in outputs {
            match o {
                Output::Begin { header, .. } => files.push(header.to_vec()),
                Output::Append { bytes, .. } => files.last_mut().unwrap().extend_from_slice(bytes),
                Output::Patch { offset, bytes } => {
                    let at = *offset as usize;
                    files.last_mut().unwrap()[at..at + 4].copy_from_slice(bytes);
                }
                Output::Sync | Output::End { .. } => {}
            }
        }
        files
    }

    #[test]
    fn prft_and_append_times_say_the_wall_clock() {
        const T0: i64 = 1_795_773_600_250;
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
        // 3 s from a keyframe (the first frame, audio, waits for it); later frames
        // arrive "late" (their unix_ms is not used: one anchor per file).
        for (i, frame) in frames(0, 75, 25, true).iter().enumerate() {
            f.push(frame, T0 + i.saturating_sub(1) as i64 * 50).unwrap();
        }
        f.finish().unwrap();
        let out = drain(&mut f);
        let ends: Vec<i64> = out
            .iter()
            .filter_map(|o| match o {
                Output::Append { end_ms, .. } => Some(*end_ms),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [T0 + 1000, T0 + 2000, T0 + 3000]);
        let file = &file_bytes(&out)[0];
        let mut scan = sluice_archive::Fmp4Scan::new(file.len() as u64);
        while let Some(r) = scan.next_read() {
            let at = r.offset as usize;
            scan.feed(&file[at..(at + r.len).min(file.len())]).unwrap();
        }
        // The name's second is not used: prft says.
        let span = scan.scanned(0).unwrap();
        assert!(span.from_prft);
        assert_eq!((span.start_ms, span.fragments), (T0, 3));
        // Audio may end a frame past the video.
        assert!((T0 + 3000..T0 + 3040).contains(&span.end_ms), "{span:?}");
        assert_eq!(span.complete_bytes, file.len() as u64);
    }

    #[test]
    fn mvhd_duration_is_patched_where_it_is() {
        let mut f = Fragmenter::new(config(Format::Fmp4));
        f.set_tracks(Some(&video()), None).unwrap();
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
        f.set_tracks(None, Some(&audio())).unwrap();
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
        f.set_tracks(Some(&video()), None).unwrap();
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
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
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
        f.set_tracks(Some(&video()), None).unwrap();
        let all = frames(0, 100, 25, true);
        // Audio configured just after the first keyframe: it joins the first file.
        f.push(&all[0], 0).unwrap();
        f.push(&all[1], 0).unwrap();
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
        for frame in &all[2..all.len() / 2] {
            f.push(frame, 0).unwrap();
        }
        // New video parameters: a new file at the next keyframe.
        f.set_tracks(Some(&other_video()), Some(&audio())).unwrap();
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
        f.set_tracks(Some(&video()), None).unwrap();
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
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
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
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
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
                Output::Append { bytes: b, .. } => Some(b),
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
        f.set_tracks(Some(&video()), None).unwrap();
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
        f.set_tracks(Some(&video()), Some(&mp3)).unwrap();
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
        f.set_tracks(Some(&video()), Some(&audio())).unwrap();
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
                        let _ = f.set_tracks((bits & 1 != 0).then_some(&v), (bits & 2 != 0).then_some(&a));
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
                        Output::Append { bytes, .. } => {
                            proptest::prop_assert!(open.is_some(), "Append without Begin");
                            if format == Format::Fmp4 {
                                let kinds: Vec<_> = boxes(&bytes).iter().map(|b| b.0).collect();
                                proptest::prop_assert_eq!(kinds, [*b"prft", *b"moof", *b"mdat"]);
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
