//! RTMP player: plain handshake, `connect`, `createStream`, `play`, then media.
//!
//! Commands are encoded with `sluice_rtmp`; incoming chunks go through
//! `crate::scan::ChunkScanner`, which reassembles only control and command messages.
//! The player answers what servers expect of a client (acknowledgements at the
//! server's window, ping responses, `_result` to server requests) and nothing else.

use super::{Conn, Ctx, Failure};
use crate::figures::{ms, ErrorKind, PlayerRow};
use crate::scan::{ChunkEvent, ChunkScanner, ScanError};
use crate::target::Target;
use bytes::BytesMut;
use rand::Rng;
use sluice_media::amf0::{self, Amf0Value};
use sluice_rtmp::command::{self, Command};
use sluice_rtmp::handshake::{ClientHandshake, RANDOM_LEN};
use sluice_rtmp::message::{Message, UserControl};
use sluice_rtmp::{write_message_chunks, CSID_COMMAND, CSID_CONTROL, CSID_STREAM};
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// Our outgoing chunk size: our messages are small, so the default.
const CHUNK_SIZE: usize = 128;
const TID_CONNECT: f64 = 1.0;
const TID_CREATE_STREAM: f64 = 2.0;
/// Buffer length announced before `play`, as ffmpeg does.
const BUFFER_MS: u32 = 3000;

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    ExpectConnectResult,
    ExpectCreateStreamResult,
    ExpectPlayStart,
    Playing,
}

/// The session's state between reads.
struct Session<'a> {
    phase: Phase,
    stream: &'a str,
    stream_id: u32,
    out: BytesMut,
    ack_window: u64,
    received: u64,
    acked: u64,
    failure: Option<Failure>,
    start: Instant,
}

