//! RTP and RTCP over UDP for RTSP: one pair of sockets per worker, shared by all of
//! that worker's UDP sessions.
//!
//! Why shared sockets: a UDP player costs no socket and no port of its own, and all
//! packets of a frame (and of every frame since the last merge window) leave in one
//! `sendmmsg` call, addressed per player. Publishers sending to us are told this
//! worker's ports, so their packets reach the worker that owns their session; they
//! are routed by source address (the demux of the RTP socket's `io::endpoint`), and
//! packets from addresses no session announced are dropped.
//!
//! A player's media arrives here as the same interleaved bytes an RTSP/TCP player
//! gets (`$`, channel, length, packet): the packets are sent from inside that shared
//! buffer, the 4-byte headers skipped, so nothing is copied per player. Nor is
//! anything allocated per player: a write gathers its packets in the worker's
//! [`Batch`], and the endpoint its `sendmmsg` headers, both reused by every write.

use crate::io::endpoint::{Claim, Counters, Demux, Endpoint};
use crate::io::sock::{Ready, Sock, Transport};
use bytes::Bytes;
use sluice_media::rtp::next_interleaved;
use sluice_rtsp::PortPair;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Largest datagram we take (RTP over UDP stays under the path MTU; jumbo frames
/// fit): the endpoint drops and counts bigger ones. With
/// `UDP_QUEUE` in the RTSP driver it bounds what one publisher can queue.
const MAX_DATAGRAM: usize = 9216;
/// Largest RTCP packet taken: reports are small.
const MAX_RTCP: usize = 2048;
/// Most packets per `sendmmsg`.
const MAX_BATCH: usize = 64;
/// Kernel send buffer of the shared RTP socket: it carries every UDP player of the
/// worker, a merge window's worth of media each (about 55 KB at 2 Mbit/s and 200 ms).
/// Past `net.core.wmem_max` only a privileged process gets it (SO_SNDBUFFORCE).
const SEND_BUFFER: usize = 32 << 20;
/// Receive buffer: bursts of several publishers' keyframes.
const RECV_BUFFER: usize = 4 << 20;

/// A packet for a publisher's session: its SDP track and the RTP packet.
pub type Inbound = (usize, Bytes);

/// One worker's RTP/RTCP endpoints.
#[derive(Debug)]
pub struct RtpUdp {
    rtp: Rc<Endpoint>,
    rtcp: Rc<Endpoint>,
    /// Our ports, for `server_port=`.
    pub ports: PortPair,
    routes: RefCell<HashMap<SocketAddr, Route>>,
    /// When each UDP player's RTCP port last sent us a report: it is alive.
    heard: RefCell<HashMap<SocketAddr, Rc<Cell<Instant>>>>,
    /// Datagrams dropped because their session's queue was full.
    pub overflow: Cell<u64>,
    /// What every write of the worker's UDP players gathers its packets in, kept
    /// between writes: bounded by [`MAX_BATCH`] packets, as a batch is sent when full.
    batch: RefCell<Batch>,
}

#[derive(Debug)]
struct Route {
    track: usize,
    tx: mpsc::Sender<Inbound>,
    /// The session that set it up.
    owner: u64,
}

/// Removes a route when dropped.
#[derive(Debug)]
pub struct RouteGuard {
    udp: Rc<RtpUdp>,
    from: SocketAddr,
    owner: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut routes = self.udp.routes.borrow_mut();
        if routes
            .get(&self.from)
            .is_some_and(|r| r.owner == self.owner)
        {
            routes.remove(&self.from);
        }
    }
}

/// Stops noting a player's reports when dropped.
#[derive(Debug)]
pub struct HeardGuard {
    udp: Rc<RtpUdp>,
    from: SocketAddr,
    cell: Rc<Cell<Instant>>,
}

impl HeardGuard {
    /// When the player last sent a report (or began listening).
    pub fn last(&self) -> Instant {
        self.cell.get()
    }
}

impl Drop for HeardGuard {
    fn drop(&mut self) {
        let mut heard = self.udp.heard.borrow_mut();
        // Players at the same address share one cell; the last one out removes it.
        if heard
            .get(&self.from)
            .is_some_and(|c| Rc::ptr_eq(c, &self.cell) && Rc::strong_count(c) == 2)
        {
            heard.remove(&self.from);
        }
    }
}

