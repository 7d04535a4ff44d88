//! RTP and RTCP over UDP for RTSP: one pair of sockets per worker, shared by all of
//! that worker's UDP sessions.
//!
//! Why shared sockets: a UDP player costs no socket and no port of its own, and all
//! packets of a frame (and of every frame since the last merge window) leave in one
//! `sendmmsg` call, addressed per player. Publishers sending to us are told this
//! worker's ports, so their packets reach the worker that owns their session; they
//! are routed by source address, and packets from addresses no session announced are
//! dropped.
//!
//! A player's media arrives here as the same interleaved bytes an RTSP/TCP player
//! gets (`$`, channel, length, packet): the packets are sent from inside that shared
//! buffer, the 4-byte headers skipped, so nothing is copied per player.

use crate::io::sock::{Ready, Sock, Transport};
use crate::io::udp_send::{self, Message};
use bytes::Bytes;
use sluice_rtsp::PortPair;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::ops::Range;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::Instant;
use tokio::io::Interest;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;

/// Largest datagram we take (RTP over UDP stays under the path MTU; jumbo frames
/// fit): bigger ones are truncated by the kernel and fail to depacketize. With
/// `UDP_QUEUE` in the RTSP driver it bounds what one publisher can queue.
const MAX_DATAGRAM: usize = 9216;
/// Most packets per `sendmmsg`.
const MAX_BATCH: usize = 64;
/// Kernel send buffer of the shared RTP socket: it carries every UDP player of the
/// worker, a merge window's worth of media each (about 55 KB at 2 Mbit/s and 200 ms).
/// Past `net.core.wmem_max` only a privileged process gets it (SO_SNDBUFFORCE).
const SEND_BUFFER: usize = 32 << 20;
/// Receive buffer: bursts of several publishers' keyframes.
const RECV_BUFFER: usize = 4 << 20;
/// Attempts at a kernel-chosen even/odd port pair.
const PAIR_ATTEMPTS: usize = 64;

/// A packet for a publisher's session: its SDP track and the RTP packet.
pub type Inbound = (usize, Bytes);

/// One worker's RTP/RTCP sockets.
#[derive(Debug)]
pub struct RtpUdp {
    rtp: UdpSocket,
    rtcp: UdpSocket,
    /// Our ports, for `server_port=`.
    pub ports: PortPair,
    routes: RefCell<HashMap<SocketAddr, Route>>,
    /// When each UDP player's RTCP port last sent us a report: it is alive.
    heard: RefCell<HashMap<SocketAddr, Rc<Cell<Instant>>>>,
    /// Whether to send frames as GSO messages (off once the kernel refused one).
    gso: Cell<bool>,
    /// Datagrams from addresses no session announced.
    pub unknown: Cell<u64>,
    /// Datagrams dropped because their session's queue was full.
    pub overflow: Cell<u64>,
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

/// Binds an RTP socket on an even port and RTCP on the next, within `range`
/// (`(0, 0)`: ports the kernel chooses).
pub fn bind_pair(ip: IpAddr, range: (u16, u16)) -> io::Result<(StdUdpSocket, StdUdpSocket)> {
    let bind = |port: u16| StdUdpSocket::bind(SocketAddr::new(ip, port));
    if range == (0, 0) {
        for _ in 0..PAIR_ATTEMPTS {
            let rtp = bind(0)?;
            let port = rtp.local_addr()?.port();
            if port & 1 == 0 && port < u16::MAX {
                if let Ok(rtcp) = bind(port + 1) {
                    return Ok((rtp, rtcp));
                }
            }
        }
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "no free even/odd UDP port pair",
        ));
    }
    let (first, last) = range;
    let mut port = first;
    while port < last {
        if let (Ok(rtp), Ok(rtcp)) = (bind(port), bind(port + 1)) {
            return Ok((rtp, rtcp));
        }
        port = port.saturating_add(2);
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no free UDP port pair in {first}-{last}"),
    ))
}

