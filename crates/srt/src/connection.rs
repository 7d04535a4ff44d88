//! One established SRT connection, sans-IO: datagrams and time in; payloads received,
//! datagrams to send and the next deadline out.
//!
//! Both halves run on every connection (SRT is duplex; a publisher's connection just
//! never sends media, a player's never receives any). Keep-alives go out after a
//! second without sending; a peer silent for the idle timeout ends the connection, as
//! does its shutdown.

use crate::accept::Conclusion;
use crate::control::{self, KMREQ};
use crate::keys::Keys;
use crate::recv::{Receiver, RecvStats};
use crate::send::{DataOut, SendStats, Sender, PACE};
use crate::wire::{DataHeader, KeyParity};
use bytes::{Bytes, BytesMut};
use srt_runtime::packet::ControlPacket;
use std::time::{Duration, Instant};

/// A keep-alive goes out after this long without sending anything.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The peer said so (shutdown).
    Shutdown,
    /// Nothing from the peer for the idle timeout.
    Idle,
    /// We closed it.
    Local,
}

/// What `handle_datagram` found wrong (the datagram is dropped, the connection lives).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    #[error("malformed packet: {0}")]
    Malformed(String),
    #[error("encrypted packet on a connection without keys, or with a key it lacks")]
    Key,
    #[error("unencrypted packet on an encrypted connection")]
    Plain,
}

#[derive(Debug)]
pub struct Connection {
    start: Instant,
    peer: u32,
    recv: Receiver,
    send: Sender,
    keys: Option<Keys>,
    control: Vec<Vec<u8>>,
    data: Vec<DataOut>,
    last_recv: Instant,
    last_send: Instant,
    next_burst: Option<Instant>,
    idle: Duration,
    closed: Option<Closed>,
}

impl Connection {
    /// The connection a handshake concluded, on either side, `idle` its peer idle
    /// timeout; a listener's conclusion response is the first thing it sends.
    pub fn accepted(c: Conclusion, idle: Duration, now: Instant) -> Connection {
        let key = c.keys.as_ref().map_or(KeyParity::None, Keys::sending);
        let mut conn = Connection {
            start: now,
            peer: c.peer_socket_id,
            recv: Receiver::new(c.peer_socket_id, c.peer_isn, c.flow_window, c.latency, now),
            send: Sender::new(c.peer_socket_id, c.isn, c.latency, key, c.flow_window),
            keys: c.keys,
            control: Vec::new(),
            data: Vec::new(),
            last_recv: now,
            last_send: now,
            next_burst: None,
            idle,
            closed: None,
        };
        if !c.response.is_empty() {
            conn.control.push(c.response);
        }
        conn
    }