impl RtpUdp {
    /// Takes over a bound pair, counting its datagrams in `counters`; must run on
    /// the worker's runtime.
    pub fn new(
        rtp: StdUdpSocket,
        rtcp: StdUdpSocket,
        counters: Arc<Counters>,
    ) -> io::Result<Rc<RtpUdp>> {
        let ports = PortPair {
            rtp: rtp.local_addr()?.port(),
            rtcp: rtcp.local_addr()?.port(),
        };
        for s in [&rtp, &rtcp] {
            s.set_nonblocking(true)?;
            if rustix::net::sockopt::set_socket_send_buffer_size_force(s, SEND_BUFFER).is_err() {
                let _ = socket2::SockRef::from(s).set_send_buffer_size(SEND_BUFFER);
            }
            if rustix::net::sockopt::set_socket_recv_buffer_size_force(s, RECV_BUFFER).is_err() {
                let _ = socket2::SockRef::from(s).set_recv_buffer_size(RECV_BUFFER);
            }
        }
        let sndbuf = socket2::SockRef::from(&rtp).send_buffer_size().unwrap_or(0);
        if sndbuf < SEND_BUFFER {
            tracing::info!(
                sndbuf,
                "RTP over UDP: small send buffer (raise net.core.wmem_max for many UDP players)"
            );
        }
        let udp = Rc::new(RtpUdp {
            rtp: Endpoint::new(rtp, MAX_DATAGRAM, counters.clone())?,
            rtcp: Endpoint::new(rtcp, MAX_RTCP, counters)?,
            ports,
            routes: RefCell::new(HashMap::new()),
            heard: RefCell::new(HashMap::new()),
            overflow: Cell::new(0),
            batch: RefCell::default(),
        });
        tokio::task::spawn_local(udp.rtp.clone().serve(RtpDemux(udp.clone())));
        tokio::task::spawn_local(udp.rtcp.clone().serve(RtcpDemux(udp.clone())));
        Ok(udp)
    }

    /// Sends packets arriving from `from` to `tx` as SDP track `track`, until the
    /// guard is dropped.
    /// `None` when another session takes packets from `from` already: a second
    /// publisher claiming the same address and port must not take over the first
    /// one's stream.
    pub fn route(
        self: &Rc<Self>,
        from: SocketAddr,
        track: usize,
        tx: mpsc::Sender<Inbound>,
        owner: u64,
    ) -> Option<RouteGuard> {
        let mut routes = self.routes.borrow_mut();
        if routes.contains_key(&from) {
            return None;
        }
        routes.insert(from, Route { track, tx, owner });
        Some(RouteGuard {
            udp: self.clone(),
            from,
            owner,
        })
    }

    /// Notes the time of every RTCP packet from `from` until the guard is dropped.
    pub fn listen(self: &Rc<Self>, from: SocketAddr) -> HeardGuard {
        let cell = self
            .heard
            .borrow_mut()
            .entry(from)
            .or_insert_with(|| Rc::new(Cell::new(crate::driver::now())))
            .clone();
        cell.set(crate::driver::now());
        HeardGuard {
            udp: self.clone(),
            from,
            cell,
        }
    }
}

/// RTP from publishers: to the session that announced its source address.
#[derive(Debug)]
struct RtpDemux(Rc<RtpUdp>);

impl Demux for RtpDemux {
    fn receive(&mut self, from: SocketAddr, datagram: &[u8], _: Instant) -> Claim {
        let udp = &self.0;
        let routes = udp.routes.borrow();
        let Some(route) = routes.get(&from) else {
            return Claim::Dropped;
        };
        let packet = Bytes::copy_from_slice(datagram);
        if route.tx.try_send((route.track, packet)).is_err() {
            udp.overflow.set(udp.overflow.get() + 1);
        }
        Claim::Taken
    }
}

/// Receiver reports from players keep their sessions alive; their contents, and
/// publishers' sender reports, are not used yet.
#[derive(Debug)]
struct RtcpDemux(Rc<RtpUdp>);

impl Demux for RtcpDemux {
    fn receive(&mut self, from: SocketAddr, _: &[u8], now: Instant) -> Claim {
        match self.0.heard.borrow().get(&from) {
            Some(cell) => {
                cell.set(now);
                Claim::Taken
            }
            None => Claim::Dropped,
        }
    }
}

/// An RTSP player over UDP: media to its ports through the worker's sockets, RTSP
/// answers on its TCP connection.
#[derive(Debug)]
pub struct UdpOut {
    control: Rc<Sock>,
    udp: Rc<RtpUdp>,
    /// By interleaved channel: video RTP, video RTCP, audio RTP, audio RTCP.
    dest: [Option<SocketAddr>; 4],
    /// The last write stopped inside an answer: the next buffer continues it.
    control_partial: Cell<bool>,
    /// The last write stopped on the TCP connection rather than on UDP.
    blocked_on_control: Cell<bool>,
    /// Packets per `sendmmsg` (1 without batching, see `rtsp.batch`).
    batch: usize,
}

