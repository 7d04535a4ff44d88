//! The stream's audio in the other codec, once per stream (see `sluice_transcode`):
//! AAC to Opus for WebRTC players, Opus to AAC for the consumers that carry no Opus
//! (RTMP, HTTP-FLV, WebSocket-FLV, HLS's MPEG-TS, SRT's MPEG-TS). A feature: the hub
//! knows it only as a [`Derive`] (`core::derive`), given by the server when this build
//! transcodes.
//!
//! Why a thread per stream: decoding, (resampling) and encoding cost about half a
//! percent of a core per stream, too much to do on a worker's event loop between other
//! sessions' I/O, and too little to need a pool. The thread runs while the stream has
//! consumers that take transcoded audio (`hub::Stream::want_transcoded`): the
//! publisher hands it each audio frame through a bounded channel (never waiting on
//! it), and it pushes each frame it makes into the stream's ring as a derived packet
//! ([`crate::core::packet::Packet::derived`]), which only those consumers take
//! ([`crate::core::format::Format::transcoded`]): Opus with its RTP form, AAC after
//! its decoder configuration, which the hub sets when the thread starts
//! ([`Derive::derived_track`]).
//!
//! Which way is the stream's audio track's: AAC is made into Opus, Opus into AAC,
//! anything else into nothing. When the thread starts, the hub hands it the audio of
//! the ring from its start keyframe (the GOP cache a new player gets), then each new
//! frame: a player's audio starts with its video, a moment later. Output times are
//! the input's (the chains count samples from it), so audio and video stay in step.

use crate::core::derive::{Derive, DeriveRun, DerivedOut};
use sluice_media::{Frame, Track};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;

/// Whether this build transcodes (the `transcode` cargo feature).
pub const AVAILABLE: bool = cfg!(feature = "transcode");

/// Audio frames waiting for the thread, at most (about 5 s of AAC or Opus): past it,
/// frames are dropped rather than hold the publisher.
const BACKLOG: usize = 256;

/// Frames of the ring handed to a thread that starts, at most (half the backlog,
/// 2.5 s or more): the newest of the GOP cache, so that live frames still fit.
const BACKFILL: usize = BACKLOG / 2;

/// Transcoding, as the hub takes it: a thread per stream that has consumers of it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Transcoding {
    /// Whether AAC becomes Opus in 40 ms packets rather than 20.
    opus_40ms: bool,
}

impl Transcoding {
    /// With Opus packets of `opus_frame_ms` (`webrtc.opus_frame_ms`: 40, else 20).
    pub fn new(opus_frame_ms: u64) -> Transcoding {
        Transcoding {
            opus_40ms: opus_frame_ms == 40,
        }
    }
}

impl Derive for Transcoding {
    fn derived_track(&self, own: &Track) -> Option<Arc<Track>> {
        derived_track(own)
    }

    fn start(
        &self,
        out: DerivedOut,
        own: Option<Arc<Track>>,
        derived: Option<Arc<Track>>,
    ) -> Option<Box<dyn DeriveRun>> {
        Transcoder::spawn(out, own, derived, self.opus_40ms)
            .map(|t| Box::new(t) as Box<dyn DeriveRun>)
    }

    fn backfill(&self) -> usize {
        BACKFILL
    }
}

/// What the publisher hands the thread.
#[derive(Debug)]
#[cfg_attr(not(feature = "transcode"), allow(dead_code))]
enum Input {
    /// The stream's audio track, and the track made from it (see [`derived_track`]).
    Track {
        own: Arc<Track>,
        derived: Option<Arc<Track>>,
    },
    Frame(Frame),
}

/// The track of the AAC made from an Opus `track`: known before the first frame, so
/// that the hub hands it to consumers at once (`hub::Stream::want_transcoded`). `None`
/// for other codecs (Opus made from AAC needs no configuration in band) and in builds
/// that do not transcode.
fn derived_track(track: &Track) -> Option<Arc<Track>> {
    #[cfg(feature = "transcode")]
    if let sluice_media::TrackConfig::Opus(c) = &track.config {
        let asc = sluice_transcode::OpusToAac::audio_specific_config_for(c.channels.into());
        let config = sluice_media::codec::AacConfig::parse(bytes::Bytes::copy_from_slice(&asc));
        return config
            .ok()
            .map(|c| Arc::new(Track::new(sluice_media::TrackConfig::Aac(c))));
    }
    let _ = track;
    None
}

/// The publisher's side of a stream's transcoding thread; dropping it ends the thread.
#[derive(Debug)]
struct Transcoder {
    tx: SyncSender<Input>,
    dropped: u64,
}

impl Transcoder {
    /// Starts the thread for `out`'s stream, whose audio is `track` now, made into
    /// `derived`; `None` when this build does not transcode or no thread could be
    /// started.
    fn spawn(
        out: DerivedOut,
        track: Option<Arc<Track>>,
        derived: Option<Arc<Track>>,
        opus_40ms: bool,
    ) -> Option<Transcoder> {
        if !AVAILABLE {
            return None;
        }
        let (tx, rx) = mpsc::sync_channel(BACKLOG);
        let (key, name) = (out.key.clone(), format!("transcode-{}", out.id));
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || transcode(out, rx, opus_40ms));
        if let Err(e) = spawned {
            tracing::warn!(stream = %key, "transcoding not started: {e}");
            return None;
        }
        let mut t = Transcoder { tx, dropped: 0 };
        if let Some(own) = track {
            t.send(Input::Track { own, derived });
        }
        Some(t)
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

impl DeriveRun for Transcoder {
    fn track(&mut self, own: &Arc<Track>, derived: Option<Arc<Track>>) {
        self.send(Input::Track {
            own: own.clone(),
            derived,
        });
    }

