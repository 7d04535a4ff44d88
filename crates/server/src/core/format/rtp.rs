//! RTP for RTSP: a frame's packets behind their interleave headers, in one buffer made
//! by the stream's RTP source in stream order (sequence numbers must follow stream
//! order, so a player never builds this form; see [`super::OrderedForm`]). Decoder
//! configurations and metadata travel in the SDP, not in RTP. Derived audio (Opus made
//! from AAC) gets its RTP from the transcoding thread's own source.

use super::{OrderedForm, OutputFormat};
use crate::core::packet::{Packet, Payload, RtpSource, Shape};
use bytes::Bytes;
use sluice_media::{Frame, Track};
use std::sync::Arc;

pub(super) struct Rtp;

static EMPTY: Bytes = Bytes::new();

impl OutputFormat for Rtp {
    fn name(&self) -> &'static str {
        "rtp"
    }

    fn build(&self, _: &Packet, _: &Shape) -> Bytes {
        Bytes::new()
    }

    fn held<'a>(&self, packet: &'a Packet) -> Option<&'a Bytes> {
        Some(packet.rtp().map_or(&EMPTY, |r| &r.data))
    }

    fn ordered(&self) -> Option<Box<dyn OrderedForm>> {
        Some(Box::new(RtpSource::new()))
    }
}

impl OrderedForm for RtpSource {
    fn track(&mut self, track: &Arc<Track>, derived: bool) {
        if !derived {
            self.set_track(track);
        }
    }

    fn takes(&self, packet: &Packet) -> bool {
        !packet.derived && matches!(packet.payload, Payload::Media { .. })
    }

    fn made(&self, packet: &Packet) -> bool {
        packet.rtp().is_some()
    }

    fn make(&mut self, packet: &Packet, frame: &Frame) {
        if let Some(form) = self.packetize(frame) {
            packet.set_rtp(form);
        }
    }

    fn media_clock(&mut self) {
        self.on_media_clock();
    }
}
