//! Sans-IO HTTP/1.1 pieces for the routes Sluice answers itself.
//!
//! Why not only hyper: streaming routes (HTTP-FLV, WebSocket-FLV) hand the socket to
//! the per-worker fan-out after the response head, so that no task is woken per viewer
//! per frame, and file downloads (`files`) `sendfile` their body straight from the page
//! cache. hyper cannot give a socket back after a response has begun, so those routes
//! read the request head here and write their own response head. [`ServerSession`]
//! is one connection's HTTP/1.1 (and WebSocket) in the shape every Sluice session
//! shares.
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
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod dav;
pub mod files;
pub mod flv_client;
mod request;
pub mod response;
mod session;
pub mod ws;

pub use files::percent_decode_utf8;
pub use request::{parse_request, HttpError, Method, Request, MAX_BODY, MAX_HEADERS, MAX_HEAD_LEN};
pub use session::{
    decimal, reason, HttpEvent, ServerConfig, ServerEvent, ServerOutput, ServerSession,
    SessionError, MAX_BUFFERED,
};
pub use sluice_session::{Event, Output, Session, Transmit};