impl UdpOut {
    pub fn new(
        control: Rc<Sock>,
        udp: Rc<RtpUdp>,
        dest: [Option<SocketAddr>; 4],
        batch: bool,
    ) -> Self {
        UdpOut {
            control,
            udp,
            dest,
            control_partial: Cell::new(false),
            blocked_on_control: Cell::new(false),
            batch: if batch { MAX_BATCH } else { 1 },
        }
    }

    /// Where this player's RTCP reports come from (its video or audio RTCP port).
    pub fn rtcp_sources(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        [1, 3].into_iter().filter_map(|ch| self.dest[ch])
    }

    pub fn udp(&self) -> &Rc<RtpUdp> {
        &self.udp
    }

    /// Writes answers (buffers not starting with `$`) to the TCP connection and the
    /// packets inside interleaved buffers as datagrams; returns the bytes of whole
    /// answers-or-packets consumed, in order.
    fn write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // Writes do not nest: a write never waits, and sends nothing through another player.
        let mut batch = self.udp.batch.borrow_mut();
        let batch = &mut *batch;
        batch.clear();
        let mut total = 0usize;
        for (i, buf) in bufs.iter().enumerate() {
            if buf.is_empty() {
                continue;
            }
            let answer = (i == 0 && self.control_partial.get()) || buf[0] != b'$';
            if answer {
                // Everything before it goes first.
                let (sent, done) = self.flush(bufs, batch)?;
                total += sent;
                if !done {
                    return finish(total);
                }
                match self.control.try_write_vectored(&[IoSlice::new(buf)]) {
                    Ok(n) => {
                        total += n;
                        self.control_partial.set(n < buf.len());
                        if n < buf.len() {
                            self.blocked_on_control.set(true);
                            return Ok(total);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.blocked_on_control.set(true);
                        return finish(total);
                    }
                    Err(e) => return Err(e),
                }
                continue;
            }
            let mut at = 0;
            while let Some((channel, packet, len)) = buf.get(at..).and_then(next_interleaved) {
                let packet_at = at + 4..at + 4 + packet.len();
                at += len;
                let Some(dest) = self.dest.get(usize::from(channel)).copied().flatten() else {
                    // A channel this player did not set up: nothing to send.
                    batch.skip(len);
                    continue;
                };
                if channel % 2 == 1 {
                    // RTCP (a sender report every few seconds) leaves from the RTCP port.
                    let (sent, done) = self.flush(bufs, batch)?;
                    total += sent;
                    if !done {
                        return finish(total);
                    }
                    // A report that cannot go now (a full socket, say) is dropped: the
                    // next comes in seconds, and waiting here could only wait on the
                    // wrong socket.
                    let _ = self.udp.rtcp.send_to(packet, dest);
                    total += len;
                    continue;
                }
                if batch.packets.len() >= self.batch {
                    let (sent, done) = self.flush(bufs, batch)?;
                    total += sent;
                    if !done {
                        return finish(total);
                    }
                }
                batch.packets.push(Queued {
                    buf: i,
                    at: packet_at,
                    len,
                    dest,
                });
            }
            // A malformed tail (never made by our packetizer) is dropped, not retried.
            batch.skip(buf.len().saturating_sub(at));
        }
        let (sent, _) = self.flush(bufs, batch)?;
        finish(total + sent)
    }

    /// Sends the batch (packets of `bufs`); returns the bytes consumed and whether all
    /// of it went.
    ///
    /// Consecutive packets to one player, all full-sized but the last (the packets of
    /// one video frame), go as one GSO message when the kernel takes them.
    fn flush(&self, bufs: &[IoSlice<'_>], batch: &mut Batch) -> io::Result<(usize, bool)> {
        let skipped = std::mem::take(&mut batch.skipped);
        if batch.packets.is_empty() {
            return Ok((skipped, true));
        }
        self.blocked_on_control.set(false);
        let packets = self.send(bufs, &batch.packets)?;
        let bytes: usize = batch.packets.iter().take(packets).map(|q| q.len).sum();
        let done = packets == batch.packets.len();
        batch.packets.clear();
        Ok((bytes + skipped, done))
    }

    /// `packets` (of `bufs`) through the worker's RTP endpoint; returns how many went,
    /// 0 when the socket is full.
    fn send(&self, bufs: &[IoSlice<'_>], packets: &[Queued]) -> io::Result<usize> {
        let sent = self
            .udp
            .rtp
            .send_each(packets, |q| (q.dest, [q.bytes(bufs), &[]]));
        match sent {
            Ok(n) => Ok(n),
            // Passing trouble on the path (a firewall's verdict, no route, no kernel
            // buffers): these packets are lost, as UDP may lose them; the player goes on.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::ENOBUFS | libc::ENETUNREACH | libc::EHOSTUNREACH)
                ) =>
            {
                Ok(packets.len())
            }
            Err(e) => Err(e),
        }
    }
}

impl Transport for UdpOut {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.control.try_read(buf)
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored(bufs)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(self.control.readable())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(async {
            if self.blocked_on_control.get() {
                self.control.writable().await
            } else {
                self.udp.rtp.writable().await
            }
        })
    }

