//! The figures: per-player counters and lag, the live totals shared with the progress
//! line, and the summary math (percentiles) of the report.
//!
//! Lag is wall time minus media time, both measured from the first coded frame:
//! `lag = (now - first_frame_at) - (ts - first_ts)`. A server that keeps up holds it
//! near its minimum; a stall is the lag growing more than [`STALL_MS`] past its
//! minimum, counted once, after which the minimum restarts from the current lag.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

/// Lag growth that counts as a stall: a player buffering one second would rebuffer.
pub(crate) const STALL_MS: f64 = 1000.0;

/// Why a player (or publisher) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorKind {
    /// TCP connect failed (refused, unreachable, timed out).
    Connect,
    /// The server closed the connection before the end of the run.
    Closed,
    /// The server answered something the protocol does not allow, or refused.
    Protocol,
    /// Another socket error.
    Io,
    /// The TLS handshake failed (certificate refused, no common parameters) or the
    /// server broke TLS (a bad record, an alert).
    Tls,
    /// Not playing (or publishing) yet when the run ended: the server never answered.
    Timeout,
}

/// Totals every player adds to, read by the progress line and the window marks.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub connected: AtomicU64,
    pub failed: AtomicU64,
    pub bytes: AtomicU64,
}

impl Live {
    pub(crate) fn add_bytes(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// One player's figures; a row of the JSON report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlayerRow {
    pub id: usize,
    /// Read at `--slow-rate` times the stream's bitrate.
    pub slow: bool,
    /// TCP connect to response head or `NetStream.Play.Start`.
    pub connect_ms: Option<f64>,
    /// Connect start to the first video keyframe.
    pub first_keyframe_ms: Option<f64>,
    pub bytes: u64,
    pub video_frames: u64,
    pub audio_frames: u64,
    /// Media time covered, first to last coded frame.
    pub media_ms: i64,
    pub stalls: u32,
    /// Largest lag past its minimum.
    pub max_lag_ms: f64,
    /// HLS: segments (or LL-HLS parts) received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<u64>,
    /// HLS: playlist responses received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub playlists: Option<u64>,
    /// HLS: segments or parts missed (left the playlist before being fetched, or 404).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misses: Option<u64>,
    /// RTSP: the RTP packets, their sequence gaps and the frames they made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtp: Option<RtpCounts>,
    /// Publish-to-play delay of the video frames that carried the bench publisher's
    /// wall-clock stamp (`crate::stamp`); absent when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish_latency_ms: Option<Spread>,
    pub error_kind: Option<ErrorKind>,
    pub error: Option<String>,
    #[serde(skip)]
    lag: LagClock,
    /// The delays behind `publish_latency_ms`, in ms, up to [`MAX_LATENCY_SAMPLES`].
    #[serde(skip)]
    pub latencies: Vec<f32>,
    /// When the player started (Unix µs): frames stamped earlier (a GOP cache's
    /// burst) say how old the cache is, not what delivery adds, and are left out.
    #[serde(skip)]
    started_us: u64,
    /// Added to [`STALL_MS`] for this player: a polling HLS player's poll interval,
    /// by which a segment's arrival may slip without the player running dry.
    #[serde(skip)]
    pub stall_slack_ms: f64,
}

/// Stamped frames whose delay a player keeps (25 fps for 400 s).
pub(crate) const MAX_LATENCY_SAMPLES: usize = 10_000;

impl PlayerRow {
    pub(crate) fn new(id: usize, slow: bool) -> Self {
        PlayerRow {
            id,
            slow,
            connect_ms: None,
            first_keyframe_ms: None,
            bytes: 0,
            video_frames: 0,
            audio_frames: 0,
            media_ms: 0,
            stalls: 0,
            max_lag_ms: 0.0,
            segments: None,
            playlists: None,
            misses: None,
            rtp: None,
            publish_latency_ms: None,
            error_kind: None,
            error: None,
            lag: LagClock::default(),
            latencies: Vec::new(),
            started_us: crate::stamp::unix_us(),
            stall_slack_ms: 0.0,
        }
    }

