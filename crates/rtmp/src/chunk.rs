//! The chunk stream: RTMP's framing of messages into interleaved chunks.
//!
//! Why its own file: chunking is pure framing. [`ChunkReader`] turns the byte stream
//! into complete [`RawMessage`]s and [`ChunkWriter`] does the reverse for a session's
//! own messages; neither knows about commands or session state. The data path uses
//! [`write_message_chunks`], which is stateless so its output can be shared by every player.
//!
//! A chunk is a basic header (format 0-3 and chunk stream id, 1-3 bytes), a message
//! header whose size depends on the format (11, 7, 3 or 0 bytes), an optional 4-byte
//! extended timestamp, and up to `chunk_size` payload bytes. Formats 1-3 reuse fields
//! of the previous header on the same chunk stream, so the reader keeps per-stream state.
//!
//! # Invariants
//! - The reader consumes a chunk only when all of it is buffered, so "need more bytes"
//!   (`Ok(None)`) never leaves half-updated state behind.
//! - What the peer can make us hold is bounded: one message is at most
//!   `max_message_len`; at most [`MAX_CHUNK_STREAMS`] chunk streams have state, at most
//!   [`MAX_PARTIAL_MESSAGES`] of them a message in progress, and all partial messages
//!   together at most twice `max_message_len`. Buffers grow as bytes arrive; a length
//!   the peer announces is checked, never pre-allocated.
//! - Set Chunk Size and Abort take effect inside the reader, at the exact byte where
//!   they end, and are still returned to the caller.

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::RtmpError;

/// The chunk size both directions start with (RTMP spec 5.4.1).
pub const DEFAULT_CHUNK_SIZE: usize = 128;
/// Largest chunk size we accept from a peer: 16 MiB. Larger values (the field allows
/// 2^31-1) are only useful to make us buffer a whole huge message as one chunk.
pub const MAX_CHUNK_SIZE: u32 = 16 << 20;
/// Default for `max_message_len`: 8 MiB. A 4K keyframe at 50 Mbit/s is well under
/// this; a larger message is a peer making us buffer.
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 8 << 20;
/// Most chunk streams a peer may use. Real clients use fewer than ten (control,
/// command, audio, video, data); each costs us a little state.
pub const MAX_CHUNK_STREAMS: usize = 64;
/// Most chunk streams with a message in progress at once. Interleaving audio, video,
/// data and commands needs four or five.
pub const MAX_PARTIAL_MESSAGES: usize = 16;

/// Message type ids (RTMP spec 5.4 and 7.1).
pub mod msg_type {
    /// Set Chunk Size.
    pub const SET_CHUNK_SIZE: u8 = 1;
    /// Abort Message.
    pub const ABORT: u8 = 2;
    /// Acknowledgement.
    pub const ACKNOWLEDGEMENT: u8 = 3;
    /// User Control Message.
    pub const USER_CONTROL: u8 = 4;
    /// Window Acknowledgement Size.
    pub const WINDOW_ACK_SIZE: u8 = 5;
    /// Set Peer Bandwidth.
    pub const SET_PEER_BANDWIDTH: u8 = 6;
    /// Audio.
    pub const AUDIO: u8 = 8;
    /// Video.
    pub const VIDEO: u8 = 9;
    /// Data message, AMF3.
    pub const DATA_AMF3: u8 = 15;
    /// Shared object, AMF3.
    pub const SHARED_OBJECT_AMF3: u8 = 16;
    /// Command, AMF3.
    pub const COMMAND_AMF3: u8 = 17;
    /// Data message, AMF0 (`@setDataFrame`, `onMetaData`).
    pub const DATA_AMF0: u8 = 18;
    /// Shared object, AMF0.
    pub const SHARED_OBJECT_AMF0: u8 = 19;
    /// Command, AMF0.
    pub const COMMAND_AMF0: u8 = 20;
    /// Aggregate: a sequence of FLV-tag-like sub-messages.
    pub const AGGREGATE: u8 = 22;
}

const TIMESTAMP_EXTENDED: u32 = 0xFF_FFFF;

