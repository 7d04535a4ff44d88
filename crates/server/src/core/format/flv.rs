//! FLV tags, as HTTP-FLV sends them, and the same tags framed for WebSocket-FLV. The
//! FLV tag is the base form of the RTMP family: RTMP chunks and WebSocket frames are
//! derived from its bytes, never rebuilt from the frame.

use super::{FormatId, OutputFormat};
use crate::core::packet::{Packet, Payload, Shape};
use bytes::{BufMut, Bytes, BytesMut};
use sluice_media::{flv, MediaKind};

/// Where the body starts in a tag, and how many bytes follow it.
const HEAD: usize = flv::TAG_HEADER_LEN;
const TRAIL: usize = 4;

/// The whole FLV tag of a packet (header, body, `PreviousTagSize`), with the frame's
/// payload copied once, or `None` when it has no FLV form (an audio codec whose
/// sequence header FLV does not carry).
fn tag(packet: &Packet) -> Option<Bytes> {
    let payload_len = match &packet.payload {
        Payload::Media { frame, .. } => frame.payload.len(),
        Payload::Metadata(amf) => amf.len(),
        Payload::Config(_) => 0,
    };
    let mut out = BytesMut::with_capacity(HEAD + 16 + payload_len + TRAIL);
    // The header's size field is known once the body is written.
    out.put_bytes(0, HEAD);
    let tag_type = match &packet.payload {
        Payload::Media { frame, track } => {
            let tag_type = match frame.kind {
                MediaKind::Video => {
                    let cts = i32::try_from(frame.cts_ms()).unwrap_or(0);
                    flv::video_frame_header(&mut out, track, frame.keyframe, cts).ok()?;
                    flv::TAG_VIDEO
                }
                MediaKind::Audio => {
                    flv::audio_frame_header(&mut out, track).ok()?;
                    flv::TAG_AUDIO
                }
            };
            out.extend_from_slice(&frame.payload);
            tag_type
        }
        Payload::Config(track) => match track.kind() {
            MediaKind::Video => {
                flv::write_video_config(&mut out, track).ok()?;
                flv::TAG_VIDEO
            }
            MediaKind::Audio => {
                if !flv::write_audio_config(&mut out, track).ok()? {
                    return None;
                }
                flv::TAG_AUDIO
            }
        },
        Payload::Metadata(amf) => {
            out.extend_from_slice(amf);
            flv::TAG_SCRIPT
        }
    };
    let body_len = out.len() - HEAD;
    let mut head = BytesMut::with_capacity(HEAD);
    flv::write_tag_header(&mut head, tag_type, ts32(packet), body_len).ok()?;
    out[..HEAD].copy_from_slice(&head);
    flv::write_tag_trailer(&mut out, body_len);
    Some(out.freeze())
}

/// The tag type and body of `packet` as an RTMP publisher sends it (a push relay).
pub fn message_of(packet: &Packet) -> Option<(u8, Bytes)> {
    tag_parts(&tag(packet)?)
}

/// The tag type and body of an FLV tag made by [`Flv`] (what RTMP sends as a message).
pub(super) fn tag_parts(tag: &Bytes) -> Option<(u8, Bytes)> {
    if tag.len() < HEAD + TRAIL {
        return None;
    }
    Some((tag[0], tag.slice(HEAD..tag.len() - TRAIL)))
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
        tag(packet).unwrap_or_default()
    }

    fn preamble(&self, configs: &[std::sync::Arc<Packet>]) -> Vec<Bytes> {
        // Players (ffmpeg's FLV demuxer among them) wait for a kind of track the
        // header announces: only what the stream has is announced.
        let (has_video, has_audio) = super::kinds(configs);
        let mut header = BytesMut::with_capacity(13);
        flv::write_file_header(&mut header, has_audio, has_video);
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
        let tag = packet.bytes(super::Format::every(FormatId::FLV), shape);
        if tag.is_empty() {
            return Bytes::new();
        }
        ws_frame(tag)
    }

    fn preamble(&self, configs: &[std::sync::Arc<Packet>]) -> Vec<Bytes> {
        Flv.preamble(configs).iter().map(|h| ws_frame(h)).collect()
    }
}