impl RtpUdp {
    /// Takes over a bound pair; must run on the worker's runtime.
    pub fn new(rtp: StdUdpSocket, rtcp: StdUdpSocket) -> io::Result<Rc<RtpUdp>> {
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
            rtp: UdpSocket::from_std(rtp)?,
            rtcp: UdpSocket::from_std(rtcp)?,
            ports,
            routes: RefCell::new(HashMap::new()),
            heard: RefCell::new(HashMap::new()),
            gso: Cell::new(true),
            unknown: Cell::new(0),
            overflow: Cell::new(0),
        });
        tokio::task::spawn_local(udp.clone().receive_rtp());
        tokio::task::spawn_local(udp.clone().receive_rtcp());
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
            .or_insert_with(|| Rc::new(Cell::new(Instant::now())))
            .clone();
        cell.set(Instant::now());
        HeardGuard {
            udp: self.clone(),
            from,
            cell,
        }
    }

    async fn receive_rtp(self: Rc<Self>) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (n, from) = match self.rtp.recv_from(&mut buf).await {
                Ok(r) => r,
                // ICMP port unreachable from a player gone away, say: not fatal.
                Err(e) => {
                    tracing::debug!("rtp socket: {e}");
                    continue;
                }
            };
            let routes = self.routes.borrow();
            let Some(route) = routes.get(&from) else {
                self.unknown.set(self.unknown.get() + 1);
                continue;
            };
            let packet = Bytes::copy_from_slice(&buf[..n]);
            if route.tx.try_send((route.track, packet)).is_err() {
                self.overflow.set(self.overflow.get() + 1);
            }
        }
    }

    /// Receiver reports from players keep their sessions alive; their contents, and
    /// publishers' sender reports, are not used yet.
    async fn receive_rtcp(self: Rc<Self>) {
        let mut buf = vec![0u8; 2048];
        loop {
            match self.rtcp.recv_from(&mut buf).await {
                Ok((_, from)) => {
                    if let Some(cell) = self.heard.borrow().get(&from) {
                        cell.set(Instant::now());
                    }
                }
                Err(e) => tracing::debug!("rtcp socket: {e}"),
            }
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
        let mut total = 0usize;
        let mut batch = Batch::default();
        for (i, buf) in bufs.iter().enumerate() {
            if buf.is_empty() {
                continue;
            }
            let answer = (i == 0 && self.control_partial.get()) || buf[0] != b'$';
            if answer {
                // Everything before it goes first.
                let (sent, done) = self.flush(&mut batch)?;
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
            let mut rest: &[u8] = buf;
            while let Some((channel, packet, len)) = next_interleaved(rest) {
                let (chunk, tail) = rest.split_at(len);
                rest = tail;
                let Some(dest) = self.dest.get(usize::from(channel)).copied().flatten() else {
                    // A channel this player did not set up: nothing to send.
                    batch.skip(chunk.len());
                    continue;
                };
                if channel % 2 == 1 {
                    // RTCP (a sender report every few seconds) leaves from the RTCP port.
                    let (sent, done) = self.flush(&mut batch)?;
                    total += sent;
                    if !done {
                        return finish(total);
                    }
                    // A report that cannot go now (a full socket, say) is dropped: the
                    // next comes in seconds, and waiting here could only wait on the
                    // wrong socket.
                    let _ = self.udp.rtcp.try_send_to(packet, dest);
                    total += chunk.len();
                    continue;
                }
                if batch.len() >= self.batch {
                    let (sent, done) = self.flush(&mut batch)?;
                    total += sent;
                    if !done {
                        return finish(total);
                    }
                }
                batch.push(packet, chunk.len(), dest);
            }
            // A malformed tail (never made by our packetizer) is dropped, not retried.
            batch.skip(rest.len());
        }
        let (sent, _) = self.flush(&mut batch)?;
        finish(total + sent)
    }

    /// Sends the batch; returns the bytes consumed and whether all of it went.
    ///
    /// Consecutive packets to one player, all full-sized but the last (the packets of
    /// one video frame), go as one GSO message when the kernel takes them.
    fn flush(&self, batch: &mut Batch<'_>) -> io::Result<(usize, bool)> {
        let skipped = std::mem::take(&mut batch.skipped);
        if batch.packets.is_empty() {
            return Ok((skipped, true));
        }
        self.blocked_on_control.set(false);
        let iovs: Vec<IoSlice<'_>> = batch.packets.iter().map(|p| IoSlice::new(p)).collect();
        let groups = group(
            &batch.packets,
            &batch.dests,
            self.udp.gso.get() && self.batch > 1,
        );
        let msgs: Vec<Message<'_>> = groups
            .iter()
            .map(|g| Message {
                dest: batch.dests[g.start],
                iov: &iovs[g.clone()],
                segment: (g.len() > 1).then(|| batch.packets[g.start].len() as u16),
            })
            .collect();
        let sent = match self.send(&msgs) {
            Err(e) if is_gso_refused(&e) && msgs.iter().any(|m| m.segment.is_some()) => {
                tracing::info!("RTP over UDP: the kernel refuses UDP GSO ({e}); sending without");
                self.udp.gso.set(false);
                let ungrouped = group(&batch.packets, &batch.dests, false);
                let msgs: Vec<Message<'_>> = ungrouped
                    .iter()
                    .map(|g| Message {
                        dest: batch.dests[g.start],
                        iov: &iovs[g.clone()],
                        segment: None,
                    })
                    .collect();
                let sent = match self.send(&msgs) {
                    Ok(n) => n,
                    Err(e) => {
                        // Not GSO's fault after all (a bad destination): keep it on.
                        self.udp.gso.set(true);
                        return Err(e);
                    }
                };
                let bytes: usize = batch.lens[..sent].iter().sum();
                let done = sent == batch.packets.len();
                batch.clear();
                return Ok((bytes + skipped, done));
            }
            other => other?,
        };
        let packets: usize = groups[..sent].iter().map(|g| g.len()).sum();
        let bytes: usize = batch.lens[..packets].iter().sum();
        let done = packets == batch.packets.len();
        batch.clear();
        Ok((bytes + skipped, done))
    }

    /// One `sendmmsg`; 0 when the socket is full.
    fn send(&self, msgs: &[Message<'_>]) -> io::Result<usize> {
        match self.udp.rtp.try_io(Interest::WRITABLE, || {
            udp_send::send(self.udp.rtp.as_fd(), msgs)
        }) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            // Passing trouble on the path (a firewall's verdict, no route, no kernel
            // buffers): these packets are lost, as UDP may lose them; the player goes on.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::ENOBUFS | libc::ENETUNREACH | libc::EHOSTUNREACH)
                ) =>
            {
                Ok(msgs.len())
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

/// Runs of packets that can go as one message each: the same destination, every
/// packet but the run's last as long as the first, within the kernel's limits.
fn group(packets: &[&[u8]], dests: &[SocketAddr], gso: bool) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < packets.len() {
        let size = packets[i].len();
        let mut total = size;
        let mut j = i + 1;
        while gso
            && j < packets.len()
            && j - i < udp_send::MAX_SEGMENTS
            && dests[j] == dests[i]
            && packets[j - 1].len() == size
            && packets[j].len() <= size
            && total + packets[j].len() <= udp_send::MAX_MESSAGE
        {
            total += packets[j].len();
            j += 1;
        }
        groups.push(i..j);
        i = j;
    }
    groups
}

/// Errors of a kernel or route without UDP GSO.
fn is_gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP)
    )
}