/// One reassembled message with its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessage {
    /// The chunk stream it came on.
    pub csid: u32,
    /// Absolute timestamp in milliseconds (wraps at 2^32).
    pub timestamp: u32,
    /// Message type id (see [`msg_type`]).
    pub msg_type: u8,
    /// Message stream id (0 for control and connection commands).
    pub stream_id: u32,
    /// The message body.
    pub payload: Bytes,
}

#[derive(Debug, Default)]
struct ReaderStream {
    timestamp: u32,
    delta: u32,
    len: u32,
    msg_type: u8,
    stream_id: u32,
    /// Whether the last header on this stream used an extended timestamp; then every
    /// type-3 chunk after it carries the 4 bytes again.
    extended: bool,
    /// The message in progress, if any. Grown to exactly the message's length at the
    /// end, so a finished message holds no slack (the ring counts what it pins).
    partial: Option<Vec<u8>>,
}

/// Makes room for `more` bytes in a partial message of `len` bytes: doubling, as bytes
/// arrive (never what the peer only announced), but never past `len`, so the last
/// step lands on exactly the message's size.
fn grow(partial: &mut Vec<u8>, more: usize, len: usize) {
    let need = partial.len() + more;
    if need > partial.capacity() {
        let target = partial
            .capacity()
            .saturating_mul(2)
            .max(need)
            .min(len.max(need));
        partial.reserve_exact(target - partial.len());
    }
}

/// Reassembles messages from the chunk stream.
///
/// Call [`ChunkReader::read`] with the connection's input buffer until it returns
/// `Ok(None)`; consumed bytes are removed from the front of the buffer.
#[derive(Debug)]
pub struct ChunkReader {
    chunk_size: usize,
    max_message_len: usize,
    streams: HashMap<u32, ReaderStream>,
    partial_count: usize,
    buffered: usize,
}

struct ChunkHeader {
    fmt: u8,
    csid: u32,
    /// Bytes of basic + message header + extended timestamp.
    len: usize,
    /// The 3-byte timestamp or delta field, or the extended value when present.
    time: u32,
    extended: bool,
    msg_len: u32,
    msg_type: u8,
    stream_id: u32,
}

fn u24([hi, mid, lo]: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, hi, mid, lo])
}

impl ChunkReader {
    /// A reader that accepts messages up to `max_message_len` bytes.
    pub fn new(max_message_len: usize) -> Self {
        ChunkReader {
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_message_len,
            streams: HashMap::new(),
            partial_count: 0,
            buffered: 0,
        }
    }

