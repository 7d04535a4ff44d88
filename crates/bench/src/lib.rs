//! `sluice-bench`'s clients, also used by Sluice's end-to-end tests: an RTMP publisher
//! and RTMP, HTTP-FLV and WebSocket-FLV players that work against any server.
//!
//! The players hand every received message to the caller as a [`Tag`] (an FLV tag
//! body with its timestamp), whatever the protocol, so a test or a figure is written
//! once for all of them. Reads are large and tag bodies are slices of the read buffer.

pub mod clip;
pub mod flv;
pub mod fmp4_scan;
pub mod player;
pub mod publish;
pub mod rtmp;

use bytes::Bytes;

/// One media or script message as FLV carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// `sluice_media::flv::TAG_AUDIO`, `TAG_VIDEO` or `TAG_SCRIPT`.
    pub tag_type: u8,
    /// Timestamp in ms.
    pub ts_ms: i64,
    /// The tag body (the RTMP message payload).
    pub body: Bytes,
}

impl Tag {
    /// A video keyframe (legacy or Enhanced RTMP header), excluding sequence headers.
    pub fn is_keyframe(&self) -> bool {
        if self.tag_type != sluice_media::flv::TAG_VIDEO {
            return false;
        }
        let Some(&b0) = self.body.first() else {
            return false;
        };
        if b0 & 0x80 != 0 {
            // Enhanced: frame type in bits 4-6, packet type in 0-3 (1 and 3 are frames).
            (b0 >> 4) & 0x07 == 1 && matches!(b0 & 0x0f, 1 | 3)
        } else {
            b0 >> 4 == 1 && self.body.get(1) == Some(&1)
        }
    }

    /// A coded video frame (not a sequence header or end of sequence).
    pub fn is_video_frame(&self) -> bool {
        if self.tag_type != sluice_media::flv::TAG_VIDEO {
            return false;
        }
        match self.body.first() {
            Some(&b0) if b0 & 0x80 != 0 => matches!(b0 & 0x0f, 1 | 3),
            Some(_) => self.body.get(1) == Some(&1),
            None => false,
        }
    }
}

/// Errors of the bench clients.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The server broke RTMP.
    #[error("rtmp: {0}")]
    Rtmp(#[from] sluice_rtmp::RtmpError),
    /// The server sent bad FLV.
    #[error("flv: {0}")]
    Flv(#[from] sluice_media::flv::FlvError),
    /// The server answered something other than what was asked.
    #[error("{0}")]
    Refused(String),
    /// The server closed the connection.
    #[error("connection closed")]
    Closed,
}
