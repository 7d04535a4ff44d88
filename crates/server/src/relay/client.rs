//! Reading a live stream from an origin or source ([`Reader`]: HTTP(S)-FLV over
//! `sluice_http::response` and `sluice_media::flv::TagReader`, and the SRT, RTSP and
//! HLS readers), and what every pull's connection gives the hub ([`Media`]). RTMP and
//! RTMPS origins are played in the connection driver (`link`), over the RTMP client
//! session made here ([`rtmp_session`]).
//!
//! # Invariants
//! - Everything an origin can make us hold is bounded: the read buffer (one read),
//!   the RTMP chunk reader's and FLV tag reader's limits, the response head.
//! - An origin that sends nothing for [`SILENCE`] is taken for dead.

use super::error::{Peer, RelayError};
use super::origin::{Origin, Scheme};
use bytes::{Bytes, BytesMut};
use sluice_http::response::{read_response_head, BodyFraming, ChunkedDecoder};
use sluice_media::flv::{TagReader, TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_rtmp::{ClientConfig, ClientSession};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Bytes per read.
const READ_LEN: usize = 64 << 10;
/// An origin silent this long (no media, no keep-alive) is taken for dead.
pub const SILENCE: Duration = Duration::from_secs(10);

/// One piece of the stream: as an RTMP publisher sends it (RTMP, HTTP-FLV), or
/// demuxed (SRT's MPEG-TS).
#[derive(Debug)]
pub enum Media {
    Video(i64, Bytes),
    Audio(i64, Bytes),
    /// `onMetaData` and its object (AMF0).
    Metadata(Bytes),
    /// A track's configuration from this time (90 kHz) on.
    Track(sluice_media::Timestamp, sluice_media::Track),
    Frame(sluice_media::Frame),
}

/// A stream being read from an origin or source.
pub enum Reader {
    Tcp(Box<TcpReader>),
    Srt(Box<super::srt_pull::SrtReader>),
    Rtsp(Box<super::rtsp_pull::RtspReader>),
    Hls(Box<super::hls_pull::HlsReader>),
}

impl Reader {
    /// Connects to `origin` and asks for stream `key`; returns once the origin said
    /// it plays it (RTMP `NetStream.Play.Start`, HTTP 200, SRT's handshake done).
    pub async fn open(
        origin: &Origin,
        key: &str,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Reader, RelayError> {
        Ok(match origin.scheme {
            Scheme::Srt => Reader::Srt(Box::new(
                super::srt_pull::SrtReader::open(origin, key).await?,
            )),
            Scheme::Rtsp { udp } => Reader::Rtsp(Box::new(
                super::rtsp_pull::RtspReader::open(origin, udp).await?,
            )),
            Scheme::Hls { .. } => Reader::Hls(Box::new(
                super::hls_pull::HlsReader::open(&origin.url_of(key)).await?,
            )),
            _ => Reader::Tcp(Box::new(TcpReader::open(origin, key, tls).await?)),
        })
    }

    /// The next piece of the stream, or `None` when nothing came within `wait`; an
    /// error when the origin closed, went silent, ended the stream or sent garbage.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        match self {
            Reader::Tcp(r) => r.next(wait).await,
            Reader::Srt(r) => r.next(wait).await,
            Reader::Rtsp(r) => r.next(wait).await,
            Reader::Hls(r) => r.next(wait).await,
        }
    }

    /// Bytes read from the origin since the last call.
    pub fn take_bytes(&mut self) -> u64 {
        match self {
            Reader::Tcp(r) => std::mem::take(&mut r.bytes),
            Reader::Srt(r) => r.take_bytes(),
            Reader::Rtsp(r) => r.take_bytes(),
            Reader::Hls(r) => r.take_bytes(),
        }
    }
}

/// A connection to another server, over TCP or TLS.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// How the stream is read.
enum Proto {
    Flv {
        tags: TagReader,
        /// `None`: the body runs until the connection closes.
        chunked: Option<ChunkedDecoder>,
        /// Body bytes not yet read into tags.
        body: BytesMut,
        /// `Content-Length` bytes still to come.
        left: Option<u64>,
    },
}

/// A stream being read from an HTTP(S)-FLV origin.
pub struct TcpReader {
    io: Box<dyn Io>,
    proto: Proto,
    /// Bytes read and not yet given to [`Reader::next`]'s parser.
    input: BytesMut,
    queue: VecDeque<Media>,
    /// Bytes read since [`Reader::take_bytes`].
    bytes: u64,
    last_data: Instant,
}

/// `app` and `stream` of an RTMP path: the first segment, and the rest.
pub fn rtmp_parts(path: &str) -> Result<(&str, &str), RelayError> {
    path.split_once('/')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty())
        .ok_or_else(|| RelayError::NotAppStream(path.to_string()))
}

