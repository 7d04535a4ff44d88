//! SRT on a worker's UDP endpoint: its demux (handshakes answered, datagrams routed
//! to connections by destination socket id) and each connection's sends through the
//! endpoint (a run of equal-sized data packets as one GSO message, payloads never
//! copied).
//!
//! What connections answer while one receive batch is handed on (an ACKACK to each
//! player's ACK, retransmissions for its NAK) is held and sent at the batch's end in
//! one call: the ACKs of many players cost one send call, not one each.

use super::conn::{self, Conn};
use super::Shared;
use crate::ctx::Ctx;
use crate::io::endpoint::{Claim, Demux, Endpoint};
use sluice_srt::{wire, DataOut, Handshake};
use std::cell::{Cell, RefCell};
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
    /// Whether a receive batch is being handed on: then sends are held until its end.
    batching: Cell<bool>,
    /// What is held (empty outside a batch; its room is kept for the next).
    held: RefCell<Vec<Held>>,
}

/// A datagram held for the end of a receive batch.
#[derive(Debug)]
enum Held {
    Control(SocketAddr, Vec<u8>),
    Data(SocketAddr, DataOut),
}

impl Held {
    fn datagram(&self) -> (SocketAddr, [&[u8]; 2]) {
        match self {
            Held::Control(to, c) => (*to, [c.as_slice(), &[]]),
            Held::Data(to, d) => (*to, [d.header.as_slice(), d.payload.as_ref()]),
        }
    }
}

impl Socket {
    /// Sends a connection's datagrams: control packets, then data packets (a run of
    /// equal-sized ones as one GSO message, payloads never copied). What the socket
    /// cannot take now is lost, as UDP may lose it, and SRT sends it again when the
    /// peer reports the loss.
    pub fn send(&self, to: SocketAddr, control: &[Vec<u8>], data: &[DataOut]) {
        if self.batching.get() {
            let mut held = self.held.borrow_mut();
            held.extend(control.iter().map(|c| Held::Control(to, c.clone())));
            held.extend(data.iter().map(|d| Held::Data(to, d.clone())));
            return;
        }
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

impl Socket {
    /// Sends from now on are held until [`Socket::end_batch`].
    fn begin_batch(&self) {
        self.batching.set(true);
    }

    /// Sends what was held, in as few calls as the endpoint can.
    fn end_batch(&self) {
        self.batching.set(false);
        let mut held = self.held.borrow_mut();
        if !held.is_empty() {
            // What the socket cannot take is lost, as in `send`.
            let _ = self.endpoint.send_each(&held, Held::datagram);
            held.clear();
        }
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
            batching: Cell::new(false),
            held: RefCell::default(),
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
        self.sock.begin_batch();
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

    fn batch_done(&mut self) {
        self.sock.end_batch();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::endpoint::Counters;
    use bytes::Bytes;
    use std::net::UdpSocket as Std;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    #[test]
    fn what_a_receive_batch_answers_goes_out_in_one_call_at_its_end() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let counters = Arc::new(Counters::default());
            let bound = Std::bind("127.0.0.1:0").unwrap();
            let sock = Socket {
                endpoint: Endpoint::new(bound, MAX_DATAGRAM, counters.clone()).unwrap(),
                conns: RefCell::default(),
                by_peer: RefCell::default(),
                batching: Cell::new(false),
                held: RefCell::default(),
            };
            // The socket's first readiness, as a running worker has it.
            sock.endpoint.writable().await.unwrap();
            let calls = || counters.send_calls.load(Ordering::Relaxed);
            let peers: Vec<Std> = (0..3).map(|_| Std::bind("127.0.0.1:0").unwrap()).collect();
            let data = DataOut {
                header: [9; wire::HEADER_LEN],
                payload: Bytes::from_static(b"payload"),
            };
            // Three connections answer datagrams of one batch (an ACKACK each, one
            // a retransmission too).
            sock.begin_batch();
            for (i, p) in peers.iter().enumerate() {
                let to = p.local_addr().unwrap();
                let data = if i == 0 { vec![data.clone()] } else { vec![] };
                sock.send(to, &[vec![i as u8; 16]], &data);
            }
            assert_eq!(calls(), 0, "nothing goes before the batch ends");
            sock.end_batch();
            assert_eq!(calls(), 1);
            let mut buf = [0; 64];
            for (i, p) in peers.iter().enumerate() {
                p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let n = p.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &[i as u8; 16]);
            }
            let n = peers[0].recv(&mut buf).unwrap();
            assert_eq!(
                &buf[..n],
                b"\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09\x09payload"
            );
            // Outside a batch a send goes at once.
            sock.send(peers[1].local_addr().unwrap(), &[vec![7; 16]], &[]);
            assert_eq!(calls(), 2);
            let n = peers[1].recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[7; 16]);
        });
    }
}