    fn tcp(&self) -> Option<&TcpStream> {
        self.control.tcp()
    }
}

fn finish(total: usize) -> io::Result<usize> {
    if total == 0 {
        Err(io::ErrorKind::WouldBlock.into())
    } else {
        Ok(total)
    }
}

/// Packets gathered for one `sendmmsg`, by where they lie in the write's buffers.
#[derive(Debug, Default)]
struct Batch {
    packets: Vec<Queued>,
    /// Bytes consumed without sending (channels not set up).
    skipped: usize,
}

/// One RTP packet of a write.
#[derive(Debug)]
struct Queued {
    /// Its buffer among the write's, and its bytes there (the interleave header left out).
    buf: usize,
    at: Range<usize>,
    /// The bytes sending it consumes: with its interleave header, and any skipped after it.
    len: usize,
    dest: SocketAddr,
}

impl Queued {
    fn bytes<'a>(&self, bufs: &'a [IoSlice<'_>]) -> &'a [u8] {
        bufs.get(self.buf)
            .and_then(|b| b.get(self.at.clone()))
            .unwrap_or_default()
    }
}

impl Batch {
    /// Bytes consumed without sending: they count with the packet before them, so a
    /// partial send never ends inside them.
    fn skip(&mut self, len: usize) {
        match self.packets.last_mut() {
            Some(last) => last.len += len,
            None => self.skipped += len,
        }
    }

    fn clear(&mut self) {
        self.packets.clear();
        self.skipped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn interleaved_frames_are_split_without_copying() {
        let buf = [b'$', 0, 0, 3, 1, 2, 3, b'$', 3, 0, 1, 9];
        let (ch, p, len) = next_interleaved(&buf).unwrap();
        assert_eq!((ch, p, len), (0, &[1u8, 2, 3][..], 7));
        let (ch, p, len) = next_interleaved(&buf[7..]).unwrap();
        assert_eq!((ch, p, len), (3, &[9u8][..], 5));
        assert!(next_interleaved(&[b'$', 0, 0, 9, 1]).is_none(), "truncated");
        assert!(next_interleaved(b"RTSP/1.0").is_none());
    }

    /// A control connection that takes nothing: the test sends no answers.
    #[derive(Debug)]
    struct NoControl;

    impl Transport for NoControl {
        fn try_read(&self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }

        fn try_write_vectored(&self, _: &[IoSlice<'_>]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }

        fn readable(&self) -> Ready<'_> {
            Box::pin(std::future::pending())
        }

        fn writable(&self) -> Ready<'_> {
            Box::pin(std::future::pending())
        }
    }

    #[test]
    fn a_write_allocates_nothing_once_the_scratch_is_warm() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let ip = IpAddr::from([127, 0, 0, 1]);
            let (rtp, rtcp) = crate::io::udp_pair::bind_pair(ip, (0, 0)).unwrap();
            let udp = RtpUdp::new(rtp, rtcp, Arc::default()).unwrap();
            let player = StdUdpSocket::bind((ip, 0)).unwrap();
            let dest = [Some(player.local_addr().unwrap()), None, None, None];
            let out = UdpOut::new(Rc::new(Sock::new(NoControl)), udp.clone(), dest, true);
            // A video frame of three packets, then audio on a channel not set up.
            let mut frame = Vec::new();
            for len in [1200u16, 1200, 300] {
                frame.extend_from_slice(&[b'$', 0]);
                frame.extend_from_slice(&len.to_be_bytes());
                frame.resize(frame.len() + usize::from(len), 7);
            }
            let audio = [b'$', 2, 0, 2, 1, 2];
            let bufs = [IoSlice::new(&frame), IoSlice::new(&audio)];
            let all = frame.len() + audio.len();
            udp.rtp.writable().await.unwrap();
            assert_eq!(out.write_vectored(&bufs).unwrap(), all);
            let before = crate::test_alloc::allocations();
            let written = out.write_vectored(&bufs);
            let allocations = crate::test_alloc::allocations() - before;
            assert_eq!(written.unwrap(), all);
            assert_eq!(allocations, 0);
            player
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 2048];
            let sizes: Vec<usize> = (0..6).map(|_| player.recv(&mut buf).unwrap()).collect();
            assert_eq!(sizes, [1200, 1200, 300, 1200, 1200, 300]);
        });
    }
}
