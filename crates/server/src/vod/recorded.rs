//! Recordings by time range over the live-style protocols (RTMP, HTTP-FLV, WS-FLV,
//! HTTP-TS, RTSP, SRT): the files of `APP/NAME@FROM..TO` cut into [`Piece`]s, a
//! [`Timeline`] that one pacer ([`super::VodPlay`]) plays piece after piece.
//!
//! Why gaps are closed up: these players take one timeline, and a jump of minutes in
//! FLV or RTP timestamps makes them wait it out (or drop the stream). So a piece's
//! output time runs on from the end of the piece before it, as the MP4 download's
//! does; the wall clock of each piece is kept ([`Piece::wall_ms`]), which RTSP's
//! `Range: clock=` answers with.
//!
//! A piece starts at the keyframe at or before FROM (or its file's first keyframe) and
//! stops at TO (or its file's end). An open end stops at the recordings' end: the
//! player does not continue into the live stream.

use super::{VodFile, Vods};
use crate::io::filemap::FileMaps;
use crate::record::Recorder;
use sluice_archive::range::{self, RangeError, TimeRange};
use sluice_archive::Format;
use sluice_media::mp4::Movie;
use sluice_media::{Timestamp, CLOCK_HZ};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files one range plays at most: each is mapped and its sample index held while it
/// is played (a few MB per hour of video), so a request for a year stays bounded.
pub const MAX_FILES: usize = 48;

const TICKS_PER_MS: Timestamp = CLOCK_HZ as Timestamp / 1000;

/// Why a range cannot be played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordedError {
    /// The range text is malformed: the client's mistake (400, RTSP 457).
    #[error("bad range: {0}")]
    BadRange(#[from] RangeError),
    /// Nothing recorded in the range, or recording is off (404).
    #[error("{0}")]
    Nothing(String),
}

/// One file's share of a range.
#[derive(Debug)]
pub struct Piece {
    pub file: Arc<VodFile>,
    /// The time given to `Movie::seek` to start it (`first` is where that lands).
    pub seek: Timestamp,
    /// Decode time (the file's own) where playing it starts: a keyframe.
    pub first: Timestamp,
    /// Decode time it stops before.
    pub end: Timestamp,
    /// Timeline time of `first`.
    pub at: Timestamp,
    /// UTC ms of `first`.
    pub wall_ms: i64,
}

impl Piece {
    /// Timeline time of a decode time of this piece's file.
    pub fn to_timeline(&self, dts: Timestamp) -> Timestamp {
        dts.saturating_sub(self.first).saturating_add(self.at)
    }

    /// How long it plays.
    pub fn len(&self) -> Timestamp {
        self.end.saturating_sub(self.first)
    }
}

/// What one player plays: pieces in order, their timeline times running on without
/// gaps. A single file is one piece whose timeline is the file's own time.
#[derive(Debug)]
pub struct Timeline {
    pub pieces: Vec<Piece>,
    /// Subtracted from timeline times to make the frames' timestamps (at most 0: a
    /// file's B-frames may start decoding before 0; outputs want none below 0).
    pub origin: Timestamp,
}

impl Timeline {
    /// All of `file`, on its own time.
    pub fn single(file: Arc<VodFile>) -> Timeline {
        let origin = file.movie.negative_start();
        let end = file.movie.duration.max(0);
        Timeline {
            pieces: vec![Piece {
                file,
                seek: Timestamp::MIN,
                first: 0,
                end,
                at: 0,
                wall_ms: 0,
            }],
            origin,
        }
    }

    /// The timeline time after the last piece.
    pub fn duration(&self) -> Timestamp {
        self.pieces
            .last()
            .map_or(0, |p| p.at.saturating_add(p.len()))
    }

    /// The piece that plays timeline time `t` (the last one past the end, at its
    /// end) and the decode time in its file to seek to.
    pub fn locate(&self, t: Timestamp) -> Option<(usize, Timestamp)> {
        let n = self
            .pieces
            .partition_point(|p| p.at.saturating_add(p.len()) <= t)
            .min(self.pieces.len().checked_sub(1)?);
        let p = self.pieces.get(n)?;
        // Past the end: its last moment (a video file plays its last GOP).
        let last = p.end.saturating_sub(1).max(p.first);
        let at = t.saturating_sub(p.at).saturating_add(p.first);
        Some((n, at.clamp(p.first, last)))
    }