fn finish(total: usize) -> io::Result<usize> {
    if total == 0 {
        Err(io::ErrorKind::WouldBlock.into())
    } else {
        Ok(total)
    }
}

/// The first interleaved frame of `buf`: channel, packet, and length with its header.
fn next_interleaved(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    if buf.len() < 4 || buf[0] != b'$' {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
    let packet = buf.get(4..4 + len)?;
    Some((buf[1], packet, 4 + len))
}

#[derive(Default)]
struct Batch<'a> {
    packets: Vec<&'a [u8]>,
    lens: Vec<usize>,
    dests: Vec<SocketAddr>,
    /// Bytes consumed without sending (channels not set up).
    skipped: usize,
}

impl<'a> Batch<'a> {
    fn len(&self) -> usize {
        self.packets.len()
    }

    /// Bytes consumed without sending: they count with the packet before them, so a
    /// partial send never ends inside them.
    fn skip(&mut self, len: usize) {
        match self.lens.last_mut() {
            Some(last) => *last += len,
            None => self.skipped += len,
        }
    }

    fn push(&mut self, packet: &'a [u8], len: usize, dest: SocketAddr) {
        self.packets.push(packet);
        self.lens.push(len);
        self.dests.push(dest);
    }

    fn clear(&mut self) {
        self.packets.clear();
        self.lens.clear();
        self.dests.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn frames_group_into_gso_runs() {
        let a = [0u8; 1200];
        let b = [0u8; 300];
        let c = [0u8; 50];
        let x: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let y: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        // A frame of three full packets and a short one to x, then audio to x, then y.
        let packets: Vec<&[u8]> = vec![&a, &a, &a, &b, &c, &a, &a];
        let dests = [x, x, x, x, x, y, y];
        assert_eq!(group(&packets, &dests, true), [0..4, 4..5, 5..7]);
        assert_eq!(group(&packets, &dests, false).len(), 7);
        // A short packet ends a run even when more full ones follow.
        let packets: Vec<&[u8]> = vec![&a, &b, &a];
        assert_eq!(group(&packets, &[x, x, x], true), [0..2, 2..3]);
        // Never more than the kernel's segment limit.
        let many: Vec<&[u8]> = vec![&c; 100];
        let groups = group(&many, &[x; 100], true);
        assert_eq!(groups, [0..64, 64..100]);
    }

    #[test]
    fn pairs_are_even_then_odd() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let (rtp, rtcp) = bind_pair(ip, (0, 0)).unwrap();
        let p = rtp.local_addr().unwrap().port();
        assert_eq!(p % 2, 0);
        assert_eq!(rtcp.local_addr().unwrap().port(), p + 1);
        // The same range again skips the pair in use.
        let (rtp2, _) = bind_pair(ip, (p, p.saturating_add(10))).unwrap();
        assert_ne!(rtp2.local_addr().unwrap().port(), p);
    }
}
