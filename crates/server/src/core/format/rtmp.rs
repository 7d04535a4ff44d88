//! RTMP chunks on message stream 1: every message with a full (type 0) chunk header and
//! one fixed outgoing chunk size, so the chunked bytes are the same for every player.
//! The message body is the packet's FLV tag body: chunked from the FLV form, not
//! rebuilt from the frame.

use super::flv::{tag_parts, ts32};
use super::{Format, FormatId, OutputFormat};
use crate::core::packet::{Packet, Shape};
use bytes::{Bytes, BytesMut};
use sluice_media::flv;

pub(super) struct Rtmp;

impl OutputFormat for Rtmp {
    fn name(&self) -> &'static str {
        "rtmp"
    }

    fn build(&self, packet: &Packet, shape: &Shape) -> Bytes {
        let tag = packet.bytes(Format::every(FormatId::FLV), shape);
        let Some((tag_type, body)) = tag_parts(tag) else {
            return Bytes::new();
        };
        let csid = match tag_type {
            flv::TAG_VIDEO => sluice_rtmp::CSID_VIDEO,
            flv::TAG_AUDIO => sluice_rtmp::CSID_AUDIO,
            _ => sluice_rtmp::CSID_DATA,
        };
        let chunk = shape.rtmp_chunk_size.max(1);
        let mut out = BytesMut::with_capacity(body.len() + body.len() / chunk + 32);
        sluice_rtmp::write_message_chunks(
            &mut out,
            csid,
            ts32(packet),
            tag_type,
            sluice_rtmp::MEDIA_STREAM_ID,
            &body,
            shape.rtmp_chunk_size,
        );
        out.freeze()
    }
}
