//! FLV tags, as HTTP-FLV sends them, and the same tags framed for WebSocket-FLV.

use super::{FormatId, OutputFormat};
use crate::core::packet::{Packet, Payload, Shape};
use bytes::{Bytes, BytesMut};
use sluice_media::{flv, MediaKind};

/// The FLV/RTMP tag type and body of a packet, or `None` when it has no FLV form (an
/// audio codec whose sequence header FLV does not carry). RTMP sends the same bodies.
pub(super) fn tag_body(packet: &Packet) -> Option<(u8, Bytes)> {
    let mut body = BytesMut::new();
    let tag_type = match &packet.payload {
        Payload::Media { frame, track } => {
            let tag_type = match frame.kind {
                MediaKind::Video => {
                    let cts = i32::try_from(frame.cts_ms()).unwrap_or(0);
                    flv::video_frame_header(&mut body, track, frame.keyframe, cts).ok()?;
                    flv::TAG_VIDEO
                }
                MediaKind::Audio => {
                    flv::audio_frame_header(&mut body, track).ok()?;
                    flv::TAG_AUDIO
                }
            };
            body.extend_from_slice(&frame.payload);
            tag_type
        }
        Payload::Config(track) => match track.kind() {
            MediaKind::Video => {
                flv::write_video_config(&mut body, track).ok()?;
                flv::TAG_VIDEO
            }
            MediaKind::Audio => {
                if !flv::write_audio_config(&mut body, track).ok()? {
                    return None;
                }
                flv::TAG_AUDIO
            }
        },
        Payload::Metadata(amf) => {
            body.extend_from_slice(amf);
            flv::TAG_SCRIPT
        }
    };
    Some((tag_type, body.freeze()))
}

/// RTMP and FLV carry 32-bit millisecond timestamps that wrap.
pub(super) fn ts32(packet: &Packet) -> u32 {
    packet.ts_ms as u32
}

/// Complete FLV tags with their PreviousTagSize trailer.
pub(super) struct Flv;

impl OutputFormat for Flv {
    fn name(&self) -> &'static str {
        "flv"
    }

    fn build(&self, packet: &Packet, _: &Shape) -> Bytes {
        let Some((tag_type, body)) = tag_body(packet) else {
            return Bytes::new();
        };
        let mut out = BytesMut::with_capacity(body.len() + 15);
        if flv::write_tag(&mut out, tag_type, ts32(packet), &body).is_err() {
            return Bytes::new();
        }
        out.freeze()
    }

    fn preamble(&self, has_video: bool) -> Vec<Bytes> {
        let mut header = BytesMut::with_capacity(13);
        flv::write_file_header(&mut header, true, has_video);
        vec![header.freeze()]
    }
}

/// FLV tags, each inside one binary WebSocket frame, contiguous: one buffer per packet
/// in a player's `writev` instead of two.
pub(super) struct WsFlv;

fn ws_frame(payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 10);
    sluice_http::ws::write_frame_header(&mut out, sluice_http::ws::Opcode::Binary, payload.len());
    out.extend_from_slice(payload);
    out.freeze()
}

impl OutputFormat for WsFlv {
    fn name(&self) -> &'static str {
        "ws-flv"
    }

    fn build(&self, packet: &Packet, shape: &Shape) -> Bytes {
        let tag = packet.bytes(super::Format::all(FormatId::FLV), shape);
        if tag.is_empty() {
            return Bytes::new();
        }
        ws_frame(tag)
    }

    fn preamble(&self, has_video: bool) -> Vec<Bytes> {
        Flv.preamble(has_video)
            .iter()
            .map(|h| ws_frame(h))
            .collect()
    }
}
