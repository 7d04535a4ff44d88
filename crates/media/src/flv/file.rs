//! The FLV byte stream: file header, tag headers, `PreviousTagSize`, and [`TagReader`].
//!
//! Layout: `"FLV" version flags DataOffset(=9)`, `PreviousTagSize0 (=0)`, then for each
//! tag `TagType DataSize(24) Timestamp(24) TimestampExtended(8) StreamID(24)`, the body,
//! and `PreviousTagSize (= 11 + DataSize)`.
//!
//! # Invariants
//! - [`TagReader`] consumes bytes only when it returns a whole tag (or skips header
//!   padding), so the caller can append any split of the stream and call again.
//! - A tag body is buffered only up to [`MAX_TAG_LEN`]; a longer one is an error before
//!   any of it is waited for.

use super::{u24_at, u8_at, FlvError};
use bytes::{Buf, Bytes, BytesMut};

/// Size of the FLV file header (without `PreviousTagSize0`).
pub const FILE_HEADER_LEN: usize = 9;
/// Size of an FLV tag header.
pub const TAG_HEADER_LEN: usize = 11;
/// Largest tag body [`TagReader`] accepts. A 4K keyframe at broadcast bitrates is well
/// under this; more is a peer making us buffer. (The format's own limit is 16 MiB - 1.)
pub const MAX_TAG_LEN: usize = 8 << 20;
/// Largest `DataOffset` we skip to: the header is 9 bytes in every version so far;
/// a larger offset is tolerated as padding, within reason.
const MAX_DATA_OFFSET: u32 = 1 << 16;
/// Largest body a tag header can describe (24-bit `DataSize`).
const MAX_DATA_SIZE: usize = (1 << 24) - 1;
/// Bytes of `PreviousTagSize`.
const PREV_TAG_SIZE_LEN: usize = 4;

/// Writes the 9-byte file header and `PreviousTagSize0`.
pub fn write_file_header(out: &mut BytesMut, has_audio: bool, has_video: bool) {
    let flags = (u8::from(has_audio) << 2) | u8::from(has_video);
    out.extend_from_slice(&[b'F', b'L', b'V', 1, flags, 0, 0, 0, 9, 0, 0, 0, 0]);
}

/// Writes the 11-byte tag header (stream id 0). The timestamp's upper 8 bits go in
/// `TimestampExtended`, so every `u32` millisecond value is carried.
pub fn write_tag_header(
    out: &mut BytesMut,
    tag_type: u8,
    timestamp_ms: u32,
    body_len: usize,
) -> Result<(), FlvError> {
    if body_len > MAX_DATA_SIZE {
        return Err(FlvError::TooLarge {
            what: "FLV tag body",
            len: body_len,
            limit: MAX_DATA_SIZE,
        });
    }
    let len = (body_len as u32).to_be_bytes();
    let ts = timestamp_ms.to_be_bytes();
    out.extend_from_slice(&[
        tag_type & 0x1f,
        len[1],
        len[2],
        len[3],
        ts[1],
        ts[2],
        ts[3],
        ts[0],
        0,
        0,
        0,
    ]);
    Ok(())
}

/// Writes the `PreviousTagSize` that follows a tag with a body of `body_len` bytes.
pub fn write_tag_trailer(out: &mut BytesMut, body_len: usize) {
    let size = u32::try_from(body_len.saturating_add(TAG_HEADER_LEN)).unwrap_or(u32::MAX);
    out.extend_from_slice(&size.to_be_bytes());
}

/// Writes a whole tag: header, body and `PreviousTagSize`.
pub fn write_tag(
    out: &mut BytesMut,
    tag_type: u8,
    timestamp_ms: u32,
    body: &[u8],
) -> Result<(), FlvError> {
    write_tag_header(out, tag_type, timestamp_ms, body.len())?;
    out.extend_from_slice(body);
    write_tag_trailer(out, body.len());
    Ok(())
}

