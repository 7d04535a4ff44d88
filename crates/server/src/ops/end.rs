//! Why a connection ended, in one vocabulary for every protocol: the TCP protocols'
//! driver, SRT and WebRTC each map their own ends onto [`EndReason`], and
//! `/metrics` counts them by its label (`sluice_disconnects_total{reason}`).
//!
//! Why one enum: the label values are an operator's interface (dashboards, alerts);
//! a protocol that spelled one of them its own way would split a series silently.
//!
//! # Invariants
//! - [`EndReason::as_str`] values never change: they are the metric's label values.

use crate::core::fanout::CloseReason;

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The peer closed it, or the session ended as it should.
    Closed,
    /// The server closed it (SRT: a shutdown from our side).
    ClosedByServer,
    /// The peer went away without closing (WebRTC: ICE or DTLS lost).
    Disconnected,
    /// The peer broke its protocol.
    ProtocolError,
    /// A read or write on the socket failed.
    IoError,
    /// Nothing came from the peer for the idle timeout.
    Idle,
    /// It did not start publishing or playing in time.
    HandshakeTimeout,
    /// Its publish or play was refused (authorization, limits, a stream in use).
    Refused,
    /// A publisher sent media that does not parse.
    BadMedia,
    /// A player fell behind too often.
    TooSlow,
    /// Writing to a player failed.
    WriteError,
    /// The stream it played ended.
    StreamEnded,
    /// The session's own timer ran out.
    Timeout,
    /// The peer took nothing of its answer in time.
    Stalled,
    /// The API ended it.
    Kicked,
}

impl EndReason {
    /// The label `/metrics` counts it under.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Closed => "closed",
            EndReason::ClosedByServer => "closed_by_server",
            EndReason::Disconnected => "disconnected",
            EndReason::ProtocolError => "protocol_error",
            EndReason::IoError => "io_error",
            EndReason::Idle => "idle",
            EndReason::HandshakeTimeout => "handshake_timeout",
            EndReason::Refused => "refused",
            EndReason::BadMedia => "bad_media",
            EndReason::TooSlow => "too_slow",
            EndReason::WriteError => "write_error",
            EndReason::StreamEnded => "stream_ended",
            EndReason::Timeout => "timeout",
            EndReason::Stalled => "stalled",
            EndReason::Kicked => "kicked",
        }
    }
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CloseReason> for EndReason {
    fn from(reason: CloseReason) -> EndReason {
        match reason {
            CloseReason::StreamEnded => EndReason::StreamEnded,
            CloseReason::TooSlow => EndReason::TooSlow,
            CloseReason::WriteError => EndReason::WriteError,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The labels dashboards and the tests query (`too_slow`, `kicked`,
    /// `handshake_timeout`...) are spelled as they always were.
    #[test]
    fn labels_are_stable() {
        assert_eq!(EndReason::HandshakeTimeout.as_str(), "handshake_timeout");
        assert_eq!(EndReason::from(CloseReason::TooSlow).as_str(), "too_slow");
        assert_eq!(EndReason::Kicked.to_string(), "kicked");
        assert_eq!(EndReason::ClosedByServer.as_str(), "closed_by_server");
    }
}