    /// The UTC ms of timeline time `t`.
    pub fn wall_at(&self, t: Timestamp) -> i64 {
        match self.locate(t) {
            Some((n, dts)) => self.pieces.get(n).map_or(0, |p| {
                p.wall_ms
                    .saturating_add(dts.saturating_sub(p.first) / TICKS_PER_MS)
            }),
            None => 0,
        }
    }

    /// The UTC ms where the last piece ends.
    pub fn wall_end(&self) -> i64 {
        self.pieces
            .last()
            .map_or(0, |p| p.wall_ms.saturating_add(p.len() / TICKS_PER_MS))
    }
}

/// Where recordings are opened: below the media root when the record dir is (so that
/// `/vod/`, HLS ranges and players share one mapping of a file), else below the record
/// dir itself. Returns the root and the prefix of a listed file's path below it.
pub fn open_root(record_root: &Path, media_root: &Path) -> (PathBuf, String) {
    match record_root.strip_prefix(media_root) {
        Ok(rel) if !rel.as_os_str().is_empty() => (
            media_root.to_path_buf(),
            format!("{}/", rel.to_string_lossy()),
        ),
        _ => (record_root.to_path_buf(), String::new()),
    }
}

/// The range as a half-open interval in UTC ms, an open end cut at now.
pub fn clipped(range: TimeRange, now: i64) -> (i64, i64) {
    let (from, to) = range.bounds();
    (
        from,
        if range.open_ended() {
            now.max(from)
        } else {
            to
        },
    )
}

/// UTC ms now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What opens the recordings of a range.
pub struct Opener<'a> {
    pub recorder: &'a Recorder,
    pub vods: &'a Arc<Vods>,
    pub maps: &'a Arc<FileMaps>,
    pub media_root: &'a Path,
}

impl Opener<'_> {
    /// Parses `text` (`FROM..TO`, decoded) against now.
    pub fn parse(text: &str) -> Result<TimeRange, RecordedError> {
        Ok(range::parse(text, now_ms())?)
    }

    /// The timeline of stream `key`'s recordings in `range` (at most [`MAX_FILES`]
    /// files, the first ones).
    pub async fn timeline(&self, key: &str, range: TimeRange) -> Result<Timeline, RecordedError> {
        let catalogue = self.recorder.catalogue();
        let dir_key = Recorder::dir_key(key);
        let (from, to) = clipped(range, now_ms());
        let (listed, more) = catalogue.covering(&dir_key, from, to, MAX_FILES);
        if more {
            tracing::info!(stream = %key, "range play: only the first {MAX_FILES} files");
        }
        let (root, prefix) = open_root(catalogue.root(), self.media_root);
        let mut pieces = Vec::new();
        let mut at: Timestamp = 0;
        for l in listed
            .into_iter()
            .filter(|l| l.span.id.format == Format::Fmp4)
        {
            let rel = format!("{prefix}{}", l.path);
            let file = match self.vods.open(self.maps, &root, &rel).await {
                Ok(f) => f,
                // A file removed meanwhile, or unreadable: the range plays without it.
                Err(e) => {
                    tracing::info!(stream = %key, "range play: {e}");
                    continue;
                }
            };
            if let Some(piece) = cut(file, l.span.start_ms, from, to, at) {
                at = at.saturating_add(piece.len());
                pieces.push(piece);
            }
        }
        if pieces.is_empty() {
            return Err(RecordedError::Nothing(format!(
                "nothing recorded of {key} in this range"
            )));
        }
        Ok(Timeline { pieces, origin: 0 })
    }
}

/// The decode time of a movie's first keyframe (its first sample without video).
fn first_dts(movie: &Movie) -> Option<Timestamp> {
    movie.peek_dts(&movie.seek(Timestamp::MIN))
}

