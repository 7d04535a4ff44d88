//! A WHIP publisher's RTP to the stream: a jitter buffer and depacketizer per codec
//! (the ones RTSP publishers over UDP use), frames and parameter sets to its
//! [`Publisher`].

use crate::core::ingest::Publisher;
use bytes::Bytes;
use sluice_media::codec::OpusConfig;
use sluice_media::rtp::{AacParams, Received, RtpCodec, RtpDepacketizer, RtpReceiver};
use sluice_media::{MediaKind, Track, TrackConfig};
use sluice_webrtc::Incoming;
use std::time::{Duration, Instant};

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
        self.take();
    }

    /// Releases what the jitter buffers held long enough.
    pub fn release(&mut self, now: Instant) {
        for r in [&mut self.video, &mut self.audio].into_iter().flatten() {
            r.handle_timeout(now);
        }
        self.take();
    }

    /// When the oldest held packet is due.
    pub fn due(&self) -> Option<Instant> {
        [&self.video, &self.audio]
            .into_iter()
            .flatten()
            .filter_map(RtpReceiver::poll_timeout)
            .min()
    }

    fn take(&mut self) {
        for r in [&mut self.video, &mut self.audio].into_iter().flatten() {
            while let Some(received) = r.poll() {
                match received {
                    Received::Track(at, track) => self.publisher.set_track(at, track),
                    Received::Frame(frame) => {
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
