//! The test's side of an HTTP-FLV player: a request in raw bytes, then the response
//! head and the FLV tags read from a [`Peer`].

use super::rtmp::{video, Video};
use super::wire::Peer;
use bytes::BytesMut;
use sluice_media::flv::{TagReader, TAG_VIDEO};

/// One HTTP-FLV player of a test.
pub struct FlvPlayer {
    pub peer: Peer,
    buf: BytesMut,
    /// The response's status, once its head came.
    pub status: Option<u16>,
    tags: TagReader,
}

impl FlvPlayer {
    /// Asks for `/live/<name>.flv` over `peer`.
    pub fn get(peer: Peer, name: &str) -> FlvPlayer {
        let request = format!("GET /live/{name}.flv HTTP/1.1\r\nHost: sluice\r\n\r\n");
        peer.send(request.as_bytes());
        FlvPlayer {
            peer,
            buf: BytesMut::new(),
            status: None,
            tags: TagReader::new(),
        }
    }

    /// The next video tag; `None` once the connection ended.
    pub async fn next_video(&mut self) -> Option<Video> {
        loop {
            if self.status.is_none() {
                if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = self.buf.split_to(end + 4);
                    let line = String::from_utf8_lossy(&head);
                    let code = line.split(' ').nth(1).and_then(|c| c.parse().ok());
                    self.status = Some(code.expect("a status line"));
                }
            }
            if self.status.is_some() {
                while let Some(tag) = self.tags.read(&mut self.buf).expect("FLV") {
                    if tag.tag_type == TAG_VIDEO {
                        return Some(video(i64::from(tag.timestamp_ms), &tag.body));
                    }
                }
            }
            let bytes = self.peer.recv().await?;
            self.buf.extend_from_slice(&bytes);
        }
    }
}