    /// Microseconds since the connection began, as the wire counts them.
    fn ts(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.start).as_micros() as u32
    }

    pub fn peer_socket_id(&self) -> u32 {
        self.peer
    }

    pub fn encrypted(&self) -> bool {
        self.keys.is_some()
    }

    /// One datagram from the peer.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> Result<(), DatagramError> {
        if self.closed.is_some() {
            return Ok(());
        }
        self.last_recv = now;
        let ts = self.ts(now);
        if let Some(h) = DataHeader::read(datagram) {
            let body = datagram.get(crate::wire::HEADER_LEN..).unwrap_or_default();
            let payload = match (&self.keys, h.key) {
                (None, KeyParity::None) => Bytes::copy_from_slice(body),
                (Some(_), KeyParity::None) => return Err(DatagramError::Plain),
                (None, _) => return Err(DatagramError::Key),
                (Some(keys), parity) => {
                    let mut b = BytesMut::from(body);
                    keys.apply(parity, h.seq, &mut b)
                        .map_err(|_| DatagramError::Key)?;
                    b.freeze()
                }
            };
            self.recv.packet(h.seq, h.retransmitted, payload, now, ts);
            self.recv.take_out(&mut self.control);
            return Ok(());
        }
        let packet =
            ControlPacket::parse(datagram).map_err(|e| DatagramError::Malformed(e.to_string()))?;
        match packet {
            ControlPacket::Ack(ack) => {
                self.send.ack(ack.ack_number, &ack.cif, ts);
                self.send.take_out(&mut self.control);
                // It may have opened the peer's window to what waits.
                self.pace(now);
            }
            ControlPacket::AckAck(a) => self.recv.ackack(a.ack_number, now),
            ControlPacket::Nak(nak) => {
                self.send.nak(&nak, ts);
                self.send.take_out(&mut self.control);
                self.pace(now);
            }
            ControlPacket::DropReq(d) => {
                self.recv.dropped(d.first_seq, d.last_seq, now);
            }
            ControlPacket::Shutdown(_) => self.closed = Some(Closed::Shutdown),
            ControlPacket::UserDefined(u) if u.subtype == KMREQ => {
                if let Some(keys) = &mut self.keys {
                    match keys.refresh(u.cif) {
                        Ok(echo) => self.control.push(control::kmrsp(self.peer, ts, &echo)),
                        Err(e) => return Err(DatagramError::Malformed(e.to_string())),
                    }
                }
            }
            // A repeated conclusion is answered by whoever keeps the response;
            // keep-alives only prove the peer lives.
            _ => {}
        }
        Ok(())
    }

    /// Queues payloads to send (each at most 1456 bytes; 1316 is the norm).
    pub fn send(&mut self, now: Instant, payload: &[u8]) {
        let payload = match &self.keys {
            None => Bytes::copy_from_slice(payload),
            Some(keys) => {
                let mut b = BytesMut::from(payload);
                // The key is known to exist: `sending` chose it.
                let _ = keys.apply(keys.sending(), self.send.next_seq(), &mut b);
                b.freeze()
            }
        };
        self.send.push(payload);
        self.pace(now);
    }

    /// Queues a shared payload without copying it (unencrypted connections).
    pub fn send_shared(&mut self, now: Instant, payload: Bytes) {
        if self.keys.is_some() {
            return self.send(now, &payload);
        }
        self.send.push(payload);
        self.pace(now);
    }

    /// Payloads not yet sent for the first time.
    pub fn waiting(&self) -> usize {
        self.send.waiting()
    }

    /// Sends a burst now if the pace allows.
    fn pace(&mut self, now: Instant) {
        if self.next_burst.is_none_or(|at| now >= at) {
            let ts = self.ts(now);
            let before = self.data.len();
            self.send.poll(now, ts, &mut self.data);
            if self.data.len() > before {
                self.last_send = now;
            }
            self.next_burst = self.send.has_more().then_some(now + PACE);
        }
    }

    /// Time passed: acknowledgements, loss reports, pacing, keep-alive, idleness.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if now.saturating_duration_since(self.last_recv) >= self.idle {
            self.closed = Some(Closed::Idle);
            return;
        }
        let ts = self.ts(now);
        self.recv.tick(now, ts);
        self.recv.take_out(&mut self.control);
        self.pace(now);
        if !self.control.is_empty() || !self.data.is_empty() {
            self.last_send = now;
        } else if now.saturating_duration_since(self.last_send) >= KEEPALIVE {
            self.control.push(control::keepalive(self.peer, ts));
            self.last_send = now;
        }
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        [
            Some(self.last_recv + self.idle),
            Some(self.last_send + KEEPALIVE),
            self.next_burst,
            self.recv.next_timeout(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Control datagrams to send, then data packets (header and shared payload).
    pub fn take_transmits(&mut self, control: &mut Vec<Vec<u8>>, data: &mut Vec<DataOut>) {
        control.append(&mut self.control);
        data.append(&mut self.data);
    }

    /// Payloads received, in order.
    pub fn poll_data(&mut self) -> Option<Bytes> {
        self.recv.poll_data()
    }

    /// Ends the connection, telling the peer.
    pub fn close(&mut self, now: Instant) {
        if self.closed.is_none() {
            let ts = self.ts(now);
            self.control.push(control::shutdown(self.peer, ts));
            self.closed = Some(Closed::Local);
        }
    }

    pub fn closed(&self) -> Option<Closed> {
        self.closed
    }

    pub fn recv_stats(&self) -> RecvStats {
        self.recv.stats
    }

    pub fn send_stats(&self) -> SendStats {
        self.send.stats
    }

    /// Round-trip time as the receiving half measured it, else as the peer reports.
    pub fn rtt(&self) -> Duration {
        if self.recv.stats.packets > 0 {
            self.recv.rtt().rtt
        } else {
            self.send.rtt().rtt
        }
    }
}
