//! A worker's WebRTC UDP socket: datagrams to the session of their sender's address;
//! a binding request from an address not seen yet to the answered session its ICE
//! ufrag names, which then starts on this worker. Anything else is dropped unread.

use super::registry::Registry;
use super::session::{self, Sessions};
use crate::ctx::Ctx;
use crate::io::udp_send;
use sluice_webrtc::outbound::{Datagrams, StreamPacket};
use sluice_webrtc::stun;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::ops::Range;

use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
pub use udp_send::bind_shared as bind_sockets;

/// Largest datagram read; WebRTC keeps packets under the path MTU.
const MAX_DATAGRAM: usize = 2048;

/// A worker's WebRTC socket and what batched sends reuse.
#[derive(Debug)]
pub struct Socket {
    pub sock: UdpSocket,
    scratch: RefCell<udp_send::Scratch>,
    /// Whether the kernel takes UDP GSO (off after its first refusal).
    gso: Cell<bool>,
    history: RefCell<History>,
}

/// A stream packet as the history keeps it for retransmission.
#[derive(Debug)]
pub struct Kept {
    pub timestamp: u32,
    pub marker: bool,
    pub payload: Box<[u8]>,
}

/// The video packets this worker's viewers were sent lately, by their identity in the
/// stream's RTP form (SSRC, sequence number): one copy per worker, from which NACKs
/// of every viewer are answered. Two generations, the newer started every
/// [`HISTORY_SPAN`]: a packet stays between one and two spans, and memory is bounded
/// by what the worker's streams send in that time.
#[derive(Debug, Default)]
struct History {
    new: HashMap<(u32, u16), Kept, PacketHash>,
    old: HashMap<(u32, u16), Kept, PacketHash>,
    since: Option<Instant>,
}

/// How long each generation of the history spans: a few round trips.
const HISTORY_SPAN: Duration = Duration::from_millis(500);

/// A multiplicative hash for packet identities: keys come from our own streams, not
/// from peers, and a lookup runs per packet and viewer.
#[derive(Debug, Default, Clone, Copy)]
struct PacketHash;

impl std::hash::BuildHasher for PacketHash {
    type Hasher = PacketHasher;
    fn build_hasher(&self) -> PacketHasher {
        PacketHasher(0)
    }
}

#[derive(Debug)]
struct PacketHasher(u64);

impl std::hash::Hasher for PacketHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)) ^ (self.0 >> 56);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = self.0 << 16 | u64::from(n);
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = self.0 << 32 | u64::from(n);
    }
}

impl Socket {
    /// Keeps a stream video packet for retransmission, once per worker.
    pub fn remember(
        &self,
        packet: StreamPacket,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        now: Instant,
    ) {
        let mut h = self.history.borrow_mut();
        let key = (packet.ssrc, packet.seq);
        // Every viewer of the worker passes each packet by: most find it kept.
        if h.new.contains_key(&key) {
            return;
        }
        match h.since {
            Some(since) if now.duration_since(since) < HISTORY_SPAN => {}
            _ => {
                h.old = std::mem::take(&mut h.new);
                h.since = Some(now);
            }
        }
        if h.old.contains_key(&key) {
            return;
        }
        h.new.entry(key).or_insert_with(|| Kept {
            timestamp,
            marker,
            payload: payload.into(),
        });
    }

    /// Calls `with` on a kept packet, if it is still kept.
    pub fn recall(&self, packet: StreamPacket, with: impl FnOnce(&Kept)) {
        let h = self.history.borrow();
        let key = (packet.ssrc, packet.seq);
        if let Some(kept) = h.new.get(&key).or_else(|| h.old.get(&key)) {
            with(kept);
        }
    }