impl Session<'_> {
    fn send(&mut self, csid: u32, stream_id: u32, msg: &Message) {
        let mut body = BytesMut::new();
        msg.encode(&mut body);
        write_message_chunks(
            &mut self.out,
            csid,
            0,
            msg.msg_type(),
            stream_id,
            &body,
            CHUNK_SIZE,
        );
    }

    fn command(&mut self, csid: u32, stream_id: u32, cmd: &Command) {
        let mut body = BytesMut::new();
        cmd.encode(&mut body);
        write_message_chunks(&mut self.out, csid, 0, 20, stream_id, &body, CHUNK_SIZE);
    }

    fn fail(&mut self, kind: ErrorKind, what: String) {
        self.failure.get_or_insert((kind, what));
    }

    fn on_event(
        &mut self,
        ev: ChunkEvent<'_>,
        now: Instant,
        row: &mut PlayerRow,
        live: &super::Live,
    ) {
        let (msg_type, body) = match ev {
            ChunkEvent::Media(m) => {
                row.on_media(&m, now, self.start);
                return;
            }
            ChunkEvent::Message { msg_type, body, .. } => (msg_type, body),
        };
        let u32_at = |i: usize| {
            body.get(i..i + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        match msg_type {
            5 => {
                if let Some(w) = u32_at(0) {
                    self.ack_window = u64::from(w);
                }
            }
            // Ping request (event 6): answer with its timestamp.
            4 if body.get(..2) == Some(&[0, 6]) => {
                if let Some(t) = u32_at(2) {
                    self.send(
                        CSID_CONTROL,
                        0,
                        &Message::UserControl(UserControl::PingResponse(t)),
                    );
                }
            }
            17 | 20 => {
                // AMF3 commands start with one format byte, then AMF0 values.
                let body = if msg_type == 17 {
                    body.get(1..).unwrap_or_default()
                } else {
                    body
                };
                match amf0::decode_all(body)
                    .map_err(|e| e.to_string())
                    .and_then(|v| Command::from_values(v).map_err(|e| e.to_string()))
                {
                    Ok(cmd) => self.on_command(&cmd, now, row, live),
                    Err(e) => self.fail(ErrorKind::Protocol, format!("bad command: {e}")),
                }
            }
            _ => {}
        }
    }

    fn on_command(&mut self, cmd: &Command, now: Instant, row: &mut PlayerRow, live: &super::Live) {
        let field = |k: &str| cmd.status_field(k).unwrap_or("").to_owned();
        match (cmd.name.as_str(), self.phase) {
            ("_result", Phase::ExpectConnectResult) if cmd.transaction_id == TID_CONNECT => {
                self.command(CSID_COMMAND, 0, &command::create_stream(TID_CREATE_STREAM));
                self.phase = Phase::ExpectCreateStreamResult;
            }
            ("_result", Phase::ExpectCreateStreamResult)
                if cmd.transaction_id == TID_CREATE_STREAM =>
            {
                let id = cmd.args.first().and_then(Amf0Value::as_f64).unwrap_or(1.0);
                if !(0.0..=f64::from(u32::MAX)).contains(&id) {
                    self.fail(ErrorKind::Protocol, format!("createStream result {id}"));
                    return;
                }
                self.stream_id = id as u32;
                self.send(
                    CSID_CONTROL,
                    0,
                    &Message::UserControl(UserControl::SetBufferLength {
                        stream_id: self.stream_id,
                        buffer_ms: BUFFER_MS,
                    }),
                );
                let play = command::play(0.0, self.stream);
                self.command(CSID_STREAM, self.stream_id, &play);
                self.phase = Phase::ExpectPlayStart;
            }
            ("_error", _) => {
                self.fail(
                    ErrorKind::Protocol,
                    format!("refused: {} {}", field("code"), field("description")),
                );
            }
            ("onStatus", _) => {
                let code = field("code");
                if field("level") == "error" {
                    self.fail(
                        ErrorKind::Protocol,
                        format!("refused: {code} {}", field("description")),
                    );
                } else if code == "NetStream.Play.Start" && self.phase == Phase::ExpectPlayStart {
                    self.phase = Phase::Playing;
                    row.connect_ms = Some(ms(now - self.start));
                    live.connected.fetch_add(1, Ordering::Relaxed);
                }
            }
            (name, _) if !name.starts_with('_') && cmd.transaction_id != 0.0 => {
                // A request from the server (_checkbw and the like): answer it.
                let tid = cmd.transaction_id;
                self.command(CSID_COMMAND, 0, &command::result(tid, Amf0Value::Undefined));
            }
            _ => {}
        }
    }

    /// Queues an acknowledgement when the server's window is used up.
    fn maybe_ack(&mut self) {
        if self.ack_window > 0 && self.received - self.acked >= self.ack_window {
            self.acked = self.received;
            let sequence = self.received as u32;
            self.send(CSID_CONTROL, 0, &Message::Acknowledgement { sequence });
        }
    }
}

/// Plays until the run ends.
pub(crate) async fn play(ctx: &Ctx, row: &mut PlayerRow) -> Result<(), Failure> {
    let Target::Rtmp {
        addr,
        app,
        stream,
        tc_url,
    } = &ctx.target
    else {
        unreachable!("dispatched on Target::Rtmp");
    };
    let start = Instant::now();
    let slow = row.slow.then_some(ctx.slow_rate);
    let Some(mut conn) = Conn::open(*addr, slow, ctx.end, None).await? else {
        return Ok(());
    };
    let mut s = Session {
        phase: Phase::ExpectConnectResult,
        stream,
        stream_id: 0,
        out: BytesMut::with_capacity(4096),
        ack_window: 0,
        received: 0,
        acked: 0,
        failure: None,
        start,
    };
    let mut random = [0u8; RANDOM_LEN];
    rand::rng().fill(&mut random[..]);
    let mut handshake = ClientHandshake::new(&random, None, &mut s.out);
    if !conn.write(&s.out).await? {
        return Ok(());
    }
    s.out.clear();
    let mut input = BytesMut::with_capacity(2 * 1536 + 1);
    loop {
        let read = conn
            .read(&ctx.live, |data, _| {
                row.bytes += data.len() as u64;
                input.extend_from_slice(data);
            })
            .await?;
        if read.is_none() {
            return Ok(());
        }
        let done = handshake
            .read(&mut input, &mut s.out)
            .map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
        if done {
            break;
        }
    }
    s.received = row.bytes;
    let mut body = BytesMut::new();
    command::connect(TID_CONNECT, app, tc_url).encode(&mut body);
    write_message_chunks(&mut s.out, CSID_COMMAND, 0, 20, 0, &body, CHUNK_SIZE);
    let mut scanner = ChunkScanner::new();
    let mut feed = |s: &mut Session<'_>, data: &[u8], now: Instant, row: &mut PlayerRow| {
        scanner
            .feed(data, &mut |ev| s.on_event(ev, now, row, &ctx.live))
            .map_err(|e| match e {
                ScanError::Closed => (ErrorKind::Closed, e.to_string()),
                ScanError::Malformed(_) => (ErrorKind::Protocol, e.to_string()),
            })
    };
    // Bytes the server sent after S2, if any.
    feed(&mut s, &input, Instant::now(), row)?;
    drop(input);
    loop {
        if let Some(f) = s.failure.take() {
            return Err(f);
        }
        if !s.out.is_empty() {
            if !conn.write(&s.out).await? {
                return Ok(());
            }
            s.out.clear();
        }
        let step = conn
            .read(&ctx.live, |data, now| {
                row.bytes += data.len() as u64;
                s.received += data.len() as u64;
                let r = feed(&mut s, data, now, row);
                s.maybe_ack();
                r
            })
            .await?;
        match step {
            None => return Ok(()),
            Some(r) => r?,
        }
        if !conn.pace(row).await {
            return Ok(());
        }
    }
}
