//! Reading a live stream from an HLS playlist: the media playlist (the highest
//! bandwidth variant of a master playlist) reloaded every target duration, each new
//! MPEG-TS segment fetched once and demuxed (`sluice_media::ts::TsDemuxer`), and the
//! frames handed on at the pace of their timestamps, so that the stream here flows
//! as a live publisher's does rather than a segment at a time.
//!
//! It starts three segments back from the live edge, as players do. fMP4 playlists
//! are refused (no fMP4 demuxer for pulls yet).

use super::client::Media;
use super::error::RelayError;
use crate::io::http_client::{get, get_up_to, FetchError, Target};
use sluice_hls::parse::{parse_playlist, resolve_uri, Playlist, SegmentRef};
use sluice_media::ts::{Demuxed, TsDemuxer};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

/// How long one playlist or segment request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest segment fetched.
const MAX_SEGMENT: usize = 64 << 20;
/// Segments back from the live edge where a pull starts.
const START_BACK: usize = 3;
/// Frames due this far behind the clock are released at once, and the pace restarts.
const BEHIND: Duration = Duration::from_secs(2);

pub struct HlsReader {
    /// The media playlist's URL.
    url: String,
    next_msn: Option<u64>,
    target: Duration,
    next_reload: Instant,
    /// The last time a new segment came.
    last_new: Instant,
    ended: bool,
    demux: TsDemuxer,
    /// Media in order; frames with their due time.
    queue: VecDeque<(Media, Option<Instant>)>,
    /// The pace: when the frame at this DTS (90 kHz) is due.
    pace: Option<(Instant, i64)>,
    bytes: u64,
}

/// Why fetching `url` failed.
fn fetch_error(url: &str) -> impl FnOnce(FetchError) -> RelayError + '_ {
    move |source| RelayError::Fetch {
        url: url.to_string(),
        source,
    }
}

/// Why the playlist at `url` does not parse.
fn playlist_error(url: &str) -> impl FnOnce(sluice_hls::parse::ParseError) -> RelayError + '_ {
    move |source| RelayError::Playlist {
        url: url.to_string(),
        source,
    }
}

async fn fetch_text(url: &str) -> Result<String, RelayError> {
    let target = Target::parse(url)
        .map_err(FetchError::from)
        .map_err(fetch_error(url))?;
    let f = get(&target, FETCH_TIMEOUT)
        .await
        .map_err(fetch_error(url))?;
    if f.status != 200 {
        return Err(RelayError::Status {
            what: url.to_string(),
            status: f.status,
        });
    }
    String::from_utf8(f.body.to_vec()).map_err(|_| RelayError::NotUtf8(url.to_string()))
}

impl HlsReader {
    /// Reads the playlist at `url` (a master playlist leads to its best variant).
    pub async fn open(url: &str) -> Result<HlsReader, RelayError> {
        let mut url = url.to_string();
        let text = fetch_text(&url).await?;
        let mut playlist = parse_playlist(&text).map_err(playlist_error(&url))?;
        if let Playlist::Master(variants) = &playlist {
            let best = variants
                .iter()
                .max_by_key(|v| v.bandwidth)
                .ok_or(RelayError::NoVariants)?;
            url = resolve_uri(&url, &best.uri);
            let text = fetch_text(&url).await?;
            playlist = parse_playlist(&text).map_err(playlist_error(&url))?;
        }
        let mut reader = HlsReader {
            url,
            next_msn: None,
            target: Duration::from_secs(2),
            next_reload: Instant::now(),
            last_new: Instant::now(),
            ended: false,
            demux: TsDemuxer::new(),
            queue: VecDeque::new(),
            pace: None,
            bytes: 0,
        };
        reader.take(playlist).await?;
        Ok(reader)
    }

    pub fn take_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }

    /// Fetches the segments of `playlist` not fetched yet.
    async fn take(&mut self, playlist: Playlist) -> Result<(), RelayError> {
        let Playlist::Media {
            target_duration,
            segments,
            ended,
            init,
        } = playlist
        else {
            return Err(RelayError::MasterNotMedia(self.url.clone()));
        };
        if init.is_some() {
            return Err(RelayError::Fmp4);
        }
        self.target = Duration::from_secs_f64(target_duration.clamp(0.1, 60.0));
        self.ended = ended;
        let start = self
            .next_msn
            .unwrap_or_else(|| segments.len().saturating_sub(START_BACK) as u64 + first(&segments));
        let new: Vec<&SegmentRef> = segments.iter().filter(|s| s.msn >= start).collect();
        for s in &new {
            let url = resolve_uri(&self.url, &s.uri);
            let target = Target::parse(&url)
                .map_err(FetchError::from)
                .map_err(fetch_error(&url))?;
            let f = get_up_to(&target, FETCH_TIMEOUT, MAX_SEGMENT)
                .await
                .map_err(fetch_error(&url))?;
            if f.status != 200 {
                return Err(RelayError::Status {
                    what: url,
                    status: f.status,
                });
            }
            self.bytes += f.body.len() as u64;
            self.demux.push(&f.body);
            while let Some(out) = self.demux.poll() {
                let item = match out {
                    Demuxed::Track(at, track) => (Media::Track(at, track), None),
                    Demuxed::Frame(frame) => {
                        let due = self.due(frame.dts);
                        (Media::Frame(frame), Some(due))
                    }
                    // An origin's HLS carries cues as playlist tags, not in the TS.
                    Demuxed::Cue(_) => continue,
                };
                self.queue.push_back(item);
            }
            self.next_msn = Some(s.msn + 1);
        }
        let now = Instant::now();
        if !new.is_empty() {
            self.last_new = now;
        }
        // Unchanged: look again sooner (RFC 8216 §6.3.4).
        self.next_reload = now
            + if new.is_empty() {
                self.target / 2
            } else {
                self.target
            };
        Ok(())
    }

    /// When the frame at `dts` is due on the pace of the stream.
    fn due(&mut self, dts: i64) -> Instant {
        let now = Instant::now();
        let (base, at) = *self.pace.get_or_insert((now, dts));
        let ahead =
            Duration::from_micros(u64::try_from((dts - at).max(0) / 90 * 1000).unwrap_or(0));
        let due = base + ahead;
        if due + BEHIND < now || dts < at {
            // Far behind, or back in time (a discontinuity): restart the pace here.
            self.pace = Some((now, dts));
            return now;
        }
        due
    }

    pub async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        let until = Instant::now() + wait;
        loop {
            let now = Instant::now();
            if let Some((_, due)) = self.queue.front() {
                if due.is_none_or(|d| d <= now) {
                    return Ok(self.queue.pop_front().map(|(m, _)| m));
                }
            }
            if self.queue.is_empty() && self.ended {
                return Err(RelayError::PlaylistEnded);
            }
            if now >= self.next_reload && !self.ended {
                let text = fetch_text(&self.url).await?;
                let playlist = parse_playlist(&text).map_err(playlist_error(&self.url))?;
                self.take(playlist).await?;
                let silent = (self.target * 3).max(Duration::from_secs(10));
                if self.last_new.elapsed() > silent {
                    return Err(RelayError::NoNewSegment(silent));
                }
                continue;
            }
            if now >= until {
                return Ok(None);
            }
            let mut wake = until.min(self.next_reload);
            if let Some((_, Some(due))) = self.queue.front() {
                wake = wake.min(*due);
            }
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// The first segment's sequence number.
fn first(segments: &[SegmentRef]) -> u64 {
    segments.first().map_or(0, |s| s.msn)
}
