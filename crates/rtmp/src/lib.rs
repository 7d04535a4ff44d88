//! Sans-IO RTMP: handshake, chunk stream, messages, commands, and the server and
//! client session state machines.
//!
//! Bytes in, outputs polled: nothing here touches a socket, a timer or the clock
//! (only the handshake's random block comes from the OS generator, and tests can pass
//! their own). The server's driver feeds [`ServerSession`] and writes its outputs;
//! shared media for players is chunked once per frame with [`write_message_chunks`]
//! on [`CSID_AUDIO`]/[`CSID_VIDEO`]/[`CSID_DATA`], message stream [`MEDIA_STREAM_ID`].
//!
//! Files, from the wire up: `handshake` (C0C1/S0S1S2/C2), `chunk` (chunks ↔ messages),
//! `message` (typed messages), `command` (AMF0 commands), `cue_point` (`onCuePoint`
//! ad cues), `session` (server),
//! `client` (client, for tests and the load generator), `error`.
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

pub mod chunk;
mod client;
pub mod command;
pub mod cue_point;
mod error;
pub mod handshake;
pub mod message;
mod session;

pub use chunk::{
    write_message_chunks, ChunkReader, ChunkWriter, RawMessage, DEFAULT_MAX_MESSAGE_LEN,
    MAX_CHUNK_SIZE,
};
pub use client::{ClientConfig, ClientEvent, ClientOutput, ClientSession, ClientTimeouts, Waited};
pub use cue_point::{read_cue_point, CuePoint, CuePointError};
pub use error::RtmpError;
pub use session::{
    Media, ServerConfig, ServerEvent, ServerNotice, ServerOutput, ServerSession, CSID_AUDIO,
    CSID_COMMAND, CSID_CONTROL, CSID_DATA, CSID_STREAM, CSID_VIDEO, MEDIA_STREAM_ID,
};
pub use sluice_session::{Event, Input, Output, Session, StreamRequest, Transmit};

/// Message type of audio (an FLV audio tag body).
pub const MSG_AUDIO: u8 = chunk::msg_type::AUDIO;
/// Message type of video (an FLV video tag body).
pub const MSG_VIDEO: u8 = chunk::msg_type::VIDEO;
/// Message type of AMF0 script data (`onMetaData`).
pub const MSG_DATA_AMF0: u8 = chunk::msg_type::DATA_AMF0;
