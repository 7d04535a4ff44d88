//! RTMP chunks on message stream 1: every message with a full (type 0) chunk header and
//! one fixed outgoing chunk size, so the chunked bytes are the same for every player.

use super::flv::{tag_body, ts32};
use super::OutputFormat;
use crate::core::packet::{Packet, Shape};
use bytes::{Bytes, BytesMut};
use sluice_media::flv;

pub(super) struct Rtmp;

impl OutputFormat for Rtmp {
    fn name(&self) -> &'static str {
        "rtmp"
    }

    fn build(&self, packet: &Packet, shape: &Shape) -> Bytes {
        let Some((tag_type, body)) = tag_body(packet) else {
            return Bytes::new();
        };
        let csid = match tag_type {
            flv::TAG_VIDEO => sluice_rtmp::CSID_VIDEO,
            flv::TAG_AUDIO => sluice_rtmp::CSID_AUDIO,
            _ => sluice_rtmp::CSID_DATA,
        };
        let mut out = BytesMut::with_capacity(body.len() + body.len() / 128 + 32);
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
