//! Why a pull or a push failed: one [`RelayError`] for every origin, source and
//! target, whatever the protocol, and the errors of the relay settings the API and
//! the configuration hand in ([`RuleError`], [`PushUrlError`], [`CaError`]).
//!
//! Why typed: a pull logs the error and moves on to the next origin, and the API
//! shows it; the variants say what failed (connecting, TLS, silence, a refusal and
//! its code, bad media) so that a caller can tell them apart without reading text.
//! Each Display is the line the logs show after `edge:` or `push:`.

use std::time::Duration;

/// The other side of a relay connection, as the messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// An RTMP, RTMPS or HTTP-FLV origin.
    Origin,
    /// An RTSP server or camera.
    Server,
    /// An SRT listener.
    Listener,
    /// A push target.
    Target,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Peer::Origin => "the origin",
            Peer::Server => "the server",
            Peer::Listener => "the listener",
            Peer::Target => "the target",
        })
    }
}

/// Why one connection of a pull or a push ended.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The TCP connection could not be made.
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// No connection within the push's time.
    #[error("connect: timed out after {0:?}")]
    ConnectTimeout(Duration),
    #[error("resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{0} has no address")]
    NoAddress(String),
    #[error("{0} is not a TLS server name")]
    ServerName(String),
    /// The TLS handshake failed (an untrusted certificate, a name mismatch...).
    #[error("TLS with {addr}: {source}")]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    /// A local socket could not be set up (bind, address).
    #[error("socket: {0}")]
    Socket(#[from] std::io::Error),
    /// A read or write of a connection the driver runs failed.
    #[error("connection: {0}")]
    Conn(#[source] std::io::Error),
    #[error("receive: {0}")]
    Receive(#[source] std::io::Error),
    #[error("send: {0}")]
    Send(#[source] std::io::Error),
    #[error("{0} closed the connection")]
    Closed(Peer),
    /// Nothing came from the peer for this long.
    #[error("{peer} sent nothing for {after:?}")]
    Silent { peer: Peer, after: Duration },
    /// The peer took none of what we sent for this long.
    #[error("{peer} took nothing for {after:?}")]
    Stalled { peer: Peer, after: Duration },
    /// The origin did not start playing the stream within the pull's connect time.
    #[error("no stream within {0:?}")]
    NoStream(Duration),
    #[error("the target did not accept the publish within {0:?}")]
    NotAccepted(Duration),
    /// An RTMP origin or target refused the play or publish.
    #[error("{peer} refused: {code} {description}")]
    Refused {
        peer: Peer,
        code: String,
        description: String,
    },
    /// An HTTP answer other than 200 (HTTP-FLV, HLS).
    #[error("{what} answered {status}")]
    Status { what: String, status: u16 },
    /// An RTSP request was answered with an error.
    #[error("{method} answered {status} {reason}")]
    RtspRefused {
        method: sluice_rtsp::Method,
        status: u16,
        reason: String,
    },
    #[error("no answer to {0}")]
    NoAnswer(sluice_rtsp::Method),
    /// The RTMP origin stopped the stream (its publisher left, or it has none).
    #[error("the origin's stream ended ({0})")]
    StreamEnded(String),
    /// The HTTP-FLV body ended.
    #[error("the origin ended the stream")]
    BodyEnded,
    #[error("the server ended the session")]
    TornDown,
    #[error("the source's playlist ended")]
    PlaylistEnded,
    #[error("no new segment for {0:?}")]
    NoNewSegment(Duration),
    #[error("the listener closed the connection ({0:?})")]
    SrtClosed(sluice_srt::Closed),
    #[error("{0:?} is not app/stream")]
    NotAppStream(String),
    /// An origin the driver plays (RTMP, HTTP-FLV, RTSP) where a reader was asked for.
    #[error("an RTMP, FLV or RTSP origin has no reader")]
    NoReader,
    #[error("RTMP: {0}")]
    Rtmp(#[from] sluice_rtmp::RtmpError),
    #[error("RTSP: {0}")]
    Rtsp(#[from] sluice_rtsp::RtspError),
    #[error("SRT: {0}")]
    SrtCall(#[from] sluice_srt::CallError),
    #[error("SRT: {0}")]
    SrtData(#[from] sluice_srt::DatagramError),
    #[error("HTTP: {0}")]
    Http(#[from] sluice_http::response::ResponseError),
    #[error("DESCRIBE answer's SDP: {0}")]
    Sdp(#[from] sluice_media::sdp::SdpError),
    #[error("RTP: {0}")]
    Rtp(#[from] sluice_media::rtp::RtpError),
    #[error("no media Sluice can take in the DESCRIBE answer")]
    NoMedia,
    /// An HLS playlist or segment request failed.
    #[error("{url}: {source}")]
    Fetch {
        url: String,
        source: crate::io::http_client::FetchError,
    },
    #[error("{url}: {source}")]
    Playlist {
        url: String,
        source: sluice_hls::parse::ParseError,
    },
    #[error("{0}: not UTF-8")]
    NotUtf8(String),
    #[error("a master playlist without variants")]
    NoVariants,
    #[error("{0}: a master playlist where a media one was")]
    MasterNotMedia(String),
    #[error("fMP4 HLS sources are not supported (MPEG-TS segments only)")]
    Fmp4,
    /// What the origin sent does not parse as media (FLV tags, AVC or AAC headers).
    #[error("bad media from the origin: {0}")]
    BadMedia(#[from] sluice_media::flv::FlvError),
    /// This thread runs no worker, so no driver for a relay's connection.
    #[error("no connection driver on this thread")]
    NoDriver,
    /// The API, a takeover or the shutdown ended the connection.
    #[error("ended by the server")]
    Kicked,
    /// The stream here refused the pull's publisher.
    #[error(transparent)]
    Publish(#[from] crate::core::hub::PublishError),
}

/// A push URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushUrlError {
    /// An RTMP(S) URL, or one of no push scheme. It names the scheme only: the rest may
    /// hold a platform's stream key.
    #[error("bad push URL ({scheme}://...): {why}")]
    Rtmp { scheme: String, why: &'static str },
    /// A `udp://` or `rtp://` URL (MPEG-TS out): it holds no secret, the error names the
    /// part.
    #[error("bad push URL: {0}")]
    Ts(#[from] sluice_media::ts::TsOutUrlError),
}

/// A relay rule the API cannot add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error(transparent)]
    Origin(#[from] super::origin::OriginError),
    #[error(transparent)]
    Push(#[from] PushUrlError),
    #[error(transparent)]
    Streams(#[from] crate::keys::PatternError),
}

/// Why `edge.tls_ca` gives no TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{ca}: {source}")]
    Pem {
        ca: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{0}: no certificate")]
    Empty(String),
    #[error("{ca}: {source}")]
    Rustls { ca: String, source: rustls::Error },
}
