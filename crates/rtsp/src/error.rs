//! The one error type of this crate, saying whose fault each failure is.
//!
//! [`RtspError::Malformed`] and [`RtspError::TooLarge`] are the peer's fault and final:
//! RTSP over TCP has no resynchronisation point once framing is lost, so the driver
//! flushes the error response the session queued and drops the connection.
//! [`RtspError::Unexpected`] is the peer's fault too (a frame on a channel it never set
//! up). [`RtspError::NotPending`], [`RtspError::BadAnswer`] and [`RtspError::Closed`]
//! are the caller's: the application answered something that was not asked, or fed a
//! closed session. On the client side, [`RtspError::BadResponse`] is the server's fault
//! and final; [`RtspError::NotNow`] is the caller's (a request the client cannot send
//! in its state) and leaves the session unchanged.

/// Why a message could not be parsed, or a session cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtspError {
    /// The peer's bytes do not follow RTSP message or interleaved framing.
    #[error("malformed {what}")]
    Malformed {
        /// Which structure was broken.
        what: &'static str,
    },
    /// The peer sent more than a bounded resource allows.
    #[error("{what} of {len} exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The size seen or announced (at least this much).
        len: usize,
        /// Our limit.
        limit: usize,
    },
    /// A well-formed input that the session's state does not allow and cannot answer
    /// with an RTSP response (requests are answered with 455 instead).
    #[error("{got} not allowed in state {state}")]
    Unexpected {
        /// What was received.
        got: &'static str,
        /// The state the session was in.
        state: &'static str,
    },
    /// The application called an answer method while no such request was pending.
    /// The caller's fault; the session is unchanged.
    #[error("{answer} called while no {answer} is pending")]
    NotPending {
        /// The answer method called.
        answer: &'static str,
    },
    /// The application's answer does not fit the request (e.g. UDP ports for a client
    /// that asked for TCP interleaving). The caller's fault; the session is unchanged.
    #[error("bad answer: {what}")]
    BadAnswer {
        /// What did not fit.
        what: &'static str,
    },
    /// Input after the session was closed (an earlier error or a timeout).
    #[error("session is closed")]
    Closed,
    /// A server's answer that a client cannot go on from: another `CSeq` than the
    /// request's, a SETUP answer without a session or with another transport than
    /// asked for, a DESCRIBE answer without SDP. Final.
    #[error("bad answer to {method}: {what}")]
    BadResponse {
        /// The method of the request answered.
        method: &'static str,
        /// What was wrong.
        what: String,
    },
    /// The client application asked for a request that cannot be sent in the client
    /// session's state (another request in flight, PLAY before any SETUP). The
    /// caller's fault; the session is unchanged.
    #[error("{request} cannot be sent now: {why}")]
    NotNow {
        /// The request asked for.
        request: &'static str,
        /// Why not.
        why: &'static str,
    },
}
