//! An RTMP connection driven by `sluice_rtmp::ClientSession`.

use crate::{ClientError, Tag};
use bytes::{Bytes, BytesMut};
use sluice_media::flv::{TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_rtmp::{ClientConfig, ClientEvent, ClientOutput, ClientSession};
use std::collections::VecDeque;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One RTMP connection, as a publisher or a player.
pub struct RtmpConn {
    sock: TcpStream,
    session: ClientSession,
    events: VecDeque<ClientEvent>,
    out: BytesMut,
    buf: BytesMut,
}

impl RtmpConn {
    /// Connects and starts the handshake; `app` is the application name.
    pub async fn connect(
        addr: SocketAddr,
        app: &str,
        digest: bool,
    ) -> Result<RtmpConn, ClientError> {
        let sock = TcpStream::connect(addr).await?;
        Self::over(sock, app, digest)
    }

    /// Starts the handshake on a connection the caller made (with socket options of its
    /// own, say).
    pub fn over(sock: TcpStream, app: &str, digest: bool) -> Result<RtmpConn, ClientError> {
        let addr = sock.peer_addr()?;
        sock.set_nodelay(true)?;
        let session = ClientSession::new(ClientConfig {
            app: app.to_string(),
            tc_url: format!("rtmp://{addr}/{app}"),
            chunk_size: 4096,
            digest_handshake: digest,
        });
        Ok(RtmpConn {
            sock,
            session,
            events: VecDeque::new(),
            out: BytesMut::new(),
            buf: BytesMut::with_capacity(64 << 10),
        })
    }

    fn collect(&mut self) {
        while let Some(output) = self.session.poll_output() {
            match output {
                ClientOutput::Write(bytes) => self.out.extend_from_slice(&bytes),
                ClientOutput::Event(event) => self.events.push_back(event),
            }
        }
    }

    /// Writes everything the session queued.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        self.collect();
        if !self.out.is_empty() {
            self.sock.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    /// The next event from the server.
    pub async fn next_event(&mut self) -> Result<ClientEvent, ClientError> {
        loop {
            self.flush().await?;
            if let Some(event) = self.events.pop_front() {
                return Ok(event);
            }
            self.buf.reserve(64 << 10);
            if self.sock.read_buf(&mut self.buf).await? == 0 {
                return Err(ClientError::Closed);
            }
            let data = self.buf.split();
            self.session.handle_input(&data)?;
        }
    }

    /// Publishes `name` (which may carry `?query`) and waits for the server's answer.
    pub async fn publish(&mut self, name: &str) -> Result<(), ClientError> {
        self.session.publish(name);
        loop {
            match self.next_event().await? {
                ClientEvent::PublishStarted => return Ok(()),
                ClientEvent::Rejected { code, description } => {
                    return Err(ClientError::Refused(format!("{code}: {description}")))
                }
                _ => {}
            }
        }
    }

    /// Plays `name` and waits until the server accepted it.
    pub async fn play(&mut self, name: &str) -> Result<(), ClientError> {
        self.session.play(name);
        loop {
            match self.next_event().await? {
                ClientEvent::PlayStarted => return Ok(()),
                ClientEvent::Rejected { code, description } => {
                    return Err(ClientError::Refused(format!("{code}: {description}")))
                }
                _ => {}
            }
        }
    }

    /// Queues one tag for sending (call [`RtmpConn::flush`] to write).
    pub fn send(&mut self, tag_type: u8, ts_ms: u32, body: &[u8]) {
        match tag_type {
            TAG_VIDEO => self.session.send_video(ts_ms, body),
            TAG_AUDIO => self.session.send_audio(ts_ms, body),
            _ => self.session.send_metadata(body),
        }
    }

    /// Queues an AMF0 data message as it is (an `onCuePoint`, say) at `ts_ms`.
    pub fn send_data(&mut self, ts_ms: u32, amf_body: &[u8]) {
        self.session.send_data(ts_ms, amf_body);
    }

    /// The next media or script message, skipping status events.
    pub async fn next_tag(&mut self) -> Result<Tag, ClientError> {
        loop {
            match self.next_event().await? {
                ClientEvent::Video {
                    timestamp_ms,
                    payload,
                } => return Ok(tag(TAG_VIDEO, timestamp_ms, payload)),
                ClientEvent::Audio {
                    timestamp_ms,
                    payload,
                } => return Ok(tag(TAG_AUDIO, timestamp_ms, payload)),
                ClientEvent::Metadata { payload } => return Ok(tag(TAG_SCRIPT, 0, payload)),
                ClientEvent::Rejected { code, description } => {
                    return Err(ClientError::Refused(format!("{code}: {description}")))
                }
                _ => {}
            }
        }
    }

    /// Closes the stream (FCUnpublish/deleteStream) and the connection.
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.session.close_stream();
        self.flush().await?;
        self.sock.shutdown().await?;
        Ok(())
    }

    /// The socket, for tests that misbehave on purpose.
    pub fn socket(&mut self) -> &mut TcpStream {
        &mut self.sock
    }
}

fn tag(tag_type: u8, ts_ms: i64, body: Bytes) -> Tag {
    Tag {
        tag_type,
        ts_ms,
        body,
    }
}