    /// Whether this player connected and ran to the end.
    pub(crate) fn ok(&self) -> bool {
        self.connect_ms.is_some() && self.error_kind.is_none()
    }

    /// Sums up the latency samples into `publish_latency_ms`.
    pub(crate) fn finish(&mut self) {
        if !self.latencies.is_empty() {
            self.publish_latency_ms =
                Some(Spread::of(self.latencies.iter().map(|&v| f64::from(v))));
        }
    }

    pub(crate) fn fail(&mut self, kind: ErrorKind, what: impl ToString) {
        if self.error_kind.is_none() {
            self.error_kind = Some(kind);
            self.error = Some(what.to_string());
        }
    }

    /// Counts one media message received at `now`; `start` is when connecting began.
    pub(crate) fn on_media(&mut self, m: &crate::scan::Media, now: Instant, start: Instant) {
        if m.is_video_frame() {
            let stamp = crate::stamp::find(&m.head);
            self.on_video_frame(m.ts_ms, m.is_keyframe(), stamp, now, start);
        } else if m.is_audio_frame() {
            self.audio_frames += 1;
        }
    }

    /// Counts one sample of an fMP4 fragment received at `now` (no publisher's stamp:
    /// the scanner does not read sample data).
    pub(crate) fn on_fmp4_sample(
        &mut self,
        s: &sluice_bench::fmp4_scan::Fmp4Sample,
        now: Instant,
        start: Instant,
    ) {
        if s.video {
            // The lag clock runs on u32 ms, wrapping as FLV timestamps do.
            self.on_video_frame(s.dts_ms as u32, s.keyframe, None, now, start);
        } else {
            self.audio_frames += 1;
        }
    }

    /// Takes the publisher's stamp `t` of a frame that arrived at `arrived_us` (both
    /// Unix µs) as a latency sample.
    pub(crate) fn on_stamp(&mut self, t: u64, arrived_us: u64) {
        if t >= self.started_us && self.latencies.len() < MAX_LATENCY_SAMPLES {
            let delay_us = arrived_us as i64 - t as i64;
            self.latencies.push(delay_us as f32 / 1000.0);
        }
    }

    /// Counts one coded video frame received at `now`: `ts_ms` is its media time (any
    /// origin, wrapping), `stamp` the bench publisher's wall-clock stamp it carried.
    pub(crate) fn on_video_frame(
        &mut self,
        ts_ms: u32,
        keyframe: bool,
        stamp: Option<u64>,
        now: Instant,
        start: Instant,
    ) {
        self.video_frames += 1;
        if let Some(t) = stamp {
            self.on_stamp(t, crate::stamp::unix_us());
        }
        if self.first_keyframe_ms.is_none() {
            if !keyframe {
                return;
            }
            self.first_keyframe_ms = Some(ms(now - start));
        }
        let (media_ms, lag) = self.lag.frame(ts_ms, now, self.stall_slack_ms);
        self.media_ms = media_ms;
        if let Some(l) = lag {
            self.max_lag_ms = self.max_lag_ms.max(l.over_min_ms);
            if l.stalled {
                self.stalls += 1;
            }
        }
    }
}

/// What an RTSP player counts of RTP, all tracks together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RtpCounts {
    /// RTP packets received on the tracks set up (RTCP not included).
    pub packets: u64,
    /// Packets missing from the sequence: skipped sequence numbers, counted from the
    /// `RTP-Info` start when the server gave one (UDP loss, or a server-side skip).
    pub lost: u64,
    /// Packets that came behind a later one (reordered or duplicated).
    pub late: u64,
    /// Frames the depacketizer dropped: incomplete after a loss, or malformed.
    pub frames_dropped: u64,
    /// Packets the depacketizer refused as malformed.
    pub bad_packets: u64,
}

