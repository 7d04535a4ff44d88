//! The client side of one RTSP connection, sans-IO: play a stream from a server or a
//! camera, or publish (record) one to a server.
//!
//! Why: relays pull from IP cameras and push to other servers, and `sluice-bench`
//! plays and publishes by the thousand; all of them need the same dialog (CSeq, the
//! request in flight, the session id and its timeout, keep-alives, answering a 401)
//! and the same reading of a TCP stream that mixes answers with interleaved `$` frames.
//! Media policy (which tracks, what to do with RTP) stays with the caller.
//!
//! # Call contract
//! - [`ClientSession::new`] with a [`ClientConfig`] (from an `rtsp://` URL, credentials
//!   included), a seed from a CSPRNG and the time. Nothing is written until the first
//!   request method is called.
//! - Requests: [`options`](ClientSession::options), [`describe`](ClientSession::describe)
//!   or [`announce`](ClientSession::announce), [`setup`](ClientSession::setup) per track,
//!   [`play`](ClientSession::play) or [`record`](ClientSession::record),
//!   [`pause`](ClientSession::pause), [`teardown`](ClientSession::teardown). One request
//!   of the caller is in flight at a time: the next is asked for after the event that
//!   answers the last ([`ClientEvent::Options`], `Described`, `Announced`, `SetUp`,
//!   `Playing`, `Recording`, `Paused`, or [`ClientEvent::Refused`]). TEARDOWN may go at
//!   any time; keep-alives go by themselves.
//! - Feed every byte read from the socket to [`ClientSession::handle_input`] (frames
//!   come out as [`ClientEvent::Interleaved`] events), or to
//!   [`ClientSession::handle_input_in_place`] (frames are handed to a callback where
//!   they lie in the caller's buffer). Then drain [`ClientSession::poll_output`] to
//!   `None`; do the same after every request method and [`ClientSession::handle_timeout`].
//! - `Write`s go to the socket in order. A publisher's own interleaved RTP goes between
//!   them, never inside one ([`ClientSession::encode_interleaved`] frames a packet).
//! - Arm a timer for [`ClientSession::poll_timeout`] and call
//!   [`ClientSession::handle_timeout`] when it fires: keep-alives (GET_PARAMETER when the
//!   OPTIONS answer lists it, else OPTIONS) go at half the session timeout after the
//!   last request, and a server that does not answer within
//!   [`ClientConfig::response_timeout`] ends the session ([`ClientEvent::Timeout`]).
//! - An `Err` from an input method is final (the server broke framing or answered what
//!   cannot be gone on from): drop the connection. A refusal (a non-2xx answer) is an
//!   event, not an error: the session stays as it was before the request, and the caller
//!   decides (most give up; a relay may retry SETUP over TCP after a 461 to UDP).
//!
//! # Authentication
//! With [`ClientConfig::credentials`] set (from the URL's userinfo, or given), a 401 is
//! answered by sending the same request again, once, with Digest (MD5, `qop=auth` when
//! offered) or else Basic, as the server's `WWW-Authenticate` asks. Later requests carry
//! credentials from the start. A 401 to the retry (or without credentials, or with no
//! challenge we can answer) is a [`Refusal`] that says so.
//!
//! # Invariants
//! - Nothing here panics on server bytes; memory is bounded by the reader's limits, at
//!   most [`MAX_IN_FLIGHT`] requests in flight, [`crate::MAX_TRACKS`] tracks, and what
//!   the caller leaves undrained.
//! - Every answer matches the oldest request in flight by `CSeq`; answers to requests
//!   sent before a TEARDOWN change nothing.
//! - No socket, clock or OS randomness: time and a seed are inputs.

mod credentials;
mod input;
mod session;
mod url;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

pub use session::{ClientSession, MAX_IN_FLIGHT};
pub use url::{Credentials, RtspUrl, DEFAULT_RTSPS_PORT, DEFAULT_RTSP_PORT};

use crate::error::RtspError;
use crate::message::{Method, DEFAULT_MAX_BODY_LEN};
use crate::transport::{ChannelPair, NptRange, PortPair, Transport};

