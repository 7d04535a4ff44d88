//! The one shape of every protocol session in Sluice (RTMP, RTSP, HTTP; later WebRTC,
//! SRT, and the client sides that relays use), so that one driver in the server runs
//! any of them over any transport.
//!
//! A session is sans-IO: it never touches a socket, a timer or the clock. Its driver
//! feeds it what arrived, with the time, and drains what it has to say:
//!
//! ```text
//!                  ┌───────────────────────────── Session ──────────────────────────────┐
//!  socket bytes ──▶│ handle_input(now, Input::Stream | Input::Datagram)                 │
//!  timer fired  ──▶│ handle_timeout(now)                                                │
//!                  │                                                                    │
//!                  │ poll_output() ─┬─▶ Output::Transmit(bytes [, to]) ──▶ socket       │
//!                  │                └─▶ Output::Event(Event) ──▶ adapter ──▶ hub        │
//!                  │ poll_timeout() ───▶ when to call handle_timeout next               │
//!                  └────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! # Contract
//! - After every `handle_*` call, and after every answer the adapter gives the
//!   session, the driver drains `poll_output` until `None`, in order: a transmit
//!   queued before an event goes out before anything the event causes.
//! - `poll_timeout` is a value, not a timer: the driver re-reads it after each drain.
//! - Errors from `handle_input` are final for the session and for it only; the session
//!   may still have transmits queued (an error answer), which the driver sends.
//!
//! Events share one vocabulary ([`Event`]): a request to publish or play a stream,
//! media, a stop, and anything else the protocol reports ([`Event::Other`]); the
//! adapter answers requests through the session's own methods (accept or reject).
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

use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::time::Instant;

/// What arrived for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    /// Bytes of a connection (TCP, TLS), in order, cut anywhere.
    Stream(&'a [u8]),
    /// One datagram (UDP, DTLS, SRT), from `from`.
    Datagram {
        /// Who sent it.
        from: SocketAddr,
        /// Its payload.
        data: &'a [u8],
    },
}

/// Bytes a session wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to: `None` on the session's connection; a peer address for datagrams.
    pub to: Option<SocketAddr>,
    /// What to send, whole (a datagram is never split).
    pub data: Bytes,
}

impl Transmit {
    /// Bytes for the session's connection.
    pub fn stream(data: Bytes) -> Transmit {
        Transmit { to: None, data }
    }
}

/// What a session asks of its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Output<E> {
    /// Bytes to send, in order.
    Transmit(Transmit),
    /// Something the application must act on.
    Event(E),
}

/// A stream a peer asks for: `app/name` and what came with it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamRequest {
    /// The application (`live`), without a query.
    pub app: String,
    /// The stream name within the app (`cam1`; may contain `/`), without a query.
    pub name: String,
    /// The query (`token=abc`), without `?`, empty if none; kept for authorization.
    pub query: String,
    /// The user the protocol authenticated, if it did.
    pub user: Option<String>,
}

impl StreamRequest {
    /// The hub's key of the stream: `app/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.app, self.name)
    }
}

/// The events of every session, in one vocabulary. `M` is the protocol's media (FLV
/// tag bodies, RTP packets, TS packets), `P` what else it reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<M, P> {
    /// The peer asks to publish a stream. Answer through the session (accept or
    /// reject) before draining further.
    Publish(StreamRequest),
    /// The peer asks to play a stream. Answer through the session.
    Play(StreamRequest),
    /// Media from a publishing peer.
    Media(M),
    /// The peer stopped publishing or playing; the session itself goes on.
    Stop,
    /// The session is over (the peer said goodbye, or timed out). Final.
    Close,
    /// Anything else the protocol reports.
    Other(P),
}

/// A protocol session state machine (see the crate's contract).
pub trait Session {
    /// What the session reports; usually [`Event`] with the protocol's types.
    type Event;
    /// Why the session cannot go on.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Feeds what arrived at `now`.
    fn handle_input(&mut self, now: Instant, input: Input<'_>) -> Result<(), Self::Error>;

    /// A buffer a stream transport may read the next input into directly, for a
    /// session that takes a lot of it (a publisher): it saves copying every byte out
    /// of a shared scratch buffer. `None` (the default, and right for a player, which
    /// should hold no buffer while idle) has the driver call `handle_input`.
    fn input_buffer(&mut self) -> Option<&mut BytesMut> {
        None
    }

    /// Bytes were appended to [`Session::input_buffer`] at `now`: take them.
    fn handle_buffered(&mut self, now: Instant) -> Result<(), Self::Error> {
        let _ = now;
        Ok(())
    }

    /// Time has passed: the time [`Session::poll_timeout`] named has come, or a driver
    /// that arms its timers lazily wakes the session early (it must check the time and
    /// do nothing before its deadline).
    fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// The next thing to send or act on; `None` when drained.
    fn poll_output(&mut self) -> Option<Output<Self::Event>>;

    /// When [`Session::handle_timeout`] wants calling, if at all.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Whether the session is over (after an error, a refusal that ends it, or a
    /// timeout): the driver sends what is queued and closes the connection.
    fn is_closed(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_stream() {
        let req = StreamRequest {
            app: "live".into(),
            name: "a/b".into(),
            ..Default::default()
        };
        assert_eq!(req.key(), "live/a/b");
    }
}
