//! RTP for RTSP: a frame's packets behind their interleave headers, in one buffer made
//! by the stream's RTP source in stream order (sequence numbers must follow stream
//! order, so a player never builds this form; see `hub::Stream::want_rtp`). Decoder
//! configurations and metadata travel in the SDP, not in RTP.

use super::OutputFormat;
use crate::core::packet::{Packet, Shape};
use bytes::Bytes;

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
}
