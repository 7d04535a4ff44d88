//! AAC to Opus for WebRTC players, once per stream (see `sluice_transcode`).
//!
//! Why a thread per stream: decoding, resampling and encoding cost about a percent of a
//! core per stream, too much to do on a worker's event loop between other sessions'
//! I/O, and too little to need a pool. The thread runs while the stream has WebRTC
//! players that take transcoded audio (`hub::Stream::want_opus`): the publisher hands
//! it each AAC frame through a bounded channel (never waiting on it), and it pushes
//! each Opus frame into the stream's ring as a derived packet with its RTP form, which
//! only those players take ([`crate::core::format::Format::transcoded`]).
//!
//! Opus starts with the first AAC frame after the first such player came: the frames
//! of the GOP cache before it are not transcoded, so a new player's audio may start a
//! little after its video.

use crate::core::hub::Stream;
use sluice_media::{Frame, Track};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Weak};

/// Whether this build transcodes (the `transcode` cargo feature).
pub const AVAILABLE: bool = cfg!(feature = "transcode");

/// AAC frames waiting for the thread, at most (about 5 s at 48 kHz): past it, frames
/// are dropped rather than hold the publisher.
const BACKLOG: usize = 256;

/// What the publisher hands the thread.
#[derive(Debug)]
#[cfg_attr(not(feature = "transcode"), allow(dead_code))]
enum Input {
    Track(Arc<Track>),
    Frame(Frame),
}

/// The publisher's side of a stream's transcoding thread; dropping it ends the thread.
#[derive(Debug)]
pub struct Transcoder {
    tx: SyncSender<Input>,
    dropped: u64,
}

impl Transcoder {
    /// Starts the thread for `stream`, whose audio is `track` now; `None` when this
    /// build does not transcode or no thread could be started.
    pub fn spawn(stream: &Arc<Stream>, track: Option<Arc<Track>>) -> Option<Transcoder> {
        if !AVAILABLE {
            return None;
        }
        let (tx, rx) = mpsc::sync_channel(BACKLOG);
        let weak = Arc::downgrade(stream);
        let key = stream.key.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("opus-{}", stream.id))
            .spawn(move || run(weak, key, rx));
        if let Err(e) = spawned {
            tracing::warn!(stream = %stream.key, "transcoding not started: {e}");
            return None;
        }
        let mut t = Transcoder { tx, dropped: 0 };
        if let Some(track) = track {
            t.send(Input::Track(track));
        }
        Some(t)
    }

    /// A new decoder configuration of the stream.
    pub fn track(&mut self, track: &Arc<Track>) {
        self.send(Input::Track(track.clone()));
    }

    /// An audio frame of the stream.
    pub fn frame(&mut self, frame: &Frame) {
        self.send(Input::Frame(frame.clone()));
    }

    fn send(&mut self, input: Input) {
        match self.tx.try_send(input) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped += 1;
                if self.dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped = self.dropped,
                        "transcoding falls behind: AAC frames dropped"
                    );
                }
            }
        }
    }
}

#[cfg(feature = "transcode")]
fn run(stream: Weak<Stream>, key: String, rx: mpsc::Receiver<Input>) {
    use crate::core::packet::{Packet, Payload, RtpSource};
    use sluice_media::codec::OpusConfig;
    use sluice_media::{MediaKind, TrackConfig};
    use sluice_transcode::AacToOpus;

    let span = tracing::info_span!("transcode", stream = %key);
    let _enter = span.enter();
    tracing::info!("AAC to Opus for WebRTC players: started");
    let opus = Arc::new(Track::new(TrackConfig::Opus(OpusConfig::stereo_48k())));
    let mut rtp = RtpSource::new();
    rtp.set_track(&opus);
    let mut chain: Option<AacToOpus> = None;
    let mut errors = 0u64;
    while let Ok(input) = rx.recv() {
        let aac = match input {
            Input::Track(track) => {
                chain = match &track.config {
                    TrackConfig::Aac(c) => match AacToOpus::new(&c.asc) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            tracing::warn!("WebRTC players get no audio: {e}");
                            None
                        }
                    },
                    _ => None,
                };
                continue;
            }
            Input::Frame(frame) => frame,
        };
        let Some(t) = &mut chain else { continue };
        if let Err(e) = t.push(&aac.payload, aac.pts) {
            errors += 1;
            if errors.is_power_of_two() {
                tracing::info!(errors, "{e}");
            }
        }
        while let Some(out) = t.pop() {
            let Some(stream) = stream.upgrade() else {
                return;
            };
            let frame = Frame {
                kind: MediaKind::Audio,
                dts: out.pts,
                pts: out.pts,
                keyframe: true,
                payload: out.data.into(),
            };
            let form = rtp.packetize(&frame);
            let ts = Frame::ms_from_ticks(out.pts);
            let payload = Payload::Media {
                frame,
                track: opus.clone(),
            };
            stream.push_derived(Packet::derived(payload, ts, form));
        }
    }
    tracing::info!("AAC to Opus: stopped");
}

#[cfg(not(feature = "transcode"))]
fn run(_: Weak<Stream>, _: String, _: mpsc::Receiver<Input>) {}