/// One FLV tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// [`TAG_AUDIO`](super::TAG_AUDIO), [`TAG_VIDEO`](super::TAG_VIDEO),
    /// [`TAG_SCRIPT`](super::TAG_SCRIPT) or another value, passed through.
    pub tag_type: u8,
    /// Timestamp in milliseconds (extended byte included).
    pub timestamp_ms: u32,
    /// The tag body: for audio and video, what [`parse_audio`](super::parse_audio) and
    /// [`parse_video`](super::parse_video) read.
    pub body: Bytes,
}

/// What the file header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// `TypeFlagsAudio`.
    pub has_audio: bool,
    /// `TypeFlagsVideo`.
    pub has_video: bool,
}

/// Where a [`TagReader`] is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the 9-byte file header.
    ExpectFileHeader,
    /// Skipping the bytes between the 9-byte header and `DataOffset`.
    SkipHeaderPadding { remaining: usize },
    /// Before a `PreviousTagSize` and the tag that follows it.
    ExpectTag,
    /// A previous call failed; the stream cannot be resynchronized.
    Failed,
}

/// An incremental parser of an FLV byte stream (a file or an HTTP-FLV response).
///
/// Call [`read`](Self::read) with the bytes received so far; it consumes a complete
/// tag from the front of the buffer and returns it, or returns `Ok(None)` and consumes
/// nothing more when it needs more bytes. Call again until `Ok(None)`. After an error
/// the reader stays failed. `PreviousTagSize` values are skipped without checking:
/// real files get them wrong and they carry nothing a stream reader needs.
#[derive(Debug, Clone)]
pub struct TagReader {
    state: State,
    header: Option<FileHeader>,
}

impl Default for TagReader {
    fn default() -> Self {
        Self::new()
    }
}

impl TagReader {
    /// A reader expecting the FLV file header.
    pub fn new() -> Self {
        TagReader {
            state: State::ExpectFileHeader,
            header: None,
        }
    }

    /// The file header, once read.
    pub fn header(&self) -> Option<FileHeader> {
        self.header
    }