/// Default limit on waiting for an answer ([`ClientConfig::response_timeout`]).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a [`ClientSession`] is configured with.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The presentation URL for requests, without credentials
    /// (`rtsp://cam:554/Streaming/Channels/101?tok=1`).
    pub url: String,
    /// Used when the server answers 401; `None`: a 401 is a refusal.
    pub credentials: Option<Credentials>,
    /// The `User-Agent:` header value (default `Sluice`); empty sends none.
    pub user_agent: String,
    /// Largest answer body accepted (default [`DEFAULT_MAX_BODY_LEN`]).
    pub max_body: usize,
    /// How long an answer may take before [`ClientEvent::Timeout`] ends the session
    /// (default [`DEFAULT_RESPONSE_TIMEOUT`]); `None` waits for ever.
    pub response_timeout: Option<Duration>,
}

impl ClientConfig {
    /// A config for `url`, with the credentials of its userinfo, if any; the URL of
    /// requests is `url` without them.
    pub fn new(url: &str) -> Result<ClientConfig, RtspError> {
        let parsed = RtspUrl::parse(url)?;
        Ok(ClientConfig {
            url: parsed.request_url(),
            credentials: parsed.credentials(),
            user_agent: "Sluice".to_string(),
            max_body: DEFAULT_MAX_BODY_LEN,
            response_timeout: Some(DEFAULT_RESPONSE_TIMEOUT),
        })
    }
}

/// How a track's RTP should flow, as the caller asks in [`ClientSession::setup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientTransport {
    /// `RTP/AVP/TCP` on the RTSP connection; channels `2n` and `2n + 1` are proposed
    /// for the `n`-th track set up (the server may answer others).
    Interleaved,
    /// `RTP/AVP` over UDP to the caller's port pair (bound before SETUP).
    Udp {
        /// Our RTP and RTCP ports.
        client_port: PortPair,
    },
}

/// The interleaved channels proposed for the `n`-th track set up: `2n`, `2n + 1`.
pub fn proposed_channels(n: usize) -> ChannelPair {
    let rtp = u8::try_from(n.saturating_mul(2)).unwrap_or(254);
    ChannelPair {
        rtp,
        rtcp: rtp.saturating_add(1),
    }
}

/// A track that was set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTrack {
    /// The `a=control:` value given to [`ClientSession::setup`].
    pub control: String,
    /// The URL the SETUP went to (the control resolved against the base URL).
    pub url: String,
    /// The transport as answered; where the answer left out our side (channels or
    /// client ports) or had no `Transport` at all, what we asked for.
    pub transport: Transport,
    /// The sequence number of the first packet, from the PLAY answer's `RTP-Info`.
    pub start_seq: Option<u16>,
    /// The RTP timestamp at the start of the range, from `RTP-Info`.
    pub start_rtptime: Option<u32>,
}

/// What the session asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOutput {
    /// Bytes to write to the socket, in order (whole requests or answers).
    Write(Bytes),
    /// Something the application should know or act on.
    Event(ClientEvent),
}

