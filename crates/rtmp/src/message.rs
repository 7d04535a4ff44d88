//! RTMP messages: the typed view of a [`RawMessage`] body, and their encodings.
//!
//! Why separate from `chunk.rs`: the chunk layer frames bytes, this layer gives them
//! meaning (RTMP spec 5.4 protocol control, 6.2 user control, 7.1 message types), and
//! the session decides what a message means *now*.
//!
//! # Invariants
//! - Decoding never panics: every field is read with a length check; a short body is
//!   [`RtmpError::Malformed`].
//! - Audio and video payloads are the received `Bytes` (no copy); aggregate messages
//!   are split into sub-messages that slice the aggregate's buffer.

use bytes::{BufMut, Bytes, BytesMut};
use sluice_media::amf0::{self, Amf0Value};

use crate::chunk::{msg_type, read_u32, RawMessage};
use crate::error::RtmpError;

/// User Control event (RTMP spec 6.2 / 7.1.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserControl {
    /// The stream with this id became functional.
    StreamBegin(u32),
    /// Playback of the stream ended.
    StreamEof(u32),
    /// No more data on the stream for now.
    StreamDry(u32),
    /// The client's buffer length for a stream, in milliseconds.
    SetBufferLength {
        /// Message stream id.
        stream_id: u32,
        /// Buffer length in milliseconds.
        buffer_ms: u32,
    },
    /// The stream is a recorded one.
    StreamIsRecorded(u32),
    /// A ping carrying the sender's timestamp.
    PingRequest(u32),
    /// The answer to a ping, echoing its timestamp.
    PingResponse(u32),
    /// An event type we do not interpret (Wowza's buffer empty/ready, for instance).
    Unknown {
        /// The event type.
        event_type: u16,
    },
}

/// One RTMP message, decoded by type.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The sender's new chunk size.
    SetChunkSize(u32),
    /// Discard the partial message on this chunk stream.
    Abort {
        /// The chunk stream id.
        csid: u32,
    },
    /// Bytes received so far (wrapping at 2^32).
    Acknowledgement {
        /// Sequence number: total bytes received.
        sequence: u32,
    },
    /// Acknowledge every this many bytes.
    WindowAckSize(u32),
    /// Limit the peer's output bandwidth.
    SetPeerBandwidth {
        /// Window size in bytes.
        size: u32,
        /// 0 hard, 1 soft, 2 dynamic.
        limit_type: u8,
    },
    /// A user control event.
    UserControl(UserControl),
    /// An FLV audio tag body.
    Audio(Bytes),
    /// An FLV video tag body.
    Video(Bytes),
    /// A data message (AMF0 values); `payload` is the body as received.
    Data {
        /// The decoded values.
        values: Vec<Amf0Value>,
        /// The raw body (used to slice `onMetaData` without re-encoding).
        payload: Bytes,
    },
    /// A command message (AMF0 values: name, transaction id, object, arguments).
    Command(Vec<Amf0Value>),
    /// A message type we do not handle (shared objects, for instance).
    Unknown {
        /// The message type id.
        msg_type: u8,
    },
}

impl Message {
    /// Decodes a message body. Aggregates must be split with [`split_aggregate`] first;
    /// here they come back as `Unknown`.
    pub fn decode(raw: &RawMessage) -> Result<Message, RtmpError> {
        let p = &raw.payload;
        Ok(match raw.msg_type {
            msg_type::SET_CHUNK_SIZE => Message::SetChunkSize(read_u32(p, "Set Chunk Size")?),
            msg_type::ABORT => Message::Abort {
                csid: read_u32(p, "Abort")?,
            },
            msg_type::ACKNOWLEDGEMENT => Message::Acknowledgement {
                sequence: read_u32(p, "Acknowledgement")?,
            },
            msg_type::WINDOW_ACK_SIZE => {
                Message::WindowAckSize(read_u32(p, "Window Acknowledgement Size")?)
            }
            msg_type::SET_PEER_BANDWIDTH => Message::SetPeerBandwidth {
                size: read_u32(p, "Set Peer Bandwidth")?,
                // Some clients send only the 4-byte size; assume dynamic then.
                limit_type: p.get(4).copied().unwrap_or(2),
            },
            msg_type::USER_CONTROL => Message::UserControl(decode_user_control(p)?),
            msg_type::AUDIO => Message::Audio(raw.payload.clone()),
            msg_type::VIDEO => Message::Video(raw.payload.clone()),
            msg_type::DATA_AMF0 => Message::Data {
                values: decode_amf(p, "data message")?,
                payload: raw.payload.clone(),
            },
            msg_type::COMMAND_AMF0 => Message::Command(decode_amf(p, "command")?),
            // AMF3 messages from Flash start with a 0 byte and then hold AMF0 values.
            msg_type::DATA_AMF3 if p.first() == Some(&0) => {
                let payload = raw.payload.slice(1..);
                Message::Data {
                    values: decode_amf(&payload, "data message")?,
                    payload,
                }
            }
            msg_type::COMMAND_AMF3 => match p.split_first() {
                Some((0, body)) => Message::Command(decode_amf(body, "command")?),
                _ => Message::Unknown {
                    msg_type: msg_type::COMMAND_AMF3,
                },
            },
            other => Message::Unknown { msg_type: other },
        })
    }
}