    /// Sends `datagrams` with as few system calls as the kernel allows: one
    /// `sendmmsg`, runs of equal-sized datagrams to one peer (a frame's packets) as
    /// one GSO message. What the socket has no room for is dropped, as UDP may drop
    /// it; the peers recover (NACK, keyframe requests).
    pub fn send_all(&self, datagrams: &Datagrams) {
        let all = datagrams.entries();
        let mut scratch = self.scratch.borrow_mut();
        let mut at = 0;
        while at < all.len() {
            let gso = self.gso.get();
            let rest = all.get(at..).unwrap_or_default();
            let mut msgs = scratch.messages();
            for r in runs(rest, gso) {
                let group = rest.get(r).unwrap_or_default();
                let Some((dest, first)) = group.first() else {
                    continue;
                };
                let segment = (group.len() > 1).then_some(first.len() as u16);
                msgs.push(
                    *dest,
                    group.iter().map(|(_, r)| datagrams.bytes(r)),
                    segment,
                );
            }
            let sent = self.sock.try_io(tokio::io::Interest::WRITABLE, || {
                msgs.send(self.sock.as_fd())
            });
            match sent {
                Ok(0) => return,
                // The runs again, not kept: a send allocates nothing.
                Ok(n) => at += runs(rest, gso).take(n).map(|r| r.len()).sum::<usize>(),
                Err(e) if gso && udp_send::is_gso_refused(&e) => {
                    tracing::info!("webrtc: the kernel refuses UDP GSO ({e}); sending without");
                    self.gso.set(false);
                }
                // Full, or trouble on the path: the rest is lost, as UDP may lose it.
                Err(_) => return,
            }
        }
    }
}

/// Runs of `datagrams` that can go as one message: with `gso`, consecutive ones to
/// one destination, all of one size but a shorter last, within the kernel's limits.
fn runs(
    datagrams: &[(SocketAddr, Range<usize>)],
    gso: bool,
) -> impl Iterator<Item = Range<usize>> + '_ {
    udp_send::gso_runs(datagrams, gso, |(dest, r)| (*dest, r.len()))
}

/// Drops answered sessions whose ICE never started (one worker runs it).
pub async fn sweep(registry: Arc<Registry>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let gone = registry.sweep(Instant::now());
        if gone > 0 {
            tracing::info!(
                gone,
                "webrtc: answered sessions that never started ICE dropped"
            );
        }
    }
}

/// Serves this worker's socket until the worker stops.
pub async fn serve(ctx: Rc<Ctx>, registry: Arc<Registry>, socket: StdUdpSocket) {
    let sock = match UdpSocket::from_std(socket) {
        Ok(sock) => Rc::new(Socket {
            sock,
            scratch: RefCell::default(),
            gso: Cell::new(true),
            history: RefCell::default(),
        }),
        Err(e) => return tracing::error!("webrtc: cannot register the UDP socket: {e}"),
    };
    let sessions: Sessions = Rc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, from) = match sock.sock.recv_from(&mut buf).await {
            Ok(r) => r,
            // An ICMP error from an earlier send (a viewer gone): nothing to read.
            Err(_) => continue,
        };
        let datagram = buf.get(..n).unwrap_or_default();
        let known = sessions.borrow().get(&from).cloned();
        let session = match known {
            Some(s) => s,
            None => {
                let Some((ours, _)) = stun::binding_username(datagram) else {
                    continue;
                };
                let Some(pending) = registry.take(ours) else {
                    continue;
                };
                let link = session::Link::Udp(sock.clone());
                let s = session::start(&ctx, link, &registry, pending, from, Some(&sessions));
                sessions.borrow_mut().insert(from, s.clone());
                s
            }
        };
        session.receive(from, datagram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(port: u16, len: usize) -> (SocketAddr, Range<usize>) {
        (SocketAddr::from(([127, 0, 0, 1], port)), 0..len)
    }

    #[test]
    fn a_frame_to_one_peer_is_one_run_and_peers_are_apart() {
        // Two viewers' packets of one frame: 3 full and a short last, then 2.
        let all = [
            d(1, 1200),
            d(1, 1200),
            d(1, 1200),
            d(1, 700),
            d(2, 1200),
            d(2, 300),
        ];
        let found: Vec<_> = runs(&all, true).collect();
        assert_eq!(found, [0..4, 4..6]);
        // A longer datagram after a shorter one starts a new run; so does no GSO.
        let odd = [d(1, 300), d(1, 1200), d(1, 1200)];
        assert_eq!(runs(&odd, true).collect::<Vec<_>>(), [0..1, 1..3]);
        assert_eq!(runs(&all, false).count(), all.len());
    }

    #[test]
    fn runs_stay_within_the_kernels_limits() {
        let many: Vec<_> = (0..150).map(|_| d(1, 1000)).collect();
        let runs: Vec<_> = runs(&many, true).collect();
        assert!(runs.iter().all(|r| r.len() <= udp_send::MAX_SEGMENTS));
        assert!(runs.iter().all(|r| r.len() * 1000 <= udp_send::MAX_MESSAGE));
        assert_eq!(runs.iter().map(|r| r.len()).sum::<usize>(), 150);
    }
}
