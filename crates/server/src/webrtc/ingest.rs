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
/// sender's own clock says how far apart their first frames really were, and audio
/// is moved once to match the video (a browser's camera starts later than its
/// microphone, by a few hundred ms at times). Audio frames the move would put at or
/// before one already sent are dropped.
#[derive(Debug, Default)]
pub struct AvSync {
    /// When the first frame of either track came out.
    origin: Option<Instant>,
    /// Each track's offset on the stream's timeline (90 kHz): video, audio.
    offset: [Option<Timestamp>; 2],
    /// Each track's first sender report: wall clock, RTP time, clock rate.
    report: [Option<(SystemTime, u32, u32)>; 2],
    /// The RTP timestamp of each track's frame at its time 0.
    first_rtp: [Option<u32>; 2],
    moved: bool,
    last_audio: Option<Timestamp>,
}

/// The stream's clock, 90 kHz.
const HZ: Timestamp = sluice_media::CLOCK_HZ as Timestamp;

/// A move of the audio smaller than this is not worth the jump.
const SYNC_SLACK: Timestamp = HZ / 100;

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
        Some(offset)
    }

    /// Notes track `t`'s first RTP timestamp (from its receiver) and a sender report;
    /// moves the audio when both tracks are known. Returns the move, in 90 kHz ticks.
    fn report(
        &mut self,
        t: usize,
        first_rtp: Option<u32>,
        report: (SystemTime, u32, u32),
    ) -> Option<Timestamp> {
        if let Some(slot) = self.report.get_mut(t) {
            slot.get_or_insert(report);
        }
        if let (Some(slot), Some(first)) = (self.first_rtp.get_mut(t), first_rtp) {
            slot.get_or_insert(first);
        }
        if self.moved {
            return None;
        }
        // The sender's wall-clock time of each track's first frame, in 90 kHz ticks
        // from the Unix epoch.
        let wall = |t: usize| -> Option<i128> {
            let (ntp, rtp, clock) = (*self.report.get(t)?)?;
            let first = (*self.first_rtp.get(t)?)?;
            let at = ntp.duration_since(SystemTime::UNIX_EPOCH).ok()?;
            let at = at.as_nanos() as i128 * i128::from(HZ) / 1_000_000_000;
            // The signed distance on the RTP clock: reinterpreting the wrap is the point.
            let back = i128::from(first.wrapping_sub(rtp) as i32);
            Some(at + back * i128::from(HZ) / i128::from(clock.max(1)))
        };
        let (video, audio) = (wall(0)?, wall(1)?);
        let [Some(v), Some(a)] = self.offset else {
            return None;
        };
        self.moved = true;
        let wanted = v + Timestamp::try_from(audio - video).ok()?;
        let by = wanted - a;
        if by.abs() < SYNC_SLACK {
            return None;
        }
        if let Some(slot) = self.offset.get_mut(1) {
            *slot = Some(wanted);
        }
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
    fn sender_reports_move_the_audio_once_and_late_audio_is_dropped() {
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
        // Only once.
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
}