/// Something that happened on the client connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// OPTIONS was answered; the server's `Public` methods (empty without the header).
    Options {
        /// The methods listed.
        public: Vec<Method>,
    },
    /// DESCRIBE was answered: the SDP, and the base URL its controls resolve against
    /// (`Content-Base`, else `Content-Location`, else the request URL).
    Described {
        /// The SDP body.
        sdp: Bytes,
        /// The base URL.
        content_base: String,
    },
    /// ANNOUNCE was accepted: SETUPs (record) may follow.
    Announced,
    /// A SETUP was answered.
    SetUp {
        /// The track's index among those set up (the value [`ClientSession::setup`]
        /// returned).
        track: usize,
        /// The transport as answered (see [`ClientTrack::transport`]); over UDP its
        /// `server_port` is where the server takes or sends RTP.
        transport: Transport,
    },
    /// PLAY was answered: media follows. `RTP-Info` went into [`ClientSession::tracks`].
    Playing {
        /// The answer's `Range`, when it had one that parses.
        range: Option<NptRange>,
    },
    /// RECORD was answered: the caller sends its media.
    Recording,
    /// PAUSE was answered.
    Paused,
    /// TEARDOWN was answered (the session was ended when it was sent).
    TornDown,
    /// An interleaved frame (from [`ClientSession::handle_input`] only).
    Interleaved {
        /// Its channel ([`ClientSession::track_of_channel`] tells the track).
        channel: u8,
        /// The RTP or RTCP packet.
        payload: Bytes,
    },
    /// A request was refused; the session is as it was before it.
    Refused(Refusal),
    /// The server sent a request that we answered 501 Not Implemented (a REDIRECT,
    /// an ANNOUNCE). Keep-alive requests (OPTIONS, GET/SET_PARAMETER) are answered 200
    /// without an event.
    ServerRequest {
        /// The method.
        method: Method,
        /// Its Request-URI.
        uri: String,
    },
    /// No answer to `method` within [`ClientConfig::response_timeout`]. Final.
    Timeout {
        /// The request not answered.
        method: Method,
    },
}

/// A request the server answered with something other than 2xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The request's method.
    pub method: Method,
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// For a 401: the server's `WWW-Authenticate` challenges.
    pub challenges: Vec<String>,
    /// Whether the refused request carried credentials (a 401 then means they are wrong).
    pub sent_credentials: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} answered {} {}",
            self.method, self.status, self.reason
        )?;
        if self.status == 401 {
            if self.sent_credentials {
                f.write_str(": the credentials were refused")?;
            } else if self.challenges.is_empty() {
                f.write_str(": no challenge")?;
            } else {
                write!(f, ": credentials wanted ({})", self.challenges.join(", "))?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// A control URL against a base: absolute as is, empty or `*` the base itself,
/// relative appended after one `/` (as ffmpeg and live555 do; RFC 2326's examples).
pub fn resolve_control(base: &str, control: &str) -> String {
    let base = base.trim_end_matches('/');
    let control = control.trim();
    if control.is_empty() || control == "*" {
        base.to_string()
    } else if control.contains("://") {
        control.to_string()
    } else {
        format!("{base}/{}", control.trim_start_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_resolve() {
        assert_eq!(
            resolve_control("rtsp://h/a/b/", "trackID=1"),
            "rtsp://h/a/b/trackID=1"
        );
        assert_eq!(
            resolve_control("rtsp://h/a/b", "/trackID=1"),
            "rtsp://h/a/b/trackID=1"
        );
        assert_eq!(resolve_control("rtsp://h/a/b/", "*"), "rtsp://h/a/b");
        assert_eq!(resolve_control("rtsp://h/a/b/", ""), "rtsp://h/a/b");
        assert_eq!(
            resolve_control("rtsp://h/a/b/", "rtsp://o/x/1"),
            "rtsp://o/x/1"
        );
    }

    #[test]
    fn config_takes_credentials_out_of_the_url() {
        let c = ClientConfig::new("rtsp://u:p%20w@h:8554/live/s?t=1").expect("valid");
        assert_eq!(c.url, "rtsp://h:8554/live/s?t=1");
        assert_eq!(c.credentials, Some(Credentials::new("u", "p w")));
        assert!(ClientConfig::new("http://h/x").is_err());
    }

    #[test]
    fn refusals_say_what() {
        let mut r = Refusal {
            method: Method::Describe,
            status: 404,
            reason: "Not Found".into(),
            challenges: vec![],
            sent_credentials: false,
        };
        assert_eq!(r.to_string(), "DESCRIBE answered 404 Not Found");
        r.status = 401;
        r.reason = "Unauthorized".into();
        r.challenges = vec!["Basic realm=\"x\"".into()];
        assert_eq!(
            r.to_string(),
            "DESCRIBE answered 401 Unauthorized: credentials wanted (Basic realm=\"x\")"
        );
        r.sent_credentials = true;
        assert!(r.to_string().ends_with("the credentials were refused"));
    }
}
