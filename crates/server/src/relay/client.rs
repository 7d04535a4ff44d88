//! What every pull's connection gives the hub ([`Media`]), the readers of the
//! sources whose clients run outside the connection driver ([`Reader`]: SRT, HLS),
//! and the RTMP client session of pulls and pushes ([`rtmp_session`]). RTMP, RTMPS,
//! HTTP(S)-FLV and RTSP origins are played in the driver (`link`).

use super::error::RelayError;
use super::origin::{Origin, Scheme};
use bytes::Bytes;
use sluice_rtmp::{ClientConfig, ClientSession};
use std::time::Duration;

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
    /// An SCTE-35 cue of a TS source.
    Cue(sluice_media::ts::Cue),
}

/// A stream being read from an origin or source outside the connection driver.
pub enum Reader {
    Srt(Box<super::srt_pull::SrtReader>),
    Hls(Box<super::hls_pull::HlsReader>),
}

impl Reader {
    /// Connects to `origin` and asks for stream `key`; returns once the origin said
    /// it plays it (SRT's handshake done, a playlist read).
    pub async fn open(origin: &Origin, key: &str) -> Result<Reader, RelayError> {
        Ok(match origin.scheme {
            Scheme::Srt => Reader::Srt(Box::new(
                super::srt_pull::SrtReader::open(origin, key).await?,
            )),
            Scheme::Hls { .. } => Reader::Hls(Box::new(
                super::hls_pull::HlsReader::open(&origin.url_of(key)).await?,
            )),
            Scheme::Rtmp | Scheme::Rtmps | Scheme::Flv { .. } | Scheme::Rtsp { .. } => {
                return Err(RelayError::NoReader)
            }
        })
    }

    /// The next piece of the stream, or `None` when nothing came within `wait`; an
    /// error when the origin closed, went silent, ended the stream or sent garbage.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<Media>, RelayError> {
        match self {
            Reader::Srt(r) => r.next(wait).await,
            Reader::Hls(r) => r.next(wait).await,
        }
    }

    /// Bytes read from the origin since the last call.
    pub fn take_bytes(&mut self) -> u64 {
        match self {
            Reader::Srt(r) => r.take_bytes(),
            Reader::Hls(r) => r.take_bytes(),
        }
    }
}

/// `app` and `stream` of an RTMP path: the first segment, and the rest.
pub fn rtmp_parts(path: &str) -> Result<(&str, &str), RelayError> {
    path.split_once('/')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty())
        .ok_or_else(|| RelayError::NotAppStream(path.to_string()))
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
