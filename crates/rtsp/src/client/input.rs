//! The client's reading of its TCP stream: answers, requests of the server, and
//! interleaved `$` frames, in any split.
//!
//! Two ways in, over one buffer and one [`MessageReader`], so they may even be mixed:
//! - [`ClientSession::handle_input`] appends to the session's buffer and splits frames
//!   off it as [`Bytes`] (no copy beyond that append): for callers that keep or forward
//!   packets. The buffer keeps its allocation between calls and reuses it once the
//!   caller has dropped the frames that share it.
//! - [`ClientSession::handle_input_in_place`] hands each frame to a callback as a slice
//!   of the caller's own read buffer, and buffers only what a read cuts in two (a
//!   frame, at most 65,539 bytes, or a message being read): for callers that read
//!   thousands of connections into one shared buffer and keep no media.

use std::time::Instant;

use bytes::Bytes;

use super::{ClientEvent, ClientSession};
use crate::error::RtspError;
use crate::message::{FromServer, INTERLEAVED_MAGIC};

impl ClientSession {
    /// Feeds bytes read from the socket at `now` (any split). Frames become
    /// [`ClientEvent::Interleaved`] events, in order with the others. An `Err` is final.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<(), RtspError> {
        self.check_open()?;
        self.now = self.now.max(now);
        self.input.extend_from_slice(bytes);
        let result = self.read_buffered();
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Feeds bytes read from the socket at `now`, handing each interleaved frame to
    /// `on_frame(channel, packet)` where it lies in `data` (a frame cut by the end of a
    /// read is buffered and handed over when complete).
    ///
    /// Returns how many bytes of `data` were taken. It stops early, right after a
    /// message that raised an event, so that the caller can act on the event (PLAY
    /// answered: get ready for media) before the frames behind it: drain
    /// [`poll_output`](Self::poll_output), then call again with the rest. An `Err` is
    /// final.
    pub fn handle_input_in_place(
        &mut self,
        now: Instant,
        data: &[u8],
        on_frame: &mut impl FnMut(u8, &[u8]),
    ) -> Result<usize, RtspError> {
        self.check_open()?;
        self.now = self.now.max(now);
        let mut rest = data;
        let result = self.scan(&mut rest, on_frame);
        if result.is_err() {
            self.close();
        }
        result.map(|()| data.len() - rest.len())
    }

    /// Reads whole messages and frames off the session's buffer.
    fn read_buffered(&mut self) -> Result<(), RtspError> {
        while let Some(msg) = self.reader.read_from_server(&mut self.input)? {
            match msg {
                FromServer::Interleaved { channel, payload } => {
                    self.event(ClientEvent::Interleaved { channel, payload });
                }
                FromServer::Response(resp) => self.on_response(resp)?,
                FromServer::Request(req) => self.on_server_request(req),
            }
            if self.is_closed() {
                break;
            }
        }
        Ok(())
    }

    /// The in-place reader: frames from `data` where they lie, everything else (and
    /// what a read cuts in two) through the session's buffer. Advances `data` past
    /// what it took.
    fn scan(
        &mut self,
        data: &mut &[u8],
        on_frame: &mut impl FnMut(u8, &[u8]),
    ) -> Result<(), RtspError> {
        loop {
            if !self.input.is_empty() {
                if self.input.first() == Some(&INTERLEAVED_MAGIC) {
                    if !self.finish_frame(data, on_frame) {
                        return Ok(());
                    }
                    continue;
                }
                // A message being read. Messages are rare (the set-up, keep-alive
                // answers): copying what follows into the buffer is fine.
                self.input.extend_from_slice(data);
                let events = self.events;
                let Some(msg) = self.reader.read_from_server(&mut self.input)? else {
                    *data = &[];
                    return Ok(());
                };
                // The message ended within `data` (it was not complete before): what
                // the buffer still holds is `data`'s tail, read in place from here on.
                let left = self.input.len();
                let at = data.len().checked_sub(left).ok_or(RtspError::Malformed {
                    what: "message framing",
                })?;
                *data = data.get(at..).unwrap_or_default();
                self.input = bytes::BytesMut::new();
                match msg {
                    FromServer::Interleaved { channel, payload } => on_frame(channel, &payload),
                    FromServer::Response(resp) => self.on_response(resp)?,
                    FromServer::Request(req) => self.on_server_request(req),
                }
                if self.events != events || self.is_closed() {
                    return Ok(());
                }
                continue;
            }
            let d: &[u8] = data;
            match d {
                [] => return Ok(()),
                [INTERLEAVED_MAGIC, channel, hi, lo, rest @ ..] => {
                    let len = usize::from(u16::from_be_bytes([*hi, *lo]));
                    match rest.get(..len) {
                        Some(packet) => {
                            on_frame(*channel, packet);
                            *data = rest.get(len..).unwrap_or_default();
                        }
                        None => {
                            self.input.extend_from_slice(d);
                            *data = &[];
                            return Ok(());
                        }
                    }
                }
                [INTERLEAVED_MAGIC, ..] => {
                    self.input.extend_from_slice(d);
                    *data = &[];
                    return Ok(());
                }
                [b'\r' | b'\n', rest @ ..] => *data = rest,
                [first, rest @ ..] => {
                    // A message starts; the branch above reads it.
                    self.input.extend_from_slice(&[*first]);
                    *data = rest;
                }
            }
        }
    }

    /// Completes the frame at the front of the buffer from `data`; `false` when `data`
    /// ran out first.
    fn finish_frame(&mut self, data: &mut &[u8], on_frame: &mut impl FnMut(u8, &[u8])) -> bool {
        let take = |input: &mut bytes::BytesMut, data: &mut &[u8], want: usize| {
            let n = want.saturating_sub(input.len()).min(data.len());
            let (head, tail) = data.split_at(n);
            input.extend_from_slice(head);
            *data = tail;
        };
        take(&mut self.input, data, 4);
        let Some(&[_, channel, hi, lo]) = self.input.get(..4) else {
            return false;
        };
        let want = 4 + usize::from(u16::from_be_bytes([hi, lo]));
        take(&mut self.input, data, want);
        if self.input.len() < want {
            return false;
        }
        let frame: Bytes = std::mem::take(&mut self.input).freeze();
        on_frame(channel, frame.get(4..).unwrap_or_default());
        true
    }
}
