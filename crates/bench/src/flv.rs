//! HTTP-FLV and WebSocket-FLV players.

use crate::{ClientError, Tag};
use base64::Engine;
use bytes::{Buf, BytesMut};
use sluice_media::flv::TagReader;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 << 10;

/// An FLV stream over HTTP, plain or inside WebSocket binary frames.
pub struct FlvConn {
    sock: TcpStream,
    buf: BytesMut,
    /// FLV bytes taken out of WebSocket frames.
    flv: BytesMut,
    reader: TagReader,
    websocket: bool,
    /// The response's status line and headers.
    pub head: String,
}

impl FlvConn {
    /// Sends `GET path` (upgraded to WebSocket if asked) and reads the response head.
    pub async fn connect(
        addr: SocketAddr,
        path: &str,
        websocket: bool,
    ) -> Result<FlvConn, ClientError> {
        let mut sock = TcpStream::connect(addr).await?;
        sock.set_nodelay(true)?;
        let mut req =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: sluice-bench\r\n");
        if websocket {
            let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
            req.push_str(&format!(
                "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
            ));
        }
        req.push_str("\r\n");
        sock.write_all(req.as_bytes()).await?;
        let mut buf = BytesMut::with_capacity(64 << 10);
        let head_len = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_HEAD {
                return Err(ClientError::Refused("response head too large".into()));
            }
            if sock.read_buf(&mut buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
        buf.advance(head_len);
        let want = if websocket { " 101 " } else { " 200 " };
        if !head.lines().next().unwrap_or("").contains(want) {
            return Err(ClientError::Refused(
                head.lines().next().unwrap_or("").to_string(),
            ));
        }
        Ok(FlvConn {
            sock,
            buf,
            flv: BytesMut::new(),
            reader: TagReader::new(),
            websocket,
            head,
        })
    }

    /// Moves the payloads of complete WebSocket frames from `buf` to `flv`.
    fn unframe(&mut self) -> Result<(), ClientError> {
        loop {
            let Some(&[b0, b1]) = self.buf.get(..2) else {
                return Ok(());
            };
            let (len, at): (usize, usize) = match b1 & 0x7f {
                126 => match self.buf.get(2..4) {
                    Some(b) => (u16::from_be_bytes([b[0], b[1]]) as usize, 4),
                    None => return Ok(()),
                },
                127 => match self.buf.get(2..10) {
                    Some(b) => {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(b);
                        (
                            usize::try_from(u64::from_be_bytes(a)).unwrap_or(usize::MAX),
                            10,
                        )
                    }
                    None => return Ok(()),
                },
                n => (n as usize, 2),
            };
            if b1 & 0x80 != 0 {
                return Err(ClientError::Refused("server frame is masked".into()));
            }
            if self.buf.len() < at.saturating_add(len) {
                return Ok(());
            }
            self.buf.advance(at);
            let payload = self.buf.split_to(len);
            match b0 & 0x0f {
                0 | 2 => self.flv.extend_from_slice(&payload),
                8 => return Err(ClientError::Closed),
                _ => {}
            }
        }
    }

    /// The next FLV tag.
    pub async fn next_tag(&mut self) -> Result<Tag, ClientError> {
        loop {
            let source = if self.websocket {
                self.unframe()?;
                &mut self.flv
            } else {
                &mut self.buf
            };
            if let Some(tag) = self.reader.read(source)? {
                return Ok(Tag {
                    tag_type: tag.tag_type,
                    ts_ms: i64::from(tag.timestamp_ms),
                    body: tag.body,
                });
            }
            self.buf.reserve(64 << 10);
            if self.sock.read_buf(&mut self.buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    /// The socket, for tests that misbehave on purpose.
    pub fn socket(&mut self) -> &mut TcpStream {
        &mut self.sock
    }
}
