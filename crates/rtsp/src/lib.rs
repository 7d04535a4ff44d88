//! Sans-IO RTSP 1.0 (RFC 2326) for Sluice: messages and interleaved frames, the
//! `Transport`/`Range`/`Session`/`RTP-Info` headers, Basic and Digest authentication,
//! the per-connection [`ServerSession`] state machine, and the [`ClientSession`] that
//! plays from or publishes to another server (relays, cameras, `sluice-bench`).
//!
//! Bytes in, outputs polled: nothing here touches a socket, a timer, the clock or an
//! OS random source. Time (`Instant`) and randomness (a seed) are inputs. Media does
//! not pass through the session on the way out: the server writes shared RTP packets
//! to the socket itself, framed with [`interleaved_header`] for TCP players.
//!
//! Files, from the wire up: `message` (requests, responses, `$` frames), `transport`
//! (structured headers), `auth` (Basic/Digest), `session` (the server's request
//! order), `client` (the client's: its session, the reading of its stream, its
//! credentials, `rtsp://` URLs), `error`.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
// Input from the network must never panic: no unwrap, expect or unchecked indexing
// outside tests (a bound that cannot fail says why with `get` or a checked form).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod auth;
mod client;
mod error;
pub mod message;
mod session;
pub mod transport;

pub use auth::{AuthConfig, AuthOutcome, Authenticator};
pub use client::{
    proposed_channels, resolve_control, ClientConfig, ClientEvent, ClientOutput, ClientSession,
    ClientTrack, ClientTransport, Credentials, Refusal, RtspUrl, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_RTSPS_PORT, DEFAULT_RTSP_PORT, MAX_IN_FLIGHT,
};
pub use error::RtspError;
pub use message::{
    encode_interleaved, interleaved_header, FromServer, Headers, Incoming, MessageReader, Method,
    Request, Response, Version, DEFAULT_MAX_BODY_LEN, MAX_HEADERS, MAX_HEAD_LEN,
};
pub use session::{
    AuthPolicy, ServerConfig, ServerEvent, ServerOutput, ServerSession, SetupAnswer, TrackSetup,
    TrackStart, DEFAULT_SESSION_TIMEOUT, MAX_TRACKS,
};
pub use transport::{
    format_clock_time, ChannelPair, ClockRange, LowerTransport, Mode, NptRange, NptTime, PlayRange,
    PortPair, RtpInfo, Scale, SessionHeader, Transport,
};
