//! A WHIP publisher's RTP to the stream: a jitter buffer and depacketizer per codec
//! (the ones RTSP publishers over UDP use), frames and parameter sets to its
//! [`Publisher`], audio and video on one timeline ([`AvSync`]).

use crate::core::ingest::Publisher;
use bytes::Bytes;
use sluice_media::codec::OpusConfig;
use sluice_media::rtp::{AacParams, Received, RtpCodec, RtpDepacketizer, RtpReceiver};
use sluice_media::{MediaKind, Timestamp, Track, TrackConfig};
use sluice_webrtc::Incoming;
use std::time::{Duration, Instant, SystemTime};

/// How long a packet may wait for one sent before it (reordering on the way).
const JITTER_DELAY: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub struct WhipIngest {
    pub publisher: Publisher,
    video: Option<RtpReceiver>,
    audio: Option<RtpReceiver>,
    /// Opus carries no configuration in band: the stream gets one before its first
    /// audio frame.
    opus_announced: bool,
    sync: AvSync,
}

/// Puts a publisher's two RTP tracks on one timeline. Each receiver counts from its
/// own first frame; a track starts where its first frame arrived after the first
/// frame of either (what is known then). Once both tracks have a sender report, the
/// sender's own clock says how far apart the tracks are, and the audio is moved to
/// match the video (a browser's camera starts later than its microphone, by a few
/// hundred ms at times). Later reports keep them together: a sound card's clock
/// drifts from the system's by tens of ppm, about a frame of audio in ten minutes,
/// and each report that finds the audio a frame or more off moves it by at most a
/// frame. Audio frames a move would put at or before one already sent are dropped.
#[derive(Debug, Default)]
pub struct AvSync {
    /// When the first frame of either track came out.
    origin: Option<Instant>,
    /// Each track's offset on the stream's timeline (90 kHz): video, audio.
    offset: [Option<Timestamp>; 2],
    /// Each track's latest frame, on its own time (before the offset): where a report's
    /// RTP time is found without unwrapping it from the first frame's.
    last_dts: [Option<Timestamp>; 2],
    /// Each track's latest report: its place on the stream's timeline minus the
    /// sender's wall clock (90 kHz ticks). Tracks in sync have the same.
    skew: [Option<i128>; 2],
    moved: bool,
    last_audio: Option<Timestamp>,
}

/// The stream's clock, 90 kHz.
const HZ: Timestamp = sluice_media::CLOCK_HZ as Timestamp;

/// A first move of the audio smaller than this is not worth the jump.
const SYNC_SLACK: Timestamp = HZ / 100;

/// Drift is corrected once it reaches an Opus frame (20 ms), a frame at a time: a
/// report from just before a step of the sender's clock moves the audio one frame,
/// not by the step.
const DRIFT_SLACK: Timestamp = HZ / 50;

impl AvSync {
    /// The offset of a frame of track `t` (0 video, 1 audio) coming out at `now`;
    /// `None` when the frame is to be dropped.
    fn place(&mut self, t: usize, dts: Timestamp, now: Instant) -> Option<Timestamp> {
        let origin = *self.origin.get_or_insert(now);
        let slot = self.offset.get_mut(t)?;
        let offset = *slot.get_or_insert_with(|| {
            let since = now.saturating_duration_since(origin);
            (since.as_micros() as i64) * HZ / 1_000_000
        });
        if t == 1 {
            let at = dts + offset;
            if self.last_audio.is_some_and(|last| at <= last) {
                return None;
            }
            self.last_audio = Some(at);
        }
        if let Some(last) = self.last_dts.get_mut(t) {
            *last = Some(dts);
        }
        Some(offset)
    }

    /// Notes a sender report of track `t` (wall clock, RTP time, clock rate), given the
    /// RTP timestamp of the track's frame at its time 0 (its receiver's); moves the
    /// audio when both tracks are known and apart. Returns the move, in 90 kHz ticks.
    fn report(
        &mut self,
        t: usize,
        first_rtp: Option<u32>,
        (ntp, rtp, clock): (SystemTime, u32, u32),
    ) -> Option<Timestamp> {
        let first = first_rtp?;
        let offset = i128::from((*self.offset.get(t)?)?);
        let last = i128::from(self.last_dts.get(t).copied().flatten().unwrap_or(0));
        let clock = i128::from(clock.max(1));
        let hz = i128::from(HZ);
        // The latest frame's RTP time (its receiver counts from the first), and the
        // report's signed distance from it: small, however long the session, so the
        // 32-bit wrap reinterpreted is the point.
        let last_rtp = first.wrapping_add((last * clock / hz).rem_euclid(1 << 32) as u32);
        let ahead = i128::from(rtp.wrapping_sub(last_rtp) as i32);
        let on_timeline = offset + last + ahead * hz / clock;
        let wall = ntp.duration_since(SystemTime::UNIX_EPOCH).ok()?;
        let wall = wall.as_nanos() as i128 * hz / 1_000_000_000;
        if let Some(slot) = self.skew.get_mut(t) {
            *slot = Some(on_timeline - wall);
        }
        let [Some(video), Some(audio)] = self.skew else {
            return None;
        };
        let first_move = !self.moved;
        self.moved = true;
        let by = Timestamp::try_from(video - audio).ok()?;
        let by = match first_move {
            true if by.abs() < SYNC_SLACK => return None,
            true => by,
            false if by.abs() < DRIFT_SLACK => return None,
            false => by.clamp(-DRIFT_SLACK, DRIFT_SLACK),
        };
        let audio_offset = self.offset.get_mut(1)?;
        *audio_offset = Some(audio_offset.unwrap_or(0) + by);
        self.skew[1] = Some(audio + i128::from(by));
        Some(by)
    }
}