    fn frame(&mut self, frame: &Frame) {
        self.send(Input::Frame(frame.clone()));
    }
}

/// The chain running now, the way the stream's audio track says.
#[cfg(feature = "transcode")]
enum Chain {
    /// AAC in, Opus (and its RTP form) out, for WebRTC players.
    ToOpus {
        chain: Box<sluice_transcode::AacToOpus>,
        track: Arc<Track>,
        rtp: crate::core::packet::RtpSource,
    },
    /// Opus in, AAC out, for RTMP, FLV and MPEG-TS consumers.
    ToAac {
        chain: sluice_transcode::OpusToAac,
        track: Arc<Track>,
    },
}

#[cfg(feature = "transcode")]
impl Chain {
    /// The chain for the stream's audio `track`, making `derived` (AAC from Opus);
    /// `None` for a codec nothing is made from.
    fn new(
        track: &Track,
        derived: Option<Arc<Track>>,
        opus_40ms: bool,
    ) -> Option<Result<Chain, sluice_transcode::Error>> {
        use sluice_media::codec::OpusConfig;
        use sluice_media::TrackConfig;
        use sluice_transcode::OpusFrameLength;
        Some(match &track.config {
            TrackConfig::Aac(c) => {
                let length = if opus_40ms {
                    OpusFrameLength::Ms40
                } else {
                    OpusFrameLength::Ms20
                };
                sluice_transcode::AacToOpus::with_frames(&c.asc, length).map(|chain| {
                    let chain = Box::new(chain);
                    let track = Arc::new(Track::new(TrackConfig::Opus(OpusConfig::stereo_48k())));
                    let mut rtp = crate::core::packet::RtpSource::new();
                    rtp.set_track(&track);
                    Chain::ToOpus { chain, track, rtp }
                })
            }
            TrackConfig::Opus(c) => {
                let track = derived?;
                sluice_transcode::OpusToAac::new(usize::from(c.channels))
                    .map(|chain| Chain::ToAac { chain, track })
            }
            _ => return None,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Chain::ToOpus { .. } => "AAC to Opus for WebRTC players",
            Chain::ToAac { .. } => "Opus to AAC for RTMP, FLV and MPEG-TS players",
        }
    }

    /// Feeds one frame and pushes what comes out into the stream's ring.
    fn push(&mut self, frame: &Frame, to: &DerivedOut) -> Result<(), sluice_transcode::Error> {
        use crate::core::packet::{Packet, Payload};
        use sluice_media::MediaKind;
        let made = |payload: Vec<u8>, pts: i64, track: &Arc<Track>| {
            let frame = Frame {
                kind: MediaKind::Audio,
                dts: pts,
                pts,
                keyframe: true,
                payload: payload.into(),
            };
            (frame, track.clone(), Frame::ms_from_ticks(pts))
        };
        match self {
            Chain::ToOpus { chain, track, rtp } => {
                let result = chain.push(&frame.payload, frame.pts);
                while let Some(out) = chain.pop() {
                    let (frame, track, ts) = made(out.data, out.pts, track);
                    let form = rtp.packetize(&frame);
                    let payload = Payload::Media { frame, track };
                    to.push(Packet::derived(payload, ts, form));
                }
                result
            }
            Chain::ToAac { chain, track } => {
                let result = chain.push(&frame.payload, frame.pts);
                while let Some(out) = chain.pop() {
                    let (frame, track, ts) = made(out.data, out.pts, track);
                    let payload = Payload::Media { frame, track };
                    to.push(Packet::derived(payload, ts, None));
                }
                result
            }
        }
    }
}

#[cfg(feature = "transcode")]
fn transcode(out: DerivedOut, rx: mpsc::Receiver<Input>, opus_40ms: bool) {
    let span = tracing::info_span!("transcode", stream = %out.key);
    let _enter = span.enter();
    let mut chain: Option<Chain> = None;
    let mut errors = 0u64;
    while let Ok(input) = rx.recv() {
        if !out.alive() {
            return;
        }
        let frame = match input {
            Input::Track { own, derived } => {
                chain = match Chain::new(&own, derived, opus_40ms) {
                    Some(Ok(c)) => {
                        tracing::info!("{}: started", c.name());
                        Some(c)
                    }
                    Some(Err(e)) => {
                        tracing::warn!("the other codec's players get no audio: {e}");
                        None
                    }
                    None => None,
                };
                continue;
            }
            Input::Frame(frame) => frame,
        };
        let Some(c) = &mut chain else { continue };
        if let Err(e) = c.push(&frame, &out) {
            errors += 1;
            if errors.is_power_of_two() {
                tracing::info!(errors, "{e}");
            }
        }
    }
    tracing::info!("transcoding stopped");
}

#[cfg(not(feature = "transcode"))]
fn transcode(_: DerivedOut, _: mpsc::Receiver<Input>, _: bool) {}
