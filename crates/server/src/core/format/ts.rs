//! MPEG-TS for SRT players: each frame's TS packets, made by the stream's
//! [`TsSource`] in stream order while SRT players play (continuity counters must
//! follow stream order, so a player never builds this form; see
//! [`super::OrderedForm`]). The audio of an Opus stream is the AAC the server makes
//! from it (TS players lack Opus). Every SRT player gets the same bytes, cut into the same
//! datagram payloads.
//!
//! The tables (PAT, PMT) go before every video keyframe, where players start, and
//! every half second of a stream without video. SCTE-35 cues pass through, retimed to
//! this clock, before the frame that follows them (see `TsMuxer::write_cue`). Decoder configurations travel in band:
//! parameter sets on keyframes, ADTS headers on AAC.

use super::{FormatId, OrderedForm, OutputFormat};
use crate::core::cue::StreamCue;
use crate::core::packet::{Packet, Payload, Shape};
use bytes::{Bytes, BytesMut};
use sluice_media::ts::TsMuxer;
use sluice_media::{Frame, MediaKind, Timestamp, Track, TrackConfig};
use std::collections::VecDeque;
use std::sync::Arc;

pub(super) struct Ts;

impl OutputFormat for Ts {
    fn name(&self) -> &'static str {
        "ts"
    }

    /// Never built on demand: the source sets it (see the module).
    fn build(&self, _: &Packet, _: &Shape) -> Bytes {
        Bytes::new()
    }

    fn ordered(&self) -> Option<Box<dyn OrderedForm>> {
        Some(Box::new(TsForm::default()))
    }
}

/// Whether `packet` is the AAC the server makes from an Opus stream's audio (a derived
/// packet; `opus_audio`: the stream's own audio is Opus): what the TS form, and HLS's
/// TS variant, take instead of the Opus.
pub(crate) fn aac_from_opus(packet: &Packet, opus_audio: bool) -> bool {
    matches!(&packet.payload, Payload::Media { track, .. }
        if packet.derived && opus_audio && matches!(track.config, TrackConfig::Aac(_)))
}

/// The stream's TS muxer as a form made in stream order.
#[derive(Debug, Default)]
struct TsForm {
    source: TsSource,
    /// The stream's own audio is Opus: the muxer takes the AAC made from it instead.
    opus_audio: bool,
}

impl OrderedForm for TsForm {
    fn track(&mut self, track: &Arc<Track>, derived: bool) {
        let takes = match (track.kind(), derived) {
            (MediaKind::Video, derived) => !derived,
            (MediaKind::Audio, false) => {
                self.opus_audio = matches!(track.config, TrackConfig::Opus(_));
                !self.opus_audio
            }
            (MediaKind::Audio, true) => self.opus_audio,
        };
        if takes {
            self.source.set_track(track);
        }
    }

    /// The stream's own video, and its own audio or, for an Opus stream, the AAC made
    /// from it.
    fn takes(&self, packet: &Packet) -> bool {
        match &packet.payload {
            Payload::Media { frame, track } if frame.kind == MediaKind::Audio => {
                if packet.derived {
                    aac_from_opus(packet, self.opus_audio)
                } else {
                    !self.opus_audio
                }
            }
            Payload::Media { .. } => !packet.derived,
            _ => false,
        }
    }

    fn made(&self, packet: &Packet) -> bool {
        packet.has_form(FormatId::TS)
    }

    fn make(&mut self, packet: &Packet, frame: &Frame) {
        packet.set_form(FormatId::TS, self.source.mux(frame));
    }

    fn cue(&mut self, cue: &Arc<StreamCue>) {
        if self.source.cues.len() == MAX_WAITING_CUES {
            self.source.cues.pop_front();
        }
        self.source.cues.push_back(cue.clone());
    }
}

/// Cues waiting for the next frame: they come seconds apart, so this is plenty.
const MAX_WAITING_CUES: usize = 8;

/// Tables at least this often (90 kHz) in a stream without video.
const AUDIO_TABLES_EVERY: Timestamp = 45_000;

/// A stream's TS muxer with what it needs from the world: the stream's tracks.
#[derive(Debug, Default)]
struct TsSource {
    video: Option<Arc<Track>>,
    audio: Option<Arc<Track>>,
    muxer: Option<TsMuxer>,
    last_tables: Option<Timestamp>,
    /// SCTE-35 cues to write before the next frame.
    cues: VecDeque<Arc<StreamCue>>,
}

impl TsSource {
    /// A new decoder configuration: a new muxer for the tracks now.
    fn set_track(&mut self, track: &Arc<Track>) {
        match track.kind() {
            MediaKind::Video => self.video = Some(track.clone()),
            MediaKind::Audio => self.audio = Some(track.clone()),
        }
        self.remux();
    }

    fn remux(&mut self) {
        let (v, a) = (self.video.as_deref(), self.audio.as_deref());
        // A codec TS cannot carry here (Opus, AV1) leaves the other track playing.
        self.muxer = TsMuxer::new(v, a)
            .or_else(|_| TsMuxer::new(v, None))
            .or_else(|_| TsMuxer::new(None, a))
            .ok();
        self.last_tables = None;
    }

    /// The TS form of `frame`: empty when the muxer cannot take it.
    fn mux(&mut self, frame: &Frame) -> Bytes {
        let Some(muxer) = &mut self.muxer else {
            return Bytes::new();
        };
        let mut out = BytesMut::new();
        let tables = match frame.kind {
            MediaKind::Video => frame.keyframe,
            MediaKind::Audio => {
                self.video.is_none()
                    && self
                        .last_tables
                        .is_none_or(|t| frame.dts - t >= AUDIO_TABLES_EVERY || frame.dts < t)
            }
        } || self.last_tables.is_none();
        if tables {
            muxer.write_tables(&mut out);
            self.last_tables = Some(frame.dts);
        }
        for cue in self.cues.drain(..) {
            muxer.write_cue(&cue.info, cue.at, &mut out);
        }
        if muxer.write_frame(frame, &mut out).is_err() {
            return Bytes::new();
        }
        out.freeze()
    }
}