/// `file`'s share of `[from, to)` (UTC ms) when its first keyframe is at `start_ms`,
/// placed at timeline time `at`: from the keyframe at or before `from`.
fn cut(file: Arc<VodFile>, start_ms: i64, from: i64, to: i64, at: Timestamp) -> Option<Piece> {
    let movie = &file.movie;
    let zero = first_dts(movie)?;
    let dts_of =
        |ms: i64| zero.saturating_add(ms.saturating_sub(start_ms).saturating_mul(TICKS_PER_MS));
    let target = dts_of(from.max(start_ms));
    let first = movie.peek_dts(&movie.seek(target))?;
    let end = dts_of(to).min(movie.duration);
    if end <= first {
        return None;
    }
    let wall_ms = start_ms.saturating_add(first.saturating_sub(zero) / TICKS_PER_MS);
    Some(Piece {
        file,
        seek: target,
        first,
        end,
        at,
        wall_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::filemap::FileKey;
    use crate::io::readers::Readers;
    use bytes::Bytes;
    use sluice_media::codec::AacConfig;
    use sluice_media::mp4::{MovieTrack, Sample};
    use sluice_media::{Track, TrackConfig};
    use std::sync::OnceLock;

    /// A file of `secs` seconds: one audio sample every 0.1 s (without video, playing
    /// starts at the first sample at or after a time).
    fn file(secs: i64) -> Arc<VodFile> {
        let step = Timestamp::from(CLOCK_HZ) / 10;
        let samples = (0..secs * 10)
            .map(|i| Sample {
                offset: 0,
                size: 0,
                dts: i * step,
                cts: 0,
                keyframe: true,
            })
            .collect();
        let config = AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).unwrap();
        let meta = std::fs::metadata(env!("CARGO_MANIFEST_DIR")).unwrap();
        Arc::new(VodFile {
            path: "rec/cam.mp4".into(),
            bytes: Bytes::new(),
            movie: Movie {
                tracks: vec![MovieTrack {
                    track_id: 1,
                    track: Track::new(TrackConfig::Aac(config)),
                    timescale: 90_000,
                    samples,
                }],
                duration: secs * Timestamp::from(CLOCK_HZ),
                fragmented: true,
                skipped: Vec::new(),
            },
            tag: 0,
            ident: FileKey::of(&meta),
            _hold: Arc::new(Readers::default()).hold(&meta).unwrap(),
            hls: OnceLock::new(),
        })
    }

    const S: Timestamp = CLOCK_HZ as Timestamp;

    #[test]
    fn pieces_cut_a_range_and_close_up_the_gap_between_files() {
        // Files of 5 s at 1 000 000 ms and of 4 s at 1 008 000 ms (a 3 s gap); the
        // range from 1.35 s into the first to 1 s before the end of the second.
        let (a, b) = (1_000_000, 1_008_000);
        let (from, to) = (a + 1350, b + 3000);
        let first = cut(file(5), a, from, to, 0).unwrap();
        assert_eq!(
            (first.first, first.end, first.wall_ms),
            (S * 14 / 10, 5 * S, a + 1400)
        );
        let second = cut(file(4), b, from, to, first.len()).unwrap();
        assert_eq!(
            (second.first, second.end, second.at),
            (0, 3 * S, 36 * S / 10)
        );
        let timeline = Timeline {
            pieces: vec![first, second],
            origin: 0,
        };
        // 3.6 s of the first file, 3 s of the second: no gap between.
        assert_eq!(timeline.duration(), 66 * S / 10);
        assert_eq!(timeline.locate(0), Some((0, 14 * S / 10)));
        assert_eq!(timeline.locate(4 * S), Some((1, 4 * S / 10)));
        assert_eq!(
            timeline.locate(100 * S),
            Some((1, 3 * S - 1)),
            "past the end: the last"
        );
        assert_eq!(timeline.wall_at(0), a + 1400);
        assert_eq!(timeline.wall_at(4 * S), b + 400);
        assert_eq!(timeline.wall_end(), b + 3000);
        // A range that ends before a file starts takes nothing of it.
        assert!(cut(file(4), b, from, b, 0).is_none());
    }

    #[test]
    fn a_single_file_is_its_own_timeline() {
        let timeline = Timeline::single(file(3));
        assert_eq!(timeline.duration(), 3 * S);
        assert_eq!(timeline.locate(S), Some((0, S)));
        assert_eq!(timeline.locate(-S), Some((0, 0)));
    }

    #[test]
    fn an_open_end_stops_at_now() {
        let r = TimeRange {
            from: Some(10),
            to: None,
        };
        assert_eq!(clipped(r, 100), (10, 100));
        assert_eq!(clipped(r, 5), (10, 10));
    }

    #[test]
    fn recordings_open_below_the_media_root_when_they_are_in_it() {
        let media = Path::new("/srv/media");
        assert_eq!(
            open_root(Path::new("/srv/media/recordings"), media),
            (media.to_path_buf(), "recordings/".to_string())
        );
        let elsewhere = Path::new("/var/rec");
        assert_eq!(
            open_root(elsewhere, media),
            (elsewhere.to_path_buf(), String::new())
        );
    }
}