impl PlayerRow {
    /// Counts one HLS segment or part received in full at `now`; `media_end_ms` is the
    /// media time at its end (the sum of the durations received so far). The first
    /// one counts as the first keyframe (segments start with one).
    pub(crate) fn on_segment(&mut self, media_end_ms: u64, now: Instant, start: Instant) {
        *self.segments.get_or_insert(0) += 1;
        if self.first_keyframe_ms.is_none() {
            self.first_keyframe_ms = Some(ms(now - start));
        }
        // The lag clock runs on u32 ms: it wraps after 49 days, as FLV timestamps do.
        let (_, lag) = self
            .lag
            .frame(media_end_ms as u32, now, self.stall_slack_ms);
        self.media_ms = media_end_ms as i64;
        if let Some(l) = lag {
            self.max_lag_ms = self.max_lag_ms.max(l.over_min_ms);
            if l.stalled {
                self.stalls += 1;
            }
        }
    }
}

/// Wall clock against media clock, from the first frame.
#[derive(Debug, Clone, Default)]
struct LagClock {
    first: Option<(Instant, u32)>,
    min_ms: f64,
    stall_base_ms: f64,
}

struct Lag {
    over_min_ms: f64,
    stalled: bool,
}

impl LagClock {
    /// Returns media time so far and, after the first frame, the lag figures.
    fn frame(&mut self, ts: u32, now: Instant, slack_ms: f64) -> (i64, Option<Lag>) {
        let Some((t0, ts0)) = self.first else {
            self.first = Some((now, ts));
            return (0, None);
        };
        let media = i64::from(ts.wrapping_sub(ts0) as i32);
        let lag = ms(now - t0) - media as f64;
        self.min_ms = self.min_ms.min(lag);
        self.stall_base_ms = self.stall_base_ms.min(lag);
        let stalled = lag - self.stall_base_ms > STALL_MS + slack_ms;
        if stalled {
            self.stall_base_ms = lag;
        }
        (
            media,
            Some(Lag {
                over_min_ms: lag - self.min_ms,
                stalled,
            }),
        )
    }
}

pub(crate) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50, p99 and max of a sample, nearest-rank; all zero and `n: 0` when empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Spread {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        Spread {
            n: v.len(),
            p50: percentile(&v, 50.0),
            p99: percentile(&v, 99.0),
            max: v[v.len() - 1],
        }
    }
}

/// Nearest-rank percentile of sorted, non-empty `v`: the smallest value with at least
/// `p`% of the sample at or below it.
pub(crate) fn percentile(v: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::Media;
    use std::time::Duration;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 50.0), 7.0);
        let s = Spread::of([3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!(
            s,
            Spread {
                n: 3,
                p50: 2.0,
                p99: 3.0,
                max: 3.0
            }
        );
        assert_eq!(Spread::of([]), Spread::default());
    }

    fn frame(ts: u32, key: bool) -> Media {
        let mut head = [0; crate::stamp::HEAD_LEN];
        head[..2].copy_from_slice(&[if key { 0x17 } else { 0x27 }, 1]);
        Media {
            tag_type: 9,
            ts_ms: ts,
            len: 100,
            head,
        }
    }

    #[test]
    fn lag_and_stalls() {
        let t0 = Instant::now();
        let mut p = PlayerRow::new(0, false);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Frames before the first keyframe do not start the clock.
        p.on_media(&frame(0, false), at(5), t0);
        assert_eq!(p.first_keyframe_ms, None);
        // A GOP-cache burst: 1 s of media in 10 ms, then real time.
        p.on_media(&frame(1000, true), at(10), t0);
        assert_eq!(p.first_keyframe_ms, Some(10.0));
        p.on_media(&frame(2000, false), at(20), t0);
        for i in 1..=10 {
            p.on_media(
                &frame(2000 + i * 100, false),
                at(20 + u64::from(i) * 100),
                t0,
            );
        }
        assert_eq!(p.stalls, 0);
        assert!(p.max_lag_ms < 20.0, "{}", p.max_lag_ms);
        // 1.5 s without frames, then frames resume: one stall.
        p.on_media(&frame(3100, false), at(2620), t0);
        assert_eq!(p.stalls, 1);
        assert!((p.max_lag_ms - 1500.0).abs() < 1.0, "{}", p.max_lag_ms);
        // Steady after the stall: no new one.
        p.on_media(&frame(3200, false), at(2720), t0);
        assert_eq!(p.stalls, 1);
        assert_eq!(p.media_ms, 2200);
        assert_eq!(p.video_frames, 15);
    }
}
