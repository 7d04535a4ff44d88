//! WebRTC on a worker's UDP endpoint: its demux (datagrams to the session of their
//! sender's address; a binding request from an address not seen yet to the answered
//! session its ICE ufrag names, which then starts on this worker, or to the running
//! session of this worker whose ICE restart (a PATCH) gave that ufrag; anything else
//! dropped unread), its sends, and the worker's NACK history.

use super::registry::Registry;
use super::session::{self, Sessions};
use crate::ctx::Ctx;
use crate::io::endpoint::{Claim, Demux, Endpoint};
use crate::io::udp_send;
use sluice_webrtc::outbound::{Datagrams, StreamPacket};
use sluice_webrtc::stun;
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use udp_send::bind_shared as bind_sockets;

/// Largest datagram taken; WebRTC keeps packets under the path MTU.
pub const MAX_DATAGRAM: usize = 2048;

/// A worker's WebRTC endpoint and the packets kept for its viewers' NACKs.
#[derive(Debug)]
pub struct Socket {
    endpoint: Rc<Endpoint>,
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

    /// Sends `datagrams` through the endpoint (a frame's packets to one peer as one
    /// GSO message). What the socket has no room for is dropped, as UDP may drop it;
    /// the peers recover (NACK, keyframe requests).
    pub fn send_all(&self, datagrams: &Datagrams) {
        let _ = self.endpoint.send_each(datagrams.entries(), |(dest, r)| {
            (*dest, [datagrams.bytes(r), &[]])
        });
    }
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

/// How this worker's WebRTC endpoint finds a datagram's session.
#[derive(Debug)]
pub struct WebrtcDemux {
    ctx: Rc<Ctx>,
    registry: Arc<Registry>,
    sock: Rc<Socket>,
    sessions: Sessions,
}

impl WebrtcDemux {
    pub fn new(ctx: &Rc<Ctx>, registry: Arc<Registry>, endpoint: &Rc<Endpoint>) -> WebrtcDemux {
        WebrtcDemux {
            ctx: ctx.clone(),
            registry,
            sock: Rc::new(Socket {
                endpoint: endpoint.clone(),
                history: RefCell::default(),
            }),
            sessions: Sessions::default(),
        }
    }
}

impl Demux for WebrtcDemux {
    fn receive(&mut self, from: SocketAddr, datagram: &[u8], _: Instant) -> Claim {
        let known = self.sessions.borrow().get(&from).cloned();
        let session = match known {
            Some(s) => s,
            None => {
                let Some((ours, _)) = stun::binding_username(datagram) else {
                    return Claim::Dropped;
                };
                if let Some(id) = self.registry.restarting(ours) {
                    // An ICE restart's check from a new address: its session's, if
                    // that runs on this worker (the kernel may hand the new address
                    // to another worker's socket, where the check is dropped).
                    let found = self
                        .sessions
                        .borrow()
                        .values()
                        .find(|s| s.id() == id)
                        .cloned();
                    let Some(s) = found.filter(|s| s.reached_at(from)) else {
                        tracing::debug!(id, %from, "webrtc: a restart's check on another worker");
                        return Claim::Dropped;
                    };
                    self.sessions.borrow_mut().insert(from, s.clone());
                    s.receive(from, datagram);
                    return Claim::Taken;
                }
                let Some(pending) = self.registry.take(ours) else {
                    return Claim::Dropped;
                };
                let link = session::Link::Udp(self.sock.clone());
                let s = session::start(
                    &self.ctx,
                    link,
                    &self.registry,
                    pending,
                    from,
                    Some(&self.sessions),
                );
                self.sessions.borrow_mut().insert(from, s.clone());
                s
            }
        };
        session.receive(from, datagram);
        Claim::Taken
    }
}
