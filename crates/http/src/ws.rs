//! WebSocket (RFC 6455) for server-to-client media: the handshake answer, frame
//! headers for the shared media bytes, and a bounded reader of client frames.
//!
//! Why frames are built from a header alone: server frames are unmasked, so the
//! header of a media frame depends only on its length and is built once per frame
//! for every WebSocket player; the payload is the same shared FLV tag.

use base64::Engine;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use sha1::{Digest, Sha1};
use thiserror::Error;

/// Longest client frame payload accepted. Players send only close, ping and pong
/// frames (control frames are limited to 125 bytes by the RFC) and perhaps a short
/// text message; anything larger is a peer making us buffer.
pub const MAX_CLIENT_PAYLOAD: usize = 4096;

/// Opcodes of RFC 6455 §5.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// Continuation of a fragmented message.
    Continuation,
    /// UTF-8 text.
    Text,
    /// Binary data.
    Binary,
    /// Close.
    Close,
    /// Ping.
    Ping,
    /// Pong.
    Pong,
}

impl Opcode {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => return None,
        })
    }

    fn as_u8(self) -> u8 {
        match self {
            Opcode::Continuation => 0,
            Opcode::Text => 1,
            Opcode::Binary => 2,
            Opcode::Close => 8,
            Opcode::Ping => 9,
            Opcode::Pong => 10,
        }
    }
}

/// Why a client frame was refused. Every variant is the peer's fault.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WsError {
    /// Reserved bits or an unknown opcode.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// RFC 6455 §5.1: a client must mask every frame.
    #[error("client frame is not masked")]
    Unmasked,
    /// Payload above [`MAX_CLIENT_PAYLOAD`].
    #[error("client frame of {0} bytes exceeds {MAX_CLIENT_PAYLOAD}")]
    TooLarge(u64),
}

/// The `Sec-WebSocket-Accept` value for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut sha = Sha1::new();
    sha.update(key.trim().as_bytes());
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Writes the header of an unmasked, final server frame of `len` payload bytes.
pub fn write_frame_header(out: &mut BytesMut, opcode: Opcode, len: usize) {
    out.put_u8(0x80 | opcode.as_u8());
    if len < 126 {
        out.put_u8(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.put_u8(126);
        out.put_u16(short);
    } else {
        out.put_u8(127);
        out.put_u64(len as u64);
    }
}

/// One complete, unmasked client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What the frame is.
    pub opcode: Opcode,
    /// Whether it ends a message.
    pub fin: bool,
    /// The unmasked payload.
    pub payload: Bytes,
}

/// Reads client frames from a byte buffer. Returns `Ok(None)` until a whole frame is
/// buffered; consumes it from `buf` when it returns one.
pub fn read_client_frame(buf: &mut BytesMut) -> Result<Option<Frame>, WsError> {
    let Some(&[b0, b1]) = buf.get(..2) else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(WsError::Malformed("reserved bits set"));
    }
    let opcode = Opcode::from_u8(b0 & 0x0f).ok_or(WsError::Malformed("unknown opcode"))?;
    if b1 & 0x80 == 0 {
        return Err(WsError::Unmasked);
    }
    let (len, mut at) = match b1 & 0x7f {
        126 => match buf.get(2..4).and_then(|b| <[u8; 2]>::try_from(b).ok()) {
            Some(b) => (u64::from(u16::from_be_bytes(b)), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                (u64::from_be_bytes(a), 10)
            }
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    if len > MAX_CLIENT_PAYLOAD as u64 {
        return Err(WsError::TooLarge(len));
    }
    let len = len as usize;
    let Some(mask) = buf
        .get(at..at + 4)
        .and_then(|m| <[u8; 4]>::try_from(m).ok())
    else {
        return Ok(None);
    };
    at += 4;
    if buf.len() < at + len {
        return Ok(None);
    }
    buf.advance(at);
    let mut payload = buf.split_to(len);
    for (b, m) in payload.iter_mut().zip(mask.iter().cycle()) {
        *b ^= m;
    }
    Ok(Some(Frame {
        opcode,
        fin: b0 & 0x80 != 0,
        payload: payload.freeze(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accept_key_matches_rfc_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn header_lengths() {
        for (len, want) in [(5usize, 2usize), (126, 4), (65535, 4), (65536, 10)] {
            let mut out = BytesMut::new();
            write_frame_header(&mut out, Opcode::Binary, len);
            assert_eq!(out.len(), want, "len {len}");
            assert_eq!(out[0], 0x82);
        }
    }

    fn masked(opcode: u8, payload: &[u8], mask: [u8; 4]) -> BytesMut {
        let mut out = BytesMut::new();
        out.put_u8(0x80 | opcode);
        if payload.len() < 126 {
            out.put_u8(0x80 | payload.len() as u8);
        } else {
            out.put_u8(0x80 | 126);
            out.put_u16(payload.len() as u16);
        }
        out.put_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
        out
    }

    #[test]
    fn reads_a_masked_close_in_pieces() {
        let whole = masked(8, &[0x03, 0xe8], [1, 2, 3, 4]);
        let mut buf = BytesMut::new();
        for (i, b) in whole.iter().enumerate() {
            buf.put_u8(*b);
            let got = read_client_frame(&mut buf).unwrap();
            if i + 1 < whole.len() {
                assert_eq!(got, None);
            } else {
                let f = got.unwrap();
                assert_eq!(f.opcode, Opcode::Close);
                assert_eq!(&f.payload[..], &[0x03, 0xe8]);
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn unmasked_and_huge_frames_are_refused() {
        let mut buf = BytesMut::from(&[0x81u8, 0x01, b'a'][..]);
        assert_eq!(read_client_frame(&mut buf), Err(WsError::Unmasked));
        let mut buf = BytesMut::from(&[0x82u8, 0xff, 0, 0, 0, 1, 0, 0, 0, 0][..]);
        assert!(matches!(
            read_client_frame(&mut buf),
            Err(WsError::TooLarge(_))
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = read_client_frame(&mut buf) {}
        }

        #[test]
        fn masked_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..300), mask in any::<[u8; 4]>()) {
            let mut buf = masked(2, &payload, mask);
            let f = read_client_frame(&mut buf).unwrap().unwrap();
            prop_assert_eq!(&f.payload[..], &payload[..]);
        }
    }
}
