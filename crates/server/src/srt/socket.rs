//! A worker's SRT socket: handshakes answered, datagrams routed to connections by
//! destination socket id, and each connection's datagrams sent in one `sendmmsg`
//! (a run of equal-sized data packets as one GSO message, its payloads never copied).

use super::conn::{self, Conn};
use super::Shared;
use crate::ctx::Ctx;
use crate::io::udp_send;
use sluice_srt::{wire, DataOut, Handshake};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

/// Largest datagram read; SRT keeps to an MTU of 1500.
const MAX_DATAGRAM: usize = 2048;

/// The worker's socket and its connections.
#[derive(Debug)]
pub struct Socket {
    sock: UdpSocket,
    scratch: RefCell<udp_send::Scratch>,
    gso: Cell<bool>,
    /// Connections by our socket id.
    pub conns: RefCell<HashMap<u32, Rc<Conn>>>,
    /// Connections by the caller's address and socket id: a repeated conclusion (its
    /// answer was lost, or the connection's task is still deciding) finds its own.
    pub by_peer: RefCell<HashMap<(SocketAddr, u32), u32>>,
}

impl Socket {
    /// Sends a connection's datagrams: control packets, then data packets.
    pub fn send(&self, to: SocketAddr, control: &[Vec<u8>], data: &[DataOut]) {
        let mut scratch = self.scratch.borrow_mut();
        let mut msgs = scratch.messages();
        for c in control.iter().filter(|c| !c.is_empty()) {
            msgs.push(to, [c.as_slice()], None);
        }
        let gso = self.gso.get();
        for r in udp_send::gso_runs(data, gso, |d| (to, wire::HEADER_LEN + d.payload.len())) {
            let run = data.get(r).unwrap_or_default();
            let Some(first) = run.first() else { continue };
            let segment =
                (run.len() > 1).then_some((wire::HEADER_LEN + first.payload.len()) as u16);
            msgs.push(
                to,
                run.iter()
                    .flat_map(|d| [d.header.as_slice(), d.payload.as_ref()]),
                segment,
            );
        }
        // One call: what the socket cannot take now is lost, as UDP may lose it, and
        // SRT sends it again when the peer reports the loss.
        match self.sock.try_io(tokio::io::Interest::WRITABLE, || {
            msgs.send(self.sock.as_fd())
        }) {
            Err(e) if gso && udp_send::is_gso_refused(&e) => {
                tracing::info!("srt: the kernel refuses UDP GSO ({e}); sending without");
                self.gso.set(false);
                drop(scratch);
                self.send(to, control, data);
            }
            _ => {}
        }
    }
}

/// Seconds since the Unix epoch (the cookies' minute).
fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Serves this worker's SRT socket until the worker stops.
pub async fn serve(ctx: Rc<Ctx>, shared: Arc<Shared>, socket: StdUdpSocket) {
    let sock = match UdpSocket::from_std(socket) {
        Ok(sock) => Rc::new(Socket {
            sock,
            scratch: RefCell::default(),
            gso: Cell::new(true),
            conns: RefCell::default(),
            by_peer: RefCell::default(),
        }),
        Err(e) => return tracing::error!("srt: cannot register the UDP socket: {e}"),
    };
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, from) = match sock.sock.recv_from(&mut buf).await {
            Ok(r) => r,
            // An ICMP error from an earlier send (a peer gone): nothing to read.
            Err(_) => continue,
        };
        let datagram = buf.get(..n).unwrap_or_default();
        let Some((control, dest)) = wire::peek(datagram) else {
            continue;
        };
        if dest != 0 {
            let conn = sock.conns.borrow().get(&dest).cloned();
            // Unknown socket ids (a connection gone, a stranger) are dropped unread.
            if let Some(c) = conn.filter(|c| c.peer == from) {
                c.receive(datagram);
            }
            continue;
        }
        if control {
            handshake(&ctx, &shared, &sock, datagram, from);
        }
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