fn receiver(codec: RtpCodec, clock: u32) -> Option<RtpReceiver> {
    let depacketizer = RtpDepacketizer::new(codec, clock, AacParams::default()).ok()?;
    Some(RtpReceiver::new(depacketizer, JITTER_DELAY))
}

impl WhipIngest {
    pub fn new(publisher: Publisher, video: bool, audio: bool) -> Self {
        WhipIngest {
            publisher,
            video: video.then(|| receiver(RtpCodec::H264, 90_000)).flatten(),
            audio: audio.then(|| receiver(RtpCodec::Opus, 48_000)).flatten(),
            opus_announced: false,
            sync: AvSync::default(),
        }
    }

    /// A sender report of `codec`'s track: its wall clock and RTP time.
    pub fn sender_report(&mut self, codec: Incoming, ntp: SystemTime, rtp_time: u32) {
        let (t, receiver, clock) = match codec {
            Incoming::H264 => (0, &self.video, 90_000),
            Incoming::Opus => (1, &self.audio, 48_000),
        };
        let first = receiver.as_ref().and_then(RtpReceiver::first_rtp_timestamp);
        if let Some(by) = self.sync.report(t, first, (ntp, rtp_time, clock)) {
            tracing::info!(
                ms = by * 1000 / HZ,
                "whip: audio moved to the video by the sender reports"
            );
        }
    }

    /// One RTP packet of `codec`.
    pub fn push(&mut self, codec: Incoming, rtp: Vec<u8>, now: Instant) {
        self.publisher.bytes += rtp.len() as u64;
        let receiver = match codec {
            Incoming::H264 => &mut self.video,
            Incoming::Opus => &mut self.audio,
        };
        if let Some(r) = receiver {
            if let Err(e) = r.push_datagram(Bytes::from(rtp), now) {
                tracing::debug!(?codec, "bad RTP packet: {e}");
            }
        }
        self.take(now);
    }

    /// Releases what the jitter buffers held long enough.
    pub fn release(&mut self, now: Instant) {
        for r in [&mut self.video, &mut self.audio].into_iter().flatten() {
            r.handle_timeout(now);
        }
        self.take(now);
    }

    /// When the oldest held packet is due.
    pub fn due(&self) -> Option<Instant> {
        [&self.video, &self.audio]
            .into_iter()
            .flatten()
            .filter_map(RtpReceiver::poll_timeout)
            .min()
    }

