//! From a publisher's media to packets in the hub, for every ingest protocol: FLV tag
//! bodies (RTMP; HTTP-FLV pull for relays later) and ready tracks and frames (RTSP,
//! from RTP). Both paths end in [`Ingest::set_track`] and [`Ingest::frame`], which make
//! the packets and hand them to the stream (`Stream::publish_media`), which feeds the
//! outputs that are being consumed.
//!
//! A session publishes through a [`Publisher`], the hub's handle that unregisters it
//! when dropped.
//!
//! It also keeps the stream's timeline continuous when a publisher comes back within
//! the grace window: its first timestamp is moved to follow the last one players got.

use crate::core::cue::StreamCue;
use crate::core::hub::{Hub, PublishError, Stream};
use crate::core::packet::{wall_clock, Packet, Payload};
use bytes::Bytes;
use sluice_media::flv::{self, AudioTag, FlvError, VideoTag};
use sluice_media::ts::Cue;
use sluice_media::{Frame, MediaKind, Timestamp, Track};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One publisher session's view of its stream.
#[derive(Debug)]
pub struct Ingest {
    pub stream: Arc<Stream>,
    /// Added to every incoming timestamp (90 kHz); fixed at the first timed packet.
    offset: Option<Timestamp>,
    video: Option<Arc<Track>>,
    audio: Option<Arc<Track>>,
    /// Frames dropped because no decoder configuration preceded them.
    pub dropped: u64,
    pub frames: u64,
    pub bytes: u64,
}

