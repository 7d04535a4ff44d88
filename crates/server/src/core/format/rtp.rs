//! RTP for RTSP: a frame's packets behind their interleave headers, in one buffer made
//! by the stream's publisher as it pushed the frame (sequence numbers must follow
//! stream order, so this form is not made lazily; see `packet::RtpSource`). Decoder
//! configurations and metadata travel in the SDP, not in RTP.

use super::OutputFormat;
use crate::core::packet::{Packet, Shape};
use bytes::Bytes;

pub(super) struct Rtp;

impl OutputFormat for Rtp {
    fn name(&self) -> &'static str {
        "rtp"
    }

    fn build(&self, packet: &Packet, _: &Shape) -> Bytes {
        packet
            .rtp
            .as_ref()
            .map_or_else(Bytes::new, |r| r.data.clone())
    }
}