    /// Reads the next tag from the front of `buf`; `Ok(None)` means more bytes are needed.
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<Tag>, FlvError> {
        let result = self.advance(buf);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn advance(&mut self, buf: &mut BytesMut) -> Result<Option<Tag>, FlvError> {
        loop {
            match self.state {
                State::Failed => {
                    return Err(FlvError::Malformed {
                        what: "FLV stream after an error",
                    })
                }
                State::ExpectFileHeader => {
                    let Some(h) = buf.get(..FILE_HEADER_LEN) else {
                        return Ok(None);
                    };
                    if h.get(..3) != Some(b"FLV".as_slice()) {
                        return Err(FlvError::Malformed {
                            what: "FLV signature",
                        });
                    }
                    let flags = u8_at(h, 4, "FLV header")?;
                    let offset = match h.get(5..9) {
                        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
                        _ => return Ok(None),
                    };
                    if !(9..=MAX_DATA_OFFSET).contains(&offset) {
                        return Err(FlvError::Malformed {
                            what: "FLV DataOffset",
                        });
                    }
                    self.header = Some(FileHeader {
                        has_audio: flags & 0x04 != 0,
                        has_video: flags & 0x01 != 0,
                    });
                    buf.advance(FILE_HEADER_LEN);
                    // `offset` is at most MAX_DATA_OFFSET.
                    self.state = State::SkipHeaderPadding {
                        remaining: offset as usize - FILE_HEADER_LEN,
                    };
                }
                State::SkipHeaderPadding { remaining } => {
                    let n = remaining.min(buf.len());
                    buf.advance(n);
                    if n < remaining {
                        self.state = State::SkipHeaderPadding {
                            remaining: remaining - n,
                        };
                        return Ok(None);
                    }
                    self.state = State::ExpectTag;
                }
                State::ExpectTag => return read_tag(buf),
            }
        }
    }
}

/// Reads `PreviousTagSize` and one tag, or nothing if incomplete.
fn read_tag(buf: &mut BytesMut) -> Result<Option<Tag>, FlvError> {
    const WHAT: &str = "FLV tag header";
    let Some(h) = buf.get(PREV_TAG_SIZE_LEN..PREV_TAG_SIZE_LEN + TAG_HEADER_LEN) else {
        return Ok(None);
    };
    let type_byte = u8_at(h, 0, WHAT)?;
    if type_byte & 0x20 != 0 {
        return Err(FlvError::Unsupported {
            what: "encrypted FLV tag",
        });
    }
    // A u24 always fits usize.
    let body_len = u24_at(h, 1, WHAT)? as usize;
    if body_len > MAX_TAG_LEN {
        return Err(FlvError::TooLarge {
            what: "FLV tag body",
            len: body_len,
            limit: MAX_TAG_LEN,
        });
    }
    let ts_low = u24_at(h, 4, WHAT)?;
    let ts_high = u32::from(u8_at(h, 7, WHAT)?);
    let total = PREV_TAG_SIZE_LEN + TAG_HEADER_LEN + body_len;
    if buf.len() < total {
        return Ok(None);
    }
    buf.advance(PREV_TAG_SIZE_LEN + TAG_HEADER_LEN);
    let body = buf.split_to(body_len).freeze();
    Ok(Some(Tag {
        tag_type: type_byte & 0x1f,
        timestamp_ms: (ts_high << 24) | ts_low,
        body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_one_tag() {
        let mut out = BytesMut::new();
        write_file_header(&mut out, true, true);
        assert_eq!(&out[..], b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00");
        let r = write_tag(&mut out, 9, 0x0102_0304, &[0xaa, 0xbb]);
        assert_eq!(r, Ok(()));
        assert_eq!(
            &out[13..],
            &[9, 0, 0, 2, 2, 3, 4, 1, 0, 0, 0, 0xaa, 0xbb, 0, 0, 0, 13]
        );
        let mut reader = TagReader::new();
        let tag = reader.read(&mut out);
        let expected = Tag {
            tag_type: 9,
            timestamp_ms: 0x0102_0304,
            body: Bytes::from_static(&[0xaa, 0xbb]),
        };
        assert_eq!(tag, Ok(Some(expected)));
        assert_eq!(
            reader.header(),
            Some(FileHeader {
                has_audio: true,
                has_video: true
            })
        );
        // The trailing PreviousTagSize stays until the next tag arrives.
        assert_eq!(reader.read(&mut out), Ok(None));
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn oversized_tag_fails_before_buffering() {
        let mut buf = BytesMut::from(&b"FLV\x01\x01\x00\x00\x00\x09"[..]);
        buf.extend_from_slice(&[0, 0, 0, 0, 9, 0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut reader = TagReader::new();
        assert!(matches!(
            reader.read(&mut buf),
            Err(FlvError::TooLarge { .. })
        ));
        assert!(reader.read(&mut buf).is_err());
    }

    #[test]
    fn bad_signature_and_offset() {
        let mut reader = TagReader::new();
        assert!(reader
            .read(&mut BytesMut::from(&b"FLX\x01\x01\x00\x00\x00\x09"[..]))
            .is_err());
        let mut reader = TagReader::new();
        assert!(reader
            .read(&mut BytesMut::from(&b"FLV\x01\x01\x00\x00\x00\x08"[..]))
            .is_err());
    }

    #[test]
    fn header_padding_is_skipped_across_calls() {
        let mut reader = TagReader::new();
        let mut buf = BytesMut::from(&b"FLV\x01\x01\x00\x00\x00\x0c\xee"[..]);
        assert_eq!(reader.read(&mut buf), Ok(None));
        assert!(buf.is_empty());
        buf.extend_from_slice(&[0xee, 0xee, 0, 0, 0, 0]);
        let _ = write_tag(&mut buf, 18, 0, b"x");
        let tag = reader.read(&mut buf).map(|t| t.map(|t| t.body));
        assert_eq!(tag, Ok(Some(Bytes::from_static(b"x"))));
    }

    #[test]
    fn writer_rejects_what_24_bits_cannot_say() {
        let mut out = BytesMut::new();
        assert!(write_tag_header(&mut out, 9, 0, MAX_DATA_SIZE + 1).is_err());
        assert!(out.is_empty());
        assert!(write_tag_header(&mut out, 9, 0, MAX_DATA_SIZE).is_ok());
    }
}