    fn take(&mut self, now: Instant) {
        for (t, r) in [&mut self.video, &mut self.audio].into_iter().enumerate() {
            let Some(r) = r else {
                continue;
            };
            while let Some(received) = r.poll() {
                match received {
                    Received::Track(at, track) => {
                        let offset = self.sync.offset[t].unwrap_or(0);
                        self.publisher.set_track(at + offset, track)
                    }
                    Received::Frame(mut frame) => {
                        let Some(offset) = self.sync.place(t, frame.dts, now) else {
                            continue;
                        };
                        frame.dts += offset;
                        frame.pts += offset;
                        if frame.kind == MediaKind::Audio && !self.opus_announced {
                            self.opus_announced = true;
                            let opus = TrackConfig::Opus(OpusConfig::stereo_48k());
                            self.publisher.set_track(frame.dts, Track::new(opus));
                        }
                        self.publisher.frame(frame)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Timestamp = HZ / 1000;

    #[test]
    fn tracks_start_where_their_first_frames_came() {
        let mut s = AvSync::default();
        let t0 = Instant::now();
        assert_eq!(s.place(0, 0, t0), Some(0));
        // The audio's first frame comes 120 ms later: it starts there.
        assert_eq!(
            s.place(1, 0, t0 + Duration::from_millis(120)),
            Some(120 * MS)
        );
        assert_eq!(
            s.place(1, 20 * MS, t0 + Duration::from_millis(140)),
            Some(120 * MS)
        );
    }

    #[test]
    fn sender_reports_move_the_audio_and_late_audio_is_dropped() {
        let mut s = AvSync::default();
        let t0 = Instant::now();
        // Video first frame at RTP 1000 (90 kHz), audio's at 5000 (48 kHz); both came
        // out together, so each starts at 0.
        assert_eq!(s.place(0, 0, t0), Some(0));
        assert_eq!(s.place(1, 0, t0), Some(0));
        assert_eq!(s.place(1, 20 * MS, t0), Some(0));
        // The sender's clock: video RTP 1000 + 90_000 at T+1 s, and audio RTP
        // 5000 + 48_000 at T+1.3 s, so the audio's first frame was captured 300 ms
        // after the video's.
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let video = (base + Duration::from_secs(1), 91_000, 90_000);
        let audio = (base + Duration::from_millis(1300), 53_000, 48_000);
        assert_eq!(s.report(0, Some(1000), video), None);
        assert_eq!(s.report(1, Some(5000), audio), Some(300 * MS));
        assert_eq!(s.place(1, 40 * MS, t0), Some(300 * MS));
        // In sync now: the same report again moves nothing.
        assert_eq!(s.report(1, Some(5000), audio), None);

        // Moved back instead: the audio frames that would repeat times are dropped.
        let mut s = AvSync::default();
        assert_eq!(s.place(0, 0, t0), Some(0));
        assert_eq!(
            s.place(1, 0, t0 + Duration::from_millis(200)),
            Some(200 * MS)
        );
        assert_eq!(s.place(1, 20 * MS, t0), Some(200 * MS));
        let audio = (base + Duration::from_millis(1050), 53_000, 48_000);
        s.report(0, Some(1000), video);
        assert_eq!(s.report(1, Some(5000), audio), Some(-150 * MS));
        // Audio now at 50 ms + its own time: 40 ms and 60 ms fall before 220 ms.
        assert_eq!(s.place(1, 40 * MS, t0), None);
        assert_eq!(s.place(1, 180 * MS, t0), Some(50 * MS));
    }

    /// Audio from a sound card whose clock runs 0.1 % fast (exaggerated: real ones are
    /// tens of ppm): its RTP time gains 1 ms a second on the sender's wall clock, which
    /// the video's follows. Without correction the audio ends 120 ms late after two
    /// minutes; with it, it stays within a frame of where the reports put it.
    #[test]
    fn drift_between_the_sender_clocks_is_corrected_a_frame_at_a_time() {
        let mut s = AvSync::default();
        let t0 = Instant::now();
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let fast = 1.001_f64;
        let (mut video, mut audio, mut moves) = (0u64, 0u64, Vec::new());
        for ms in 0..120_000u64 {
            let now = t0 + Duration::from_millis(ms);
            // A video frame every 40 ms of wall clock at RTP 1000 + 3600 k; an audio
            // frame (960 samples) whenever the fast card has sampled another 20 ms.
            while video * 40 <= ms {
                s.place(0, (video * 3600) as Timestamp, now);
                video += 1;
            }
            while (audio as f64) * 20.0 / fast <= ms as f64 {
                s.place(1, (audio * 1800) as Timestamp, now);
                audio += 1;
            }
            if ms % 5000 == 2500 {
                let at = base + Duration::from_millis(ms);
                let v = 1000u32.wrapping_add((ms * 90) as u32);
                let a = 5000u32.wrapping_add((ms as f64 * 48.0 * fast) as u32);
                s.report(0, Some(1000), (at, v, 90_000));
                moves.extend(s.report(1, Some(5000), (at, a, 48_000)));
            }
        }
        // Where the audio belongs after 120 s: its RTP time ran 120 ms ahead.
        let want = -120 * MS;
        let got = s.offset[1].unwrap();
        assert!(
            (got - want).abs() <= DRIFT_SLACK,
            "offset {got}, want {want}"
        );
        // Frame-sized steps, each back.
        assert!(moves.len() >= 5, "{moves:?}");
        assert!(moves.iter().all(|&m| m == -DRIFT_SLACK), "{moves:?}");
    }

    /// A session longer than the RTP clock's signed range (6.6 h at 90 kHz) still finds
    /// its reports' place: the distance is taken from the latest frame, not the first.
    #[test]
    fn reports_are_placed_past_the_rtp_wrap() {
        let mut s = AvSync::default();
        let t0 = Instant::now();
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let hours = 10 * 3600 * HZ;
        s.place(0, 0, t0);
        s.place(1, 0, t0);
        s.place(0, hours, t0);
        s.place(1, hours, t0);
        let later = base + Duration::from_secs(10 * 3600);
        let v = 1000u32.wrapping_add((10u64 * 3600 * 90_000) as u32);
        let a = 5000u32.wrapping_add((10u64 * 3600 * 48_000) as u32);
        assert_eq!(s.report(0, Some(1000), (later, v, 90_000)), None);
        // In sync at 10 h: no move (reading the wrap from the first frame would see
        // the audio hours off).
        assert_eq!(s.report(1, Some(5000), (later, a, 48_000)), None);
        // Then 30 ms ahead by its report: moved back, by one frame at most.
        let ahead = a.wrapping_add(30 * 48);
        assert_eq!(
            s.report(1, Some(5000), (later, ahead, 48_000)),
            Some(-DRIFT_SLACK)
        );
    }
}