    /// The peer's current chunk size.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    fn parse_header(&self, buf: &[u8]) -> Result<Option<ChunkHeader>, RtmpError> {
        let Some(&b0) = buf.first() else {
            return Ok(None);
        };
        let fmt = b0 >> 6;
        let (csid, mut pos) = match b0 & 0x3f {
            0 => match buf.get(1) {
                Some(&b1) => (64 + u32::from(b1), 2),
                None => return Ok(None),
            },
            1 => match *buf {
                [_, b1, b2, ..] => (64 + u32::from(b1) + (u32::from(b2) << 8), 3),
                _ => return Ok(None),
            },
            id => (u32::from(id), 1),
        };
        let prev = self.streams.get(&csid);
        if fmt != 0 && prev.is_none() {
            return Err(RtmpError::Malformed {
                what: "chunk header on a chunk stream without a type-0 header",
            });
        }
        let mh_len = match fmt {
            0 => 11,
            1 => 7,
            2 => 3,
            _ => 0,
        };
        let Some(mh) = buf.get(pos..pos + mh_len) else {
            return Ok(None);
        };
        pos += mh_len;
        let mut header = ChunkHeader {
            fmt,
            csid,
            len: 0,
            time: 0,
            extended: false,
            msg_len: prev.map_or(0, |p| p.len),
            msg_type: prev.map_or(0, |p| p.msg_type),
            stream_id: prev.map_or(0, |p| p.stream_id),
        };
        // The header's length follows fmt, so its shape says which fields it has: the
        // time (formats 0-2), the length and type (0-1), the stream id (0).
        if let [t0, t1, t2, ..] = *mh {
            header.time = u24([t0, t1, t2]);
            header.extended = header.time == TIMESTAMP_EXTENDED;
        } else {
            header.extended = prev.is_some_and(|p| p.extended);
        }
        if let [_, _, _, l0, l1, l2, msg_type, ..] = *mh {
            header.msg_len = u24([l0, l1, l2]);
            header.msg_type = msg_type;
        }
        if let [_, _, _, _, _, _, _, s0, s1, s2, s3] = *mh {
            header.stream_id = u32::from_le_bytes([s0, s1, s2, s3]);
        }
        if header.extended {
            let Some(ext) = buf.get(pos..).and_then(<[u8]>::first_chunk) else {
                return Ok(None);
            };
            pos += 4;
            if fmt <= 2 {
                header.time = u32::from_be_bytes(*ext);
            }
        }
        header.len = pos;
        Ok(Some(header))
    }

    /// Reads the next complete message from the front of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` holds no complete message any more (what remains
    /// is a partial chunk, left in `buf`). Set Chunk Size and Abort are applied before
    /// they are returned.
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<RawMessage>, RtmpError> {
        loop {
            let Some(h) = self.parse_header(buf)? else {
                return Ok(None);
            };
            let prev = self.streams.get(&h.csid);
            let in_progress = prev.and_then(|p| p.partial.as_ref()).map(Vec::len);
            if h.fmt != 3 && in_progress.is_some() {
                return Err(RtmpError::Malformed {
                    what: "new message header while a message is in progress",
                });
            }
            let msg_len = h.msg_len as usize;
            if msg_len > self.max_message_len {
                return Err(RtmpError::TooLarge {
                    what: "message",
                    len: msg_len,
                    limit: self.max_message_len,
                });
            }
            let have = in_progress.unwrap_or(0);
            let take = msg_len.saturating_sub(have).min(self.chunk_size);
            let Some(total) = h.len.checked_add(take) else {
                return Err(RtmpError::TooLarge {
                    what: "chunk",
                    len: usize::MAX,
                    limit: self.max_message_len,
                });
            };
            let Some(chunk) = buf.get(h.len..total) else {
                return Ok(None);
            };
            let completes = have + take == msg_len;
            if in_progress.is_none() && !completes {
                // A message that needs more chunks: check the buffering limits before we start it.
                if self.partial_count >= MAX_PARTIAL_MESSAGES {
                    return Err(RtmpError::TooLarge {
                        what: "chunk streams with partial messages",
                        len: self.partial_count + 1,
                        limit: MAX_PARTIAL_MESSAGES,
                    });
                }
            }
            let buffered_limit = self.max_message_len.saturating_mul(2);
            if !completes && self.buffered + take > buffered_limit {
                return Err(RtmpError::TooLarge {
                    what: "buffered partial messages",
                    len: self.buffered + take,
                    limit: buffered_limit,
                });
            }
            if prev.is_none() && self.streams.len() >= MAX_CHUNK_STREAMS {
                return Err(RtmpError::TooLarge {
                    what: "chunk streams",
                    len: self.streams.len() + 1,
                    limit: MAX_CHUNK_STREAMS,
                });
            }

            // The whole chunk is here and within limits: commit. Header and body leave
            // `buf` together, once the body is copied out.
            let stream = self.streams.entry(h.csid).or_default();
            if in_progress.is_none() {
                match h.fmt {
                    0 => {
                        stream.timestamp = h.time;
                        // A type-3 message after a type-0 one repeats the last timestamp
                        // *field* as its delta, as ffmpeg and librtmp read and write it.
                        stream.delta = h.time;
                    }
                    1 | 2 => {
                        stream.delta = h.time;
                        stream.timestamp = stream.timestamp.wrapping_add(h.time);
                    }
                    _ => stream.timestamp = stream.timestamp.wrapping_add(stream.delta),
                }
                stream.len = h.msg_len;
                stream.msg_type = h.msg_type;
                stream.stream_id = h.stream_id;
            }
            stream.extended = h.extended;
            let payload = match stream.partial.take() {
                // Copied out, not split off: a split would keep the whole input buffer
                // alive for as long as the message lives (seconds, in a stream's ring).
                None if completes => {
                    let payload = Bytes::copy_from_slice(chunk);
                    buf.advance(total);
                    payload
                }
                None => {
                    let mut partial = Vec::with_capacity(take.saturating_mul(2).min(msg_len));
                    partial.extend_from_slice(chunk);
                    buf.advance(total);
                    stream.partial = Some(partial);
                    self.partial_count += 1;
                    self.buffered += take;
                    continue;
                }
                Some(mut partial) => {
                    grow(&mut partial, take, msg_len);
                    partial.extend_from_slice(chunk);
                    buf.advance(total);
                    if !completes {
                        stream.partial = Some(partial);
                        self.buffered += take;
                        continue;
                    }
                    self.partial_count -= 1;
                    self.buffered -= have;
                    Bytes::from(partial)
                }
            };
            let msg = RawMessage {
                csid: h.csid,
                timestamp: stream.timestamp,
                msg_type: stream.msg_type,
                stream_id: stream.stream_id,
                payload,
            };
            self.apply_control(&msg)?;
            return Ok(Some(msg));
        }
    }

    fn apply_control(&mut self, msg: &RawMessage) -> Result<(), RtmpError> {
        match msg.msg_type {
            msg_type::SET_CHUNK_SIZE => {
                let size = read_u32(&msg.payload, "Set Chunk Size")?;
                if size == 0 || size > MAX_CHUNK_SIZE {
                    return Err(RtmpError::Malformed {
                        what: "Set Chunk Size outside 1..=16 MiB",
                    });
                }
                self.chunk_size = size as usize;
            }
            msg_type::ABORT => {
                let csid = read_u32(&msg.payload, "Abort")?;
                if let Some(stream) = self.streams.get_mut(&csid) {
                    if let Some(partial) = stream.partial.take() {
                        self.partial_count -= 1;
                        self.buffered -= partial.len();
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The first four bytes of a control message body, big-endian.
pub(crate) fn read_u32(payload: &[u8], what: &'static str) -> Result<u32, RtmpError> {
    match payload.first_chunk() {
        Some(&b) => Ok(u32::from_be_bytes(b)),
        None => Err(RtmpError::Malformed { what }),
    }
}

fn put_basic_header(out: &mut BytesMut, fmt: u8, csid: u32) {
    let csid = csid.clamp(2, 65_599);
    let fmt = fmt << 6;
    if csid < 64 {
        out.put_u8(fmt | csid as u8);
    } else if csid < 320 {
        out.put_u8(fmt);
        out.put_u8((csid - 64) as u8);
    } else {
        out.put_u8(fmt | 1);
        out.put_u16_le((csid - 64) as u16);
    }
}

fn basic_header_len(csid: u32) -> usize {
    match csid {
        0..64 => 1,
        64..320 => 2,
        _ => 3,
    }
}

fn put_u24(out: &mut BytesMut, v: u32) {
    out.put_u8((v >> 16) as u8);
    out.put_u16(v as u16);
}

/// Writes `payload` as the body of a message whose first header is already in `out`:
/// the first `chunk_size` bytes, then type-3 chunks, each with `ext` repeated if set.
fn put_chunked_body(
    out: &mut BytesMut,
    csid: u32,
    ext: Option<u32>,
    payload: &[u8],
    chunk_size: usize,
) {
    let chunk_size = chunk_size.max(1);
    let mut chunks = payload.chunks(chunk_size);
    if let Some(first) = chunks.next() {
        out.put_slice(first);
    }
    for chunk in chunks {
        put_basic_header(out, 3, csid);
        if let Some(ext) = ext {
            out.put_u32(ext);
        }
        out.put_slice(chunk);
    }
}

/// Serializes one message as chunks for the shared fan-out: a type-0 header on the first chunk, type-3
/// headers after it (with the extended timestamp repeated when used), `chunk_size` bytes per chunk.
/// The output depends only on the arguments, so one result can be written to every player.
///
/// `csid` must be in 2..=65599 and `payload` shorter than 16 MiB (the 24-bit length
/// field); `chunk_size` 0 is treated as 1.
pub fn write_message_chunks(
    out: &mut BytesMut,
    csid: u32,
    timestamp_ms: u32,
    msg_type: u8,
    msg_stream_id: u32,
    payload: &[u8],
    chunk_size: usize,
) {
    debug_assert!(payload.len() <= 0xFF_FFFF, "RTMP message length is 24 bits");
    let chunk_size = chunk_size.max(1);
    let ext = (timestamp_ms >= TIMESTAMP_EXTENDED).then_some(timestamp_ms);
    let chunks = payload.len().div_ceil(chunk_size).max(1);
    let cont = basic_header_len(csid) + if ext.is_some() { 4 } else { 0 };
    out.reserve(basic_header_len(csid) + 15 + (chunks - 1) * cont + payload.len());
    put_basic_header(out, 0, csid);
    put_u24(out, timestamp_ms.min(TIMESTAMP_EXTENDED));
    put_u24(out, payload.len() as u32);
    out.put_u8(msg_type);
    out.put_u32_le(msg_stream_id);
    if let Some(ext) = ext {
        out.put_u32(ext);
    }
    put_chunked_body(out, csid, ext, payload, chunk_size);
}

#[derive(Debug)]
struct WriterStream {
    timestamp: u32,
    /// The delta the reader will apply to a type-3 new message; `None` after a type-0
    /// header, where readers disagree about it, so we never write type 3 there.
    delta: Option<u32>,
    len: u32,
    msg_type: u8,
    stream_id: u32,
}

/// Chunks a session's own messages, compressing headers as real peers do.
///
/// Per chunk stream it picks the smallest header that the reader can resolve: type 0
/// for the first message or a new stream id or a timestamp going backwards, type 1 for
/// a new length or type, type 2 for a new delta, type 3 for the same delta.
/// Writing a Set Chunk Size message changes the chunk size for the messages after it.
#[derive(Debug)]
pub struct ChunkWriter {
    chunk_size: usize,
    streams: HashMap<u32, WriterStream>,
}

impl Default for ChunkWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkWriter {
    /// A writer at the default chunk size of 128.
    pub fn new() -> Self {
        ChunkWriter {
            chunk_size: DEFAULT_CHUNK_SIZE,
            streams: HashMap::new(),
        }
    }

    /// The chunk size in use.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Appends `payload` as one message to `out`. Same limits as [`write_message_chunks`].
    pub fn write(
        &mut self,
        out: &mut BytesMut,
        csid: u32,
        timestamp: u32,
        msg_type: u8,
        stream_id: u32,
        payload: &[u8],
    ) {
        debug_assert!(payload.len() <= 0xFF_FFFF, "RTMP message length is 24 bits");
        let len = payload.len() as u32;
        let (fmt, field) = match self.streams.get(&csid) {
            Some(p) if p.stream_id == stream_id && timestamp >= p.timestamp => {
                let delta = timestamp - p.timestamp;
                if p.len != len || p.msg_type != msg_type {
                    (1, delta)
                } else if p.delta == Some(delta) {
                    (3, delta)
                } else {
                    (2, delta)
                }
            }
            _ => (0, timestamp),
        };
        let ext = (field >= TIMESTAMP_EXTENDED).then_some(field);
        put_basic_header(out, fmt, csid);
        if fmt <= 2 {
            put_u24(out, field.min(TIMESTAMP_EXTENDED));
        }
        if fmt <= 1 {
            put_u24(out, len);
            out.put_u8(msg_type);
        }
        if fmt == 0 {
            out.put_u32_le(stream_id);
        }
        if let Some(ext) = ext {
            out.put_u32(ext);
        }
        put_chunked_body(out, csid, ext, payload, self.chunk_size);
        self.streams.insert(
            csid,
            WriterStream {
                timestamp,
                delta: (fmt != 0).then_some(field),
                len,
                msg_type,
                stream_id,
            },
        );
        if msg_type == msg_type::SET_CHUNK_SIZE {
            if let Ok(size) = read_u32(payload, "Set Chunk Size") {
                self.chunk_size = (size.clamp(1, MAX_CHUNK_SIZE)) as usize;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(
        reader: &mut ChunkReader,
        buf: &mut BytesMut,
    ) -> Result<Vec<RawMessage>, RtmpError> {
        let mut out = Vec::new();
        while let Some(m) = reader.read(buf)? {
            out.push(m);
        }
        Ok(out)
    }

    fn msg(csid: u32, timestamp: u32, msg_type: u8, stream_id: u32, payload: &[u8]) -> RawMessage {
        RawMessage {
            csid,
            timestamp,
            msg_type,
            stream_id,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn type0_header_bytes_match_the_spec() {
        let mut out = BytesMut::new();
        write_message_chunks(&mut out, 3, 0x010203, 20, 1, b"hi", 128);
        assert_eq!(
            &out[..],
            &[0x03, 1, 2, 3, 0, 0, 2, 20, 1, 0, 0, 0, b'h', b'i']
        );
    }

    #[test]
    fn shared_chunks_repeat_extended_timestamp_on_type3() {
        let mut out = BytesMut::new();
        let payload = [7u8; 300];
        write_message_chunks(&mut out, 6, 0x0100_0000, 9, 1, &payload, 128);
        // 12 header + 4 ext + 128, then (1 + 4 + 128), then (1 + 4 + 44).
        assert_eq!(out.len(), 16 + 128 + 133 + 49);
        assert_eq!(out[16 + 128], 0xC6);
        assert_eq!(&out[16 + 129..16 + 133], &[1, 0, 0, 0]);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut out).expect("reads");
        assert_eq!(got, vec![msg(6, 0x0100_0000, 9, 1, &payload)]);
    }

    #[test]
    fn type3_new_message_with_extended_delta() {
        let mut w = ChunkWriter::new();
        let mut out = BytesMut::new();
        let big = 0x0100_0000;
        w.write(&mut out, 4, 10, 8, 1, &[1; 200]); // type 0
        w.write(&mut out, 4, 10 + big, 8, 1, &[2; 200]); // type 2, extended delta
        w.write(&mut out, 4, 10 + 2 * big, 8, 1, &[3; 200]); // type 3, extended delta repeated
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut out).expect("reads");
        let times: Vec<u32> = got.iter().map(|m| m.timestamp).collect();
        assert_eq!(times, vec![10, 10 + big, 10 + 2 * big]);
        assert_eq!(got[2].payload, Bytes::from(vec![3u8; 200]));
    }

    #[test]
    fn writer_uses_all_four_header_formats() {
        let mut w = ChunkWriter::new();
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let cases = [
            (0u32, 8u8, 10usize, 0u8), // first message: type 0
            (20, 8, 12, 1),            // new length: type 1
            (45, 8, 12, 2),            // same length, new delta: type 2
            (70, 8, 12, 3),            // same delta: type 3
            (60, 8, 12, 0),            // backwards: type 0
        ];
        for (ts, t, len, fmt) in cases {
            let mut out = BytesMut::new();
            w.write(&mut out, 4, ts, t, 1, &vec![1; len]);
            assert_eq!(out[0] >> 6, fmt, "timestamp {ts}");
            assert_eq!(
                reader.read(&mut out).expect("reads"),
                Some(msg(4, ts, t, 1, &vec![1; len]))
            );
        }
    }

    #[test]
    fn type3_after_type0_reuses_the_timestamp_field_as_delta() {
        let mut buf = BytesMut::new();
        write_message_chunks(&mut buf, 4, 1000, 8, 1, &[1, 2], 128);
        buf.extend_from_slice(&[0xC4, 3, 4]);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut buf).expect("reads");
        assert_eq!(
            got,
            vec![msg(4, 1000, 8, 1, &[1, 2]), msg(4, 2000, 8, 1, &[3, 4])]
        );
    }

    #[test]
    fn interleaved_chunk_streams() {
        // Two 200-byte messages at chunk size 128, chunks interleaved: A1 B1 A2 B2.
        let mut a = BytesMut::new();
        let mut b = BytesMut::new();
        write_message_chunks(&mut a, 6, 1, 9, 1, &[0xAA; 200], 128);
        write_message_chunks(&mut b, 70, 2, 8, 1, &[0xBB; 200], 128);
        let (a1, a2) = a.split_at(12 + 128);
        let (b1, b2) = b.split_at(13 + 128);
        let mut buf = BytesMut::new();
        for part in [a1, b1, a2, b2] {
            buf.extend_from_slice(part);
        }
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut buf).expect("reads");
        assert_eq!(
            got,
            vec![
                msg(6, 1, 9, 1, &[0xAA; 200]),
                msg(70, 2, 8, 1, &[0xBB; 200])
            ]
        );
    }

    #[test]
    fn chunk_size_change_between_messages() {
        let mut w = ChunkWriter::new();
        let mut out = BytesMut::new();
        w.write(
            &mut out,
            2,
            0,
            msg_type::SET_CHUNK_SIZE,
            0,
            &4096u32.to_be_bytes(),
        );
        w.write(&mut out, 3, 0, 20, 0, &[9; 1000]);
        assert_eq!(w.chunk_size(), 4096);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut out).expect("reads");
        assert_eq!(reader.chunk_size(), 4096);
        assert_eq!(got[1].payload.len(), 1000);
    }

    #[test]
    fn chunk_size_change_in_the_middle_of_another_message() {
        // Message A (300 bytes) on csid 6: first chunk at size 128; then Set Chunk Size
        // 256 on csid 2; then A's remaining 172 bytes arrive as one chunk.
        let mut buf = BytesMut::new();
        let mut a = BytesMut::new();
        write_message_chunks(&mut a, 6, 0, 9, 1, &[5; 300], 128);
        buf.extend_from_slice(&a[..12 + 128]);
        write_message_chunks(
            &mut buf,
            2,
            0,
            msg_type::SET_CHUNK_SIZE,
            0,
            &256u32.to_be_bytes(),
            128,
        );
        buf.put_u8(0xC6);
        buf.put_slice(&[5; 172]);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut buf).expect("reads");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].payload, Bytes::from(vec![5u8; 300]));
    }

    #[test]
    fn abort_discards_the_partial_message() {
        let mut buf = BytesMut::new();
        let mut a = BytesMut::new();
        write_message_chunks(&mut a, 6, 0, 9, 1, &[5; 300], 128);
        buf.extend_from_slice(&a[..12 + 128]);
        write_message_chunks(&mut buf, 2, 0, msg_type::ABORT, 0, &6u32.to_be_bytes(), 128);
        write_message_chunks(&mut buf, 6, 40, 9, 1, &[6; 10], 128);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        let got = read_all(&mut reader, &mut buf).expect("reads");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], msg(6, 40, 9, 1, &[6; 10]));
        assert_eq!(reader.buffered, 0);
        assert_eq!(reader.partial_count, 0);
    }

    #[test]
    fn chunk_size_zero_and_huge_are_malformed() {
        for size in [0u32, MAX_CHUNK_SIZE + 1, 0x8000_0000] {
            let mut buf = BytesMut::new();
            write_message_chunks(
                &mut buf,
                2,
                0,
                msg_type::SET_CHUNK_SIZE,
                0,
                &size.to_be_bytes(),
                128,
            );
            let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
            assert!(
                matches!(reader.read(&mut buf), Err(RtmpError::Malformed { .. })),
                "size {size}"
            );
        }
    }

    #[test]
    fn message_over_cap_is_too_large_from_the_header_alone() {
        let mut buf = BytesMut::from(&[0x03, 0, 0, 0, 0x20, 0, 0, 9, 1, 0, 0, 0][..]);
        let mut reader = ChunkReader::new(1 << 20);
        assert!(matches!(
            reader.read(&mut buf),
            Err(RtmpError::TooLarge {
                what: "message",
                ..
            })
        ));
    }

    #[test]
    fn too_many_chunk_streams_and_partials_are_refused() {
        let mut buf = BytesMut::new();
        for csid in 2..(2 + MAX_PARTIAL_MESSAGES as u32 + 1) {
            let mut m = BytesMut::new();
            write_message_chunks(&mut m, csid, 0, 9, 1, &[0; 200], 128);
            buf.extend_from_slice(&m[..12 + 128]);
        }
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        assert!(matches!(
            reader.read(&mut buf),
            Err(RtmpError::TooLarge { .. })
        ));

        let mut buf = BytesMut::new();
        for csid in 2..(2 + MAX_CHUNK_STREAMS as u32 + 1) {
            write_message_chunks(&mut buf, csid, 0, 9, 1, &[0; 4], 128);
        }
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        assert!(matches!(
            read_all(&mut reader, &mut buf),
            Err(RtmpError::TooLarge {
                what: "chunk streams",
                ..
            })
        ));
    }

    #[test]
    fn continuation_without_header_is_malformed() {
        let mut buf = BytesMut::from(&[0xC5, 1, 2, 3][..]);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        assert!(matches!(
            reader.read(&mut buf),
            Err(RtmpError::Malformed { .. })
        ));
    }

    #[test]
    fn zero_length_message_completes() {
        let mut buf = BytesMut::new();
        write_message_chunks(&mut buf, 3, 5, 20, 0, &[], 128);
        let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
        assert_eq!(
            read_all(&mut reader, &mut buf).expect("reads"),
            vec![msg(3, 5, 20, 0, &[])]
        );
    }

    #[derive(Debug, Clone)]
    struct Spec {
        csid: u32,
        step: u32,
        msg_type: u8,
        stream_id: u32,
        len: usize,
        chunk_size: Option<u32>,
        repeat: usize,
    }

    fn arb_spec() -> impl Strategy<Value = Spec> {
        (
            prop_oneof![
                Just(3u32),
                Just(4),
                Just(6),
                Just(63),
                Just(64),
                Just(319),
                Just(320),
                Just(65_599)
            ],
            prop_oneof![
                Just(0u32),
                Just(40),
                0..100_000u32,
                Just(0xFF_FFFE),
                Just(0xFF_FFFF),
                Just(0x0100_0000)
            ],
            prop_oneof![Just(8u8), Just(9), Just(18), Just(20)],
            0..3u32,
            prop_oneof![0..10usize, 100..300usize, 1000..3000usize],
            prop::option::weighted(
                0.1,
                prop_oneof![Just(1u32), 2..300u32, Just(4096), Just(MAX_CHUNK_SIZE)],
            ),
            0..4usize,
        )
            .prop_map(
                |(csid, step, msg_type, stream_id, len, chunk_size, repeat)| Spec {
                    csid,
                    step,
                    msg_type,
                    stream_id,
                    len,
                    chunk_size,
                    repeat,
                },
            )
    }

    proptest! {
        /// Every header format, extended timestamps, chunk size changes between
        /// messages, and arbitrary splits of the byte stream.
        #[test]
        fn writer_reader_round_trip(specs in prop::collection::vec(arb_spec(), 1..40), splits in prop::collection::vec(1usize..5000, 1..20)) {
            let mut w = ChunkWriter::new();
            let mut wire = BytesMut::new();
            let mut expected = Vec::new();
            let mut clocks: HashMap<u32, u32> = HashMap::new();
            for (i, s) in specs.iter().enumerate() {
                if let Some(size) = s.chunk_size {
                    w.write(&mut wire, 2, 0, msg_type::SET_CHUNK_SIZE, 0, &size.to_be_bytes());
                    expected.push(msg(2, 0, msg_type::SET_CHUNK_SIZE, 0, &size.to_be_bytes()));
                    clocks.insert(2, 0);
                }
                // Repeats with the same delta, length and type exercise type-2 and type-3 headers.
                for r in 0..=s.repeat {
                    let t = clocks.entry(s.csid).or_insert(0);
                    *t = t.wrapping_add(s.step);
                    let payload: Vec<u8> = (0..s.len).map(|j| (i + j + r) as u8).collect();
                    w.write(&mut wire, s.csid, *t, s.msg_type, s.stream_id, &payload);
                    expected.push(msg(s.csid, *t, s.msg_type, s.stream_id, &payload));
                }
            }
            let mut reader = ChunkReader::new(DEFAULT_MAX_MESSAGE_LEN);
            let mut input = BytesMut::new();
            let mut got = Vec::new();
            let mut wire = wire.freeze();
            let mut k = 0;
            while !wire.is_empty() {
                let n = splits[k % splits.len()].min(wire.len());
                k += 1;
                input.extend_from_slice(&wire.split_to(n));
                while let Some(m) = reader.read(&mut input).expect("own output reads") {
                    got.push(m);
                }
            }
            prop_assert!(input.is_empty());
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let mut reader = ChunkReader::new(4096);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = reader.read(&mut buf) {}
        }
    }
}