async fn connect(
    origin: &Origin,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Box<dyn Io>, RelayError> {
    let tls = matches!(origin.scheme, Scheme::Rtmps | Scheme::Flv { tls: true }).then_some(tls);
    connect_to(&origin.host, origin.port, tls).await
}

/// Our outgoing RTMP chunk size (pulls send little; pushes send media).
const RTMP_CHUNK_SIZE: u32 = 4096;

/// An RTMP client session for application `app` at `authority`, as ffmpeg's connects.
pub fn rtmp_session(tls: bool, authority: &str, app: &str) -> ClientSession {
    let scheme = if tls { "rtmps" } else { "rtmp" };
    ClientSession::new(ClientConfig {
        app: app.to_string(),
        tc_url: format!("{scheme}://{authority}/{app}"),
        chunk_size: RTMP_CHUNK_SIZE,
        digest_handshake: false,
    })
}

/// A connection to `host:port`, over TLS with `tls` when given.
pub(super) async fn connect_to(
    host: &str,
    port: u16,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Box<dyn Io>, RelayError> {
    let addr = || format!("{host}:{port}");
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|source| RelayError::Connect {
            addr: addr(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| RelayError::ServerName(host.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|source| RelayError::Tls {
            addr: addr(),
            source,
        })?;
    Ok(Box::new(tls))
}

impl TcpReader {
    /// Connects to `origin` and asks for stream `key`; returns once the origin said
    /// it plays it (RTMP `NetStream.Play.Start`, HTTP 200).
    async fn open(
        origin: &Origin,
        key: &str,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<TcpReader, RelayError> {
        let io = connect(origin, tls).await?;
        let proto = match origin.scheme {
            Scheme::Rtmp
            | Scheme::Rtmps
            | Scheme::Srt
            | Scheme::Rtsp { .. }
            | Scheme::Hls { .. } => return Err(RelayError::NotTcpSource),
            Scheme::Flv { .. } => Proto::Flv {
                tags: TagReader::new(),
                chunked: None,
                body: BytesMut::new(),
                left: None,
            },
        };
        let mut reader = TcpReader {
            io,
            proto,
            input: BytesMut::with_capacity(READ_LEN),
            queue: VecDeque::new(),
            bytes: 0,
            last_data: Instant::now(),
        };
        match &mut reader.proto {
            Proto::Flv { .. } => {
                let request = format!(
                    "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice/{}\r\n\
                     Accept: */*\r\nConnection: close\r\n\r\n",
                    origin.flv_path(key),
                    origin.authority(),
                    env!("CARGO_PKG_VERSION")
                );
                reader
                    .io
                    .write_all(request.as_bytes())
                    .await
                    .map_err(RelayError::Write)?;
                let head = loop {
                    if let Some(head) = read_response_head(&mut reader.input)? {
                        break head;
                    }
                    reader.read().await?;
                };
                if head.status != 200 {
                    return Err(RelayError::Status {
                        what: Peer::Origin.to_string(),
                        status: head.status,
                    });
                }
                let Proto::Flv { chunked, left, .. } = &mut reader.proto;
                match head.framing {
                    BodyFraming::Chunked => *chunked = Some(ChunkedDecoder::new()),
                    BodyFraming::Length(n) => *left = Some(n),
                    BodyFraming::Close => {}
                }
                reader.flv_input()?;
            }
        }
        Ok(reader)
    }

    /// The next piece of the stream, or `None` when nothing came within `wait`; an
    /// error when the origin closed, went silent, ended the stream or sent garbage.
    async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        if let Some(m) = self.queue.pop_front() {
            return Ok(Some(m));
        }
        match tokio::time::timeout(wait, self.read()).await {
            Err(_) if self.last_data.elapsed() >= SILENCE => {
                return Err(RelayError::Silent {
                    peer: Peer::Origin,
                    after: SILENCE,
                })
            }
            Err(_) => return Ok(None),
            Ok(r) => r?,
        }
        self.flv_input()?;
        Ok(self.queue.pop_front())
    }

    /// One read into `input`.
    async fn read(&mut self) -> Result<(), RelayError> {
        self.input.reserve(READ_LEN);
        let n = self
            .io
            .read_buf(&mut self.input)
            .await
            .map_err(RelayError::Read)?;
        if n == 0 {
            return Err(RelayError::Closed(Peer::Origin));
        }
        self.bytes += n as u64;
        self.last_data = Instant::now();
        Ok(())
    }

    /// Decodes the FLV body in `input` and queues its tags.
    fn flv_input(&mut self) -> Result<(), RelayError> {
        let Proto::Flv {
            tags,
            chunked,
            body,
            left,
        } = &mut self.proto;
        match chunked {
            Some(d) => {
                d.decode(&mut self.input, body)?;
                if d.done() {
                    return Err(RelayError::BodyEnded);
                }
            }
            None => {
                let n = left.map_or(self.input.len(), |l| {
                    usize::try_from(l)
                        .unwrap_or(usize::MAX)
                        .min(self.input.len())
                });
                body.extend_from_slice(&self.input.split_to(n));
                if let Some(l) = left {
                    *l -= n as u64;
                    if *l == 0 {
                        return Err(RelayError::BodyEnded);
                    }
                }
            }
        }
        while let Some(tag) = tags.read(body)? {
            let ts = i64::from(tag.timestamp_ms);
            match tag.tag_type {
                TAG_VIDEO => self.queue.push_back(Media::Video(ts, tag.body)),
                TAG_AUDIO => self.queue.push_back(Media::Audio(ts, tag.body)),
                TAG_SCRIPT => self.queue.push_back(Media::Metadata(tag.body)),
                _ => {}
            }
        }
        Ok(())
    }
}
