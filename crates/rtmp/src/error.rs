//! The one error type of this crate, saying whose fault each failure is.
//!
//! Every variant except [`RtmpError::Closed`] is the peer's fault: the driver logs it
//! with the session id and drops the connection. None of them is recoverable within
//! the session, because RTMP has no resynchronisation point in its byte stream.

use sluice_media::amf0::Amf0Error;

/// Why a session cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum RtmpError {
    /// The peer's bytes do not follow the RTMP chunk or message format.
    #[error("malformed {what}")]
    Malformed {
        /// Which structure was broken.
        what: &'static str,
    },
    /// The peer announced something larger than we accept (a bounded resource).
    #[error("{what} of {len} exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The size the peer asked for.
        len: usize,
        /// Our limit.
        limit: usize,
    },
    /// A well-formed message that the session's state does not allow.
    #[error("{got} not allowed in state {state}")]
    Unexpected {
        /// The message or command received.
        got: &'static str,
        /// The state the session was in.
        state: &'static str,
    },
    /// The handshake bytes were wrong (version, or a digest that does not verify).
    #[error("handshake failed: {what}")]
    Handshake {
        /// What was wrong.
        what: &'static str,
    },
    /// A command or data message whose AMF0 body does not decode.
    #[error("bad AMF0 in {what}: {source}")]
    Amf0 {
        /// Which message carried it.
        what: &'static str,
        /// The decoder's reason.
        source: Amf0Error,
    },
    /// Input after the session ended (an earlier error, or a rejected publish/play).
    /// This one is the caller's: the driver should have closed the connection.
    #[error("session is closed")]
    Closed,
}
