//! SRT on a worker's UDP endpoint: its demux (handshakes answered, datagrams routed
//! to connections by destination socket id) and each connection's sends through the
//! endpoint (a run of equal-sized data packets as one GSO message, payloads never
//! copied).

use super::conn::{self, Conn};
use super::Shared;
use crate::ctx::Ctx;
use crate::io::endpoint::{Claim, Demux, Endpoint};
use sluice_srt::{wire, DataOut, Handshake};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Largest datagram taken; SRT keeps to an MTU of 1500.
pub const MAX_DATAGRAM: usize = 2048;

/// The worker's endpoint and its connections.
#[derive(Debug)]
pub struct Socket {
    endpoint: Rc<Endpoint>,
    /// Connections by our socket id.
    pub conns: RefCell<HashMap<u32, Rc<Conn>>>,
    /// Connections by the caller's address and socket id: a repeated conclusion (its
    /// answer was lost, or the connection's task is still deciding) finds its own.
    pub by_peer: RefCell<HashMap<(SocketAddr, u32), u32>>,
}

impl Socket {
    /// Sends a connection's datagrams: control packets, then data packets (a run of
    /// equal-sized ones as one GSO message, payloads never copied). What the socket
    /// cannot take now is lost, as UDP may lose it, and SRT sends it again when the
    /// peer reports the loss.
    pub fn send(&self, to: SocketAddr, control: &[Vec<u8>], data: &[DataOut]) {
        let _ = self.endpoint.send(control.len() + data.len(), |i| {
            let bytes = match i.checked_sub(control.len()) {
                None => [control.get(i).map_or(&[][..], Vec::as_slice), &[]],
                Some(d) => data.get(d).map_or([&[][..], &[]], |d| {
                    [d.header.as_slice(), d.payload.as_ref()]
                }),
            };
            (to, bytes)
        });
    }
}

/// Seconds since the Unix epoch (the cookies' minute).
fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How this worker's SRT endpoint finds a datagram's connection: by its destination
/// socket id; socket id 0 is a handshake.
#[derive(Debug)]
pub struct SrtDemux {
    ctx: Rc<Ctx>,
    shared: Arc<Shared>,
    sock: Rc<Socket>,
}

impl SrtDemux {
    pub fn new(ctx: &Rc<Ctx>, shared: Arc<Shared>, endpoint: &Rc<Endpoint>) -> SrtDemux {
        let sock = Rc::new(Socket {
            endpoint: endpoint.clone(),
            conns: RefCell::default(),
            by_peer: RefCell::default(),
        });
        SrtDemux {
            ctx: ctx.clone(),
            shared,
            sock,
        }
    }
}

impl Demux for SrtDemux {
    fn receive(&mut self, from: SocketAddr, datagram: &[u8], _: Instant) -> Claim {
        // The connections keep time on the system clock (`Connection`'s timers).
        let Some((control, dest)) = wire::peek(datagram) else {
            return Claim::Dropped;
        };
        if dest != 0 {
            let conn = self.sock.conns.borrow().get(&dest).cloned();
            // Unknown socket ids (a connection gone, a stranger) are dropped unread.
            return match conn.filter(|c| c.peer == from) {
                Some(c) => {
                    c.receive(datagram);
                    Claim::Taken
                }
                None => Claim::Dropped,
            };
        }
        if !control {
            return Claim::Dropped;
        }
        handshake(&self.ctx, &self.shared, &self.sock, datagram, from);
        Claim::Taken
    }
}

/// A datagram for socket id 0: a caller's induction or conclusion.
fn handshake(
    ctx: &Rc<Ctx>,
    shared: &Arc<Shared>,
    sock: &Rc<Socket>,
    datagram: &[u8],
    from: SocketAddr,
) {
    // A repeated conclusion of a connection made already: it answers itself.
    if let Some(peer_id) = sluice_srt::accept::conclusion_from(datagram) {
        let ours = sock.by_peer.borrow().get(&(from, peer_id)).copied();
        if let Some(ours) = ours {
            if let Some(c) = sock.conns.borrow().get(&ours).cloned() {
                c.repeat_response();
            }
            return;
        }
    }
    let socket_id = loop {
        let id = rand::random::<u32>() & 0x3fff_ffff;
        if id != 0 && !sock.conns.borrow().contains_key(&id) {
            break id;
        }
    };
    let isn = rand::random::<u32>() & wire::SEQ_MASK;
    match shared
        .acceptor
        .handle(datagram, from, unix_secs(), socket_id, isn)
    {
        Ok(Handshake::Reply(bytes)) => sock.send(from, &[bytes], &[]),
        Ok(Handshake::Refused(bytes, reason)) => {
            tracing::debug!(peer = %from, %reason, "srt: handshake refused");
            sock.send(from, &[bytes], &[]);
        }
        Ok(Handshake::Conclusion(c)) => {
            conn::start(ctx, shared, sock, c, from, Instant::now());
        }
        Err(e) => tracing::debug!(peer = %from, "srt: not a handshake: {e}"),
    }
}