fn decode_amf(body: &[u8], what: &'static str) -> Result<Vec<Amf0Value>, RtmpError> {
    amf0::decode_all(body).map_err(|source| RtmpError::Amf0 { what, source })
}

fn decode_user_control(p: &[u8]) -> Result<UserControl, RtmpError> {
    let Some((&t, data)) = p.split_first_chunk() else {
        return Err(RtmpError::Malformed {
            what: "User Control event",
        });
    };
    let event_type = u16::from_be_bytes(t);
    let arg = || read_u32(data, "User Control event");
    Ok(match event_type {
        0 => UserControl::StreamBegin(arg()?),
        1 => UserControl::StreamEof(arg()?),
        2 => UserControl::StreamDry(arg()?),
        3 => UserControl::SetBufferLength {
            stream_id: arg()?,
            buffer_ms: read_u32(data.get(4..).unwrap_or(&[]), "Set Buffer Length")?,
        },
        4 => UserControl::StreamIsRecorded(arg()?),
        6 => UserControl::PingRequest(arg()?),
        7 => UserControl::PingResponse(arg()?),
        event_type => UserControl::Unknown { event_type },
    })
}

impl UserControl {
    /// Appends the event body (type + data) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        let (t, a, b) = match *self {
            UserControl::StreamBegin(id) => (0, id, None),
            UserControl::StreamEof(id) => (1, id, None),
            UserControl::StreamDry(id) => (2, id, None),
            UserControl::SetBufferLength {
                stream_id,
                buffer_ms,
            } => (3, stream_id, Some(buffer_ms)),
            UserControl::StreamIsRecorded(id) => (4, id, None),
            UserControl::PingRequest(t) => (6, t, None),
            UserControl::PingResponse(t) => (7, t, None),
            UserControl::Unknown { event_type } => (event_type, 0, None),
        };
        out.put_u16(t);
        out.put_u32(a);
        if let Some(b) = b {
            out.put_u32(b);
        }
    }
}

impl Message {
    /// The message type id this message is sent with.
    pub fn msg_type(&self) -> u8 {
        match self {
            Message::SetChunkSize(_) => msg_type::SET_CHUNK_SIZE,
            Message::Abort { .. } => msg_type::ABORT,
            Message::Acknowledgement { .. } => msg_type::ACKNOWLEDGEMENT,
            Message::WindowAckSize(_) => msg_type::WINDOW_ACK_SIZE,
            Message::SetPeerBandwidth { .. } => msg_type::SET_PEER_BANDWIDTH,
            Message::UserControl(_) => msg_type::USER_CONTROL,
            Message::Audio(_) => msg_type::AUDIO,
            Message::Video(_) => msg_type::VIDEO,
            Message::Data { .. } => msg_type::DATA_AMF0,
            Message::Command(_) => msg_type::COMMAND_AMF0,
            Message::Unknown { msg_type } => *msg_type,
        }
    }

    /// Appends the message body to `out`. `Data` writes its `payload`; `Unknown` writes nothing.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Message::SetChunkSize(v) | Message::WindowAckSize(v) => out.put_u32(*v),
            Message::Abort { csid } => out.put_u32(*csid),
            Message::Acknowledgement { sequence } => out.put_u32(*sequence),
            Message::SetPeerBandwidth { size, limit_type } => {
                out.put_u32(*size);
                out.put_u8(*limit_type);
            }
            Message::UserControl(uc) => uc.encode(out),
            Message::Audio(b) | Message::Video(b) => out.put_slice(b),
            Message::Data { payload, .. } => out.put_slice(payload),
            Message::Command(values) => {
                for v in values {
                    v.encode(out);
                }
            }
            Message::Unknown { .. } => {}
        }
    }
}

/// Size of an aggregate sub-message header: type, 24-bit size, 24+8-bit timestamp, 24-bit stream id.
const AGGREGATE_HEADER_LEN: usize = 11;

