//! One player of any protocol, behind one interface.

use crate::flv::FlvConn;
use crate::rtmp::RtmpConn;
use crate::{ClientError, Tag};
use std::net::SocketAddr;

/// Protocols a player can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Protocol {
    /// RTMP play.
    Rtmp,
    /// HTTP-FLV.
    Flv,
    /// WebSocket-FLV.
    WsFlv,
    /// HLS (MPEG-TS or fMP4 segments): playlist polling, whole segments.
    Hls,
    /// Low-Latency HLS (fMP4 parts): blocking playlist reload and preload hints.
    LlHls,
    /// RTSP with RTP interleaved on the TCP connection.
    Rtsp,
    /// RTSP with RTP over UDP (a port pair per track and player).
    RtspUdp,
    /// WebRTC (WHEP): an SDP offer POSTed to `/app/stream/whep`, media over DTLS-SRTP.
    Whep,
    /// SRT (`m=request`): the stream's MPEG-TS in 1316-byte payloads.
    Srt,
    /// HTTP-fMP4: one GET of `/app/stream.mp4`, an init segment then a fragment per frame.
    Fmp4,
    /// WebSocket-fMP4: the same, each fragment one binary message.
    WsFmp4,
}

/// A connected player.
pub enum Player {
    /// Over RTMP.
    Rtmp(Box<RtmpConn>),
    /// Over HTTP-FLV or WebSocket-FLV.
    Flv(FlvConn),
}

impl Player {
    /// Connects and starts playing `app/stream`; `addr` is the RTMP or HTTP address.
    pub async fn connect(
        protocol: Protocol,
        addr: SocketAddr,
        app: &str,
        stream: &str,
    ) -> Result<Player, ClientError> {
        Ok(match protocol {
            Protocol::Rtmp => {
                let mut conn = RtmpConn::connect(addr, app, false).await?;
                conn.play(stream).await?;
                Player::Rtmp(Box::new(conn))
            }
            Protocol::Flv | Protocol::WsFlv => {
                let path = format!("/{app}/{stream}.flv");
                Player::Flv(FlvConn::connect(addr, &path, protocol == Protocol::WsFlv).await?)
            }
            Protocol::Hls | Protocol::LlHls => {
                return Err(ClientError::Refused(
                    "HLS has no tag-level player (sluice-bench play only)".into(),
                ))
            }
            Protocol::Rtsp
            | Protocol::RtspUdp
            | Protocol::Whep
            | Protocol::Srt
            | Protocol::Fmp4
            | Protocol::WsFmp4 => {
                return Err(ClientError::Refused(
                    "no tag-level player for this protocol (sluice-bench play only)".into(),
                ))
            }
        })
    }

    /// The next tag.
    pub async fn next_tag(&mut self) -> Result<Tag, ClientError> {
        match self {
            Player::Rtmp(c) => c.next_tag().await,
            Player::Flv(c) => c.next_tag().await,
        }
    }
}