impl Ingest {
    pub fn new(stream: Arc<Stream>) -> Self {
        let returning = {
            let mut state = stream.lock();
            let returning = state.generation > 0;
            if returning {
                state.mark_restart();
            }
            returning
        };
        if returning {
            stream.discontinuity();
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

    /// The stream's time of a publisher time, both in 90 kHz ticks.
    fn rebase(&mut self, ticks: Timestamp) -> Timestamp {
        let offset = *self.offset.get_or_insert_with(|| {
            let state = self.stream.lock();
            match state.last_ts_ms {
                Some(last) => {
                    Frame::ticks_from_ms(last + state.last_delta_ms.clamp(1, 100)) - ticks
                }
                None => 0,
            }
        });
        ticks + offset
    }

    /// The current decoder configuration of one kind of track.
    pub fn track(&self, kind: MediaKind) -> Option<&Arc<Track>> {
        match kind {
            MediaKind::Video => self.video.as_ref(),
            MediaKind::Audio => self.audio.as_ref(),
        }
    }

    /// A video message body.
    pub fn video(&mut self, ts_ms: i64, body: &Bytes) -> Result<(), FlvError> {
        self.bytes += body.len() as u64;
        let Some(tag) = self.skip_unsupported(flv::parse_video(body))? else {
            return Ok(());
        };
        let dts = Frame::ticks_from_ms(ts_ms);
        match tag {
            VideoTag::Config(track) => self.set_track(dts, track),
            VideoTag::Frame {
                keyframe,
                cts_ms,
                data,
                ..
            } => self.frame(Frame {
                kind: MediaKind::Video,
                dts,
                pts: dts + Frame::ticks_from_ms(i64::from(cts_ms)),
                keyframe,
                payload: data,
            }),
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
        let dts = Frame::ticks_from_ms(ts_ms);
        match tag {
            AudioTag::Config(track) => self.set_track(dts, track),
            AudioTag::Frame { data, implied, .. } => {
                if let Some(track) = implied {
                    self.set_track(dts, track);
                }
                self.frame(Frame {
                    kind: MediaKind::Audio,
                    dts,
                    pts: dts,
                    keyframe: true,
                    payload: data,
                });
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

    /// A decoder configuration at publisher time `ticks` (90 kHz); the same one
    /// again is ignored. A new video configuration makes new players wait for a
    /// keyframe made with it.
    pub fn set_track(&mut self, ticks: Timestamp, track: Track) {
        let kind = track.kind();
        if self.track(kind).map(|t| &**t) == Some(&track) {
            return;
        }
        let track = Arc::new(track);
        match kind {
            MediaKind::Video => self.video = Some(track.clone()),
            MediaKind::Audio => self.audio = Some(track.clone()),
        }
        // The timeline is anchored at the first frame, not here: a server sends
        // its configuration at time 0 to a player that joins late, so anchoring
        // on it would move every frame of a returning publisher by its uptime.
        let last = self.stream.lock().last_ts_ms;
        let ts = match (self.offset, last) {
            (None, Some(last)) => last,
            _ => Frame::ms_from_ticks(self.rebase(ticks)),
        };
        let packet = Packet::new(Payload::Config(track.clone()), ts, false);
        self.stream.publish_track(&track, packet);
    }

    /// A coded frame with timestamps on the publisher's clock (90 kHz); dropped (and
    /// counted) while its kind has no decoder configuration.
    pub fn frame(&mut self, mut frame: Frame) {
        let Some(track) = self.track(frame.kind).cloned() else {
            self.dropped += 1;
            return;
        };
        let dts = self.rebase(frame.dts);
        frame.pts = frame.pts - frame.dts + dts;
        frame.dts = dts;
        // Audio is a start point only for streams without video.
        let key = match frame.kind {
            MediaKind::Video => frame.keyframe,
            MediaKind::Audio => self.video.is_none(),
        };
        self.frames += 1;
        let stream = &self.stream;
        stream.frames_in.fetch_add(1, Ordering::Relaxed);
        if frame.kind == MediaKind::Video
            && frame.pts != frame.dts
            && !stream.b_frames.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                stream = %stream.key,
                "the video has B-frames (frames out of order): WebRTC players may stall; \
                 encode without them for WebRTC viewers (x264 bframes=0, see docs/webrtc.md)"
            );
        }
        stream
            .bytes_in
            .fetch_add(frame.payload.len() as u64, Ordering::Relaxed);
        let ts = Frame::ms_from_ticks(dts);
        self.stream
            .publish_media(Packet::new(Payload::Media { frame, track }, ts, key));
    }

    /// An SCTE-35 cue of a TS input, at `cue.at` on the publisher's clock: placed on
    /// the stream's timeline and handed to the stream (HLS marks and cuts its
    /// segments there), and logged for operators checking a feed's ad markers.
    pub fn cue(&mut self, cue: &Cue) {
        let at = self.offset.unwrap_or(0).saturating_add(cue.at);
        let cue = StreamCue {
            at,
            received_ms: i64::try_from(wall_clock().as_millis()).unwrap_or(i64::MAX),
            info: cue.info.clone(),
        };
        tracing::info!(
            stream = %self.stream.key,
            at_ms = cue.at_ms(),
            direction = cue.direction().unwrap_or("-"),
            duration_ms = cue.info.duration().map(|d| d / 90),
            command = cue.command(),
            event_id = cue.event_id(),
            "SCTE-35 cue"
        );
        self.stream.publish_cue(cue);
    }

    /// A script data body (`onMetaData` and its object).
    pub fn metadata(&mut self, body: Bytes) {
        let ts = self.stream.lock().last_ts_ms.unwrap_or(0);
        let packet = Packet::new(Payload::Metadata(body), ts, false);
        self.stream.prepare(&packet);
        self.stream.lock().metadata = Some(packet.clone());
        self.stream.push(packet);
    }
}

/// A stream's publisher, registered in the hub for as long as this handle lives.
/// Dropping it (the session ended, cleanly or not) leaves the stream to its players
/// for the grace window, so every protocol cleans up the same way.
#[derive(Debug)]
pub struct Publisher {
    ingest: Ingest,
    hub: Arc<Hub>,
    id: u64,
    /// Disconnects the publisher when its stream has no viewers (see `no_viewers_s`).
    watch: Option<tokio::task::AbortHandle>,
    /// Its place within `limits.max_publishers_per_ip`.
    slot: Option<super::limits::PublisherSlot>,
}

impl Publisher {
    /// Makes session `id` the publisher of `key`, or says why not.
    pub fn new(hub: &Arc<Hub>, key: &str, id: u64) -> Result<Publisher, PublishError> {
        let stream = hub.publish(key, id)?;
        Ok(Publisher {
            ingest: Ingest::new(stream),
            hub: hub.clone(),
            id,
            watch: None,
            slot: None,
        })
    }

    /// Holds `slot` for as long as it publishes.
    pub fn hold(&mut self, slot: super::limits::PublisherSlot) {
        self.slot = Some(slot);
    }

    /// A task to abort when the publisher goes (its watch for viewers).
    pub fn watch(&mut self, task: tokio::task::AbortHandle) {
        self.watch = Some(task);
    }
}

impl std::ops::Deref for Publisher {
    type Target = Ingest;
    fn deref(&self) -> &Ingest {
        &self.ingest
    }
}

impl std::ops::DerefMut for Publisher {
    fn deref_mut(&mut self) -> &mut Ingest {
        &mut self.ingest
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            watch.abort();
        }
        let stream = &self.ingest.stream;
        tracing::info!(
            stream = %stream.key,
            frames = self.ingest.frames,
            bytes = self.ingest.bytes,
            dropped = self.ingest.dropped,
            tap_bytes = stream.taps_memory(),
            tap_viewers = stream.tap_viewers(),
            "unpublish"
        );
        stream.publisher_left();
        let Some(generation) = self.hub.unpublish(stream, self.id) else {
            return;
        };
        let hub = self.hub.clone();
        let stream = stream.clone();
        let grace = hub.config.publish_grace;
        tokio::task::spawn_local(async move {
            tokio::time::sleep(grace).await;
            if hub.expire(&stream, generation) {
                tracing::info!(stream = %stream.key, "stream ended");
            }
        });
    }
}