/// Splits an aggregate message (type 22) into its sub-messages.
///
/// Each sub-message is an FLV tag: 11-byte header, body, 4-byte back pointer. Their
/// timestamps are rebased so the first one equals the aggregate's own timestamp
/// (RTMP spec 7.1.6). Bodies slice the aggregate's buffer. Sub-messages never nest:
/// an aggregate inside an aggregate is `Malformed`.
pub fn split_aggregate(raw: &RawMessage) -> Result<Vec<RawMessage>, RtmpError> {
    let mut rest = raw.payload.clone();
    let mut out = Vec::new();
    let mut base: Option<u32> = None;
    while !rest.is_empty() {
        let Some(&[msg_type, l0, l1, l2, t0, t1, t2, t3, ..]) =
            rest.first_chunk::<AGGREGATE_HEADER_LEN>()
        else {
            return Err(RtmpError::Malformed {
                what: "aggregate sub-message header",
            });
        };
        let len = (usize::from(l0) << 16) | (usize::from(l1) << 8) | usize::from(l2);
        let ts = u32::from_be_bytes([t3, t0, t1, t2]);
        if msg_type == msg_type::AGGREGATE {
            return Err(RtmpError::Malformed {
                what: "aggregate inside an aggregate",
            });
        }
        let end = AGGREGATE_HEADER_LEN + len;
        if rest.len() < end {
            return Err(RtmpError::Malformed {
                what: "aggregate sub-message body",
            });
        }
        let first = *base.get_or_insert(ts);
        out.push(RawMessage {
            csid: raw.csid,
            timestamp: raw.timestamp.wrapping_add(ts.wrapping_sub(first)),
            msg_type,
            stream_id: raw.stream_id,
            payload: rest.slice(AGGREGATE_HEADER_LEN..end),
        });
        // The 4-byte back pointer; some encoders leave it off the last sub-message.
        let next = (end + 4).min(rest.len());
        rest = rest.slice(next..);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(msg_type: u8, payload: &[u8]) -> RawMessage {
        RawMessage {
            csid: 4,
            timestamp: 1000,
            msg_type,
            stream_id: 1,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn control_messages_round_trip() {
        for m in [
            Message::SetChunkSize(4096),
            Message::Abort { csid: 6 },
            Message::Acknowledgement { sequence: 77 },
            Message::WindowAckSize(2_500_000),
            Message::SetPeerBandwidth {
                size: 2_500_000,
                limit_type: 2,
            },
            Message::UserControl(UserControl::StreamBegin(1)),
            Message::UserControl(UserControl::SetBufferLength {
                stream_id: 1,
                buffer_ms: 3000,
            }),
            Message::UserControl(UserControl::PingRequest(5)),
            Message::UserControl(UserControl::PingResponse(5)),
            Message::Command(vec!["connect".into(), 1.0.into(), Amf0Value::Null]),
        ] {
            let mut body = BytesMut::new();
            m.encode(&mut body);
            assert_eq!(
                Message::decode(&raw(m.msg_type(), &body)).expect("decodes"),
                m
            );
        }
    }

    #[test]
    fn short_bodies_are_malformed() {
        for t in [1u8, 2, 3, 4, 5, 6] {
            assert!(
                matches!(
                    Message::decode(&raw(t, &[0, 0])),
                    Err(RtmpError::Malformed { .. })
                ),
                "type {t}"
            );
        }
        assert!(matches!(
            Message::decode(&raw(20, &[0x42])),
            Err(RtmpError::Amf0 { .. })
        ));
    }

    #[test]
    fn aggregate_splits_and_rebases() {
        let mut body = BytesMut::new();
        for (t, ts, data) in [(9u8, 5000u32, &b"video"[..]), (8, 5020, &b"au"[..])] {
            body.put_u8(t);
            body.put_u8(0);
            body.put_u16(data.len() as u16);
            body.put_u8((ts >> 16) as u8);
            body.put_u16(ts as u16);
            body.put_u8((ts >> 24) as u8);
            body.put_slice(&[0, 0, 0]);
            body.put_slice(data);
            body.put_u32(11 + data.len() as u32);
        }
        let parts = split_aggregate(&raw(22, &body)).expect("splits");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].msg_type, parts[0].timestamp, &parts[0].payload[..]),
            (9, 1000, &b"video"[..])
        );
        assert_eq!(
            (parts[1].msg_type, parts[1].timestamp, &parts[1].payload[..]),
            (8, 1020, &b"au"[..])
        );
        assert_eq!(
            split_aggregate(&raw(22, &body[..20]))
                .expect("one whole sub-message")
                .len(),
            1
        );
        assert!(split_aggregate(&raw(22, &body[..25])).is_err());
        assert!(split_aggregate(&raw(22, &body[..32])).is_err());
    }
}
