//! SRT (Secure Reliable Transport) for Sluice, sans-IO: bytes and time in, datagrams
//! and payloads out; no sockets, no clock.
//!
//! - [`accept`]: the listener's handshake, stateless until a caller echoes its SYN
//!   cookie; the HSv5 exchange, latency and key material are srt-runtime's machine.
//! - [`call`]: the caller's handshake (relays, the bench's players and publishers),
//!   resent on a timer until answered; it ends in the same [`Conclusion`] as the
//!   listener's.
//! - [`stream_id`]: what a caller asks for (`#!::r=app/stream,m=publish`,
//!   `publish:app/stream`, `read:app/stream`).
//! - [`connection`]: an established connection: [`recv`] (order, loss reports, ACKs,
//!   too-late drop), [`send`] (numbering, retransmission, pacing, sender-side drop),
//!   keep-alive, idle timeout, shutdown, and [`keys`] (AES-CTR, key refresh).
//! - [`wire`]: the data header, on every media packet, read and written here.
//!
//! What srt-runtime brings: packet codecs for control packets, the handshake state
//! machines, cookies, the key wrap and the AES-CTR primitives. What is ours and why
//! is in each module's documentation.
//!

pub mod accept;
pub mod call;
pub mod connection;
mod control;
pub mod keys;
pub mod recv;
pub mod send;
pub mod stream_id;
pub mod wire;

pub use accept::{AcceptError, Acceptor, Conclusion, Handshake, ListenConfig};
pub use call::{CallConfig, CallError, CallSeed, Caller};
pub use connection::{Closed, Connection, DatagramError};
pub use send::DataOut;
pub use stream_id::{Mode, StreamId, StreamIdError};

/// The usual payload: seven MPEG-TS packets, what libsrt's live mode and ffmpeg send.
pub const PAYLOAD_LEN: usize = 1316;

/// Rejection codes an application gives (`SRT_REJX_*`: 1000 + 400 + an HTTP status),
/// which libsrt callers report by name.
pub mod reject {
    pub const BAD_REQUEST: u32 = 1400;
    pub const UNAUTHORIZED: u32 = 1401;
    pub const FORBIDDEN: u32 = 1403;
    pub const NOT_FOUND: u32 = 1404;
    pub const CONFLICT: u32 = 1409;
    pub const INTERNAL: u32 = 1500;
    pub const UNAVAILABLE: u32 = 1503;
}
