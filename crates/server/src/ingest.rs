//! From a publisher's FLV tag bodies to packets in the hub, for any ingest protocol
//! that speaks FLV bodies (RTMP now; HTTP-FLV pull for relays later).
//!
//! It also keeps the stream's timeline continuous when a publisher comes back within
//! the grace window: its first timestamp is moved to follow the last one players got.

use crate::hub::Stream;
use crate::packet::{Packet, Payload};
use bytes::Bytes;
use sluice_media::flv::{self, AudioTag, FlvError, VideoTag};
use sluice_media::{Frame, MediaKind, Track};
use std::sync::Arc;

/// One publisher session's view of its stream.
#[derive(Debug)]
pub struct Ingest {
    pub stream: Arc<Stream>,
    /// Added to every incoming timestamp; fixed at the first timed packet.
    offset: Option<i64>,
    video: Option<Arc<Track>>,
    audio: Option<Arc<Track>>,
    /// Frames dropped because no decoder configuration preceded them.
    pub dropped: u64,
    pub frames: u64,
    pub bytes: u64,
}

impl Ingest {
    pub fn new(stream: Arc<Stream>) -> Self {
        if stream.lock().generation > 0 {
            stream.hls.discontinuity();
        }
        Ingest {
            stream,
            offset: None,
            video: None,
            audio: None,
            dropped: 0,
            frames: 0,
            bytes: 0,
        }
    }

    fn rebase(&mut self, ts_ms: i64) -> i64 {
        let offset = *self.offset.get_or_insert_with(|| {
            let state = self.stream.lock();
            match state.last_ts_ms {
                Some(last) => last + state.last_delta_ms.clamp(1, 100) - ts_ms,
                None => 0,
            }
        });
        ts_ms + offset
    }

    /// A video message body.
    pub fn video(&mut self, ts_ms: i64, body: &Bytes) -> Result<(), FlvError> {
        self.bytes += body.len() as u64;
        let Some(tag) = self.skip_unsupported(flv::parse_video(body))? else {
            return Ok(());
        };
        match tag {
            VideoTag::Config(track) => {
                if self.video.as_deref() == Some(&track) {
                    return Ok(());
                }
                let track = Arc::new(track);
                self.video = Some(track.clone());
                self.stream.hls.set_track(&track);
                let ts = self.rebase(ts_ms);
                let packet = Packet::new(Payload::Config(track), ts, false);
                {
                    let mut state = self.stream.lock();
                    state.has_video = true;
                    state.video_config = Some(packet.clone());
                    state.ring.reset_start();
                }
                self.stream.push(packet);
            }
            VideoTag::Frame {
                keyframe,
                cts_ms,
                data,
                ..
            } => {
                let Some(track) = self.video.clone() else {
                    self.dropped += 1;
                    return Ok(());
                };
                let ts = self.rebase(ts_ms);
                let dts = Frame::ticks_from_ms(ts);
                let frame = Frame {
                    kind: MediaKind::Video,
                    dts,
                    pts: dts + Frame::ticks_from_ms(i64::from(cts_ms)),
                    keyframe,
                    payload: data,
                };
                self.frames += 1;
                self.stream.hls.push(&self.stream.key, &frame);
                self.stream
                    .push(Packet::new(Payload::Media { frame, track }, ts, keyframe));
            }
            VideoTag::EndOfSequence | VideoTag::Other => {}
        }
        Ok(())
    }

    /// An audio message body.
    pub fn audio(&mut self, ts_ms: i64, body: &Bytes) -> Result<(), FlvError> {
        self.bytes += body.len() as u64;
        let Some(tag) = self.skip_unsupported(flv::parse_audio(body))? else {
            return Ok(());
        };
        match tag {
            AudioTag::Config(track) => self.set_audio_config(ts_ms, track),
            AudioTag::Frame { data, implied, .. } => {
                if let Some(track) = implied {
                    if self.audio.as_deref() != Some(&track) {
                        self.set_audio_config(ts_ms, track);
                    }
                }
                let Some(track) = self.audio.clone() else {
                    self.dropped += 1;
                    return Ok(());
                };
                let ts = self.rebase(ts_ms);
                let dts = Frame::ticks_from_ms(ts);
                let frame = Frame {
                    kind: MediaKind::Audio,
                    dts,
                    pts: dts,
                    keyframe: true,
                    payload: data,
                };
                // Audio is a start point only for streams without video.
                let key = self.video.is_none();
                self.frames += 1;
                self.stream.hls.push(&self.stream.key, &frame);
                self.stream
                    .push(Packet::new(Payload::Media { frame, track }, ts, key));
            }
            AudioTag::Other => {}
        }
        Ok(())
    }

    /// A codec or packet form we do not carry is dropped (and counted); only a
    /// malformed body ends the session.
    fn skip_unsupported<T>(&mut self, parsed: Result<T, FlvError>) -> Result<Option<T>, FlvError> {
        match parsed {
            Ok(tag) => Ok(Some(tag)),
            Err(FlvError::Unsupported { .. } | FlvError::UnsupportedCodec { .. }) => {
                self.dropped += 1;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn set_audio_config(&mut self, ts_ms: i64, track: Track) {
        if self.audio.as_deref() == Some(&track) {
            return;
        }
        let track = Arc::new(track);
        self.audio = Some(track.clone());
        self.stream.hls.set_track(&track);
        let ts = self.rebase(ts_ms);
        let packet = Packet::new(Payload::Config(track), ts, false);
        self.stream.lock().audio_config = Some(packet.clone());
        self.stream.push(packet);
    }

    /// A script data body (`onMetaData` and its object).
    pub fn metadata(&mut self, body: Bytes) {
        let ts = self.stream.lock().last_ts_ms.unwrap_or(0);
        let packet = Packet::new(Payload::Metadata(body), ts, false);
        self.stream.lock().metadata = Some(packet.clone());
        self.stream.push(packet);
    }
}
