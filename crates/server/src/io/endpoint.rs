//! A worker's UDP endpoint: the one place datagrams are received and sent, for every
//! datagram protocol (SRT, WebRTC, RTSP's RTP/RTCP).
//!
//! Why one endpoint type: the protocols differ only in how a datagram finds its
//! session (their [`Demux`]); the receive loop, its batching and the send path are
//! the same, written once (as in quinn's `Endpoint`, where `quinn-proto` only routes).
//!
//! Receiving: one `recvmmsg` takes up to [`BATCH`] datagrams into one reusable buffer.
//! Where the kernel accepts `UDP_GRO`, a message may be a train of datagrams of one
//! size from one sender (the last possibly shorter), cut here by the size the kernel
//! reports. Each datagram then goes to the demux, with the batch's time.
//!
//! Sending: [`Endpoint::send`] sends datagrams with one `sendmmsg` per call the
//! socket takes, a run of equal-sized datagrams to one peer as one GSO message, and
//! stops using GSO after the kernel first refuses it.
//!
//! # Invariants
//! - The receive buffer is allocated once: [`BATCH`] slots of the endpoint's largest
//!   datagram (of [`GRO_SLOT`] with GRO). A datagram longer than its slot is dropped
//!   and counted, never handed on cut.
//! - Counters are added once per receive call, not per datagram.
//! - Its socket is unconnected and without `IP_RECVERR`: then no ICMP error is queued
//!   on it, and a batch shorter than [`BATCH`] means the queue is empty (the receive
//!   loop clears the readiness on it).

use super::udp_send::{self, Scratch};
use std::cell::{Cell, RefCell};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Most messages per `recvmmsg`: enough that a busy socket is drained in few calls,
/// few enough that one batch does not keep the worker from its other tasks long.
pub const BATCH: usize = 32;
/// A receive slot with GRO: the largest UDP payload, which a coalesced train never
/// exceeds.
const GRO_SLOT: usize = 1 << 16;
/// `UDP_GRO` (linux/udp.h), as a socket option and as the cmsg with the segment size.
const UDP_GRO: libc::c_int = 104;

/// What a demux did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A session took it, or it started one (a handshake answered counts).
    Taken,
    /// No session is its: dropped unread.
    Dropped,
}

/// How a datagram protocol finds the session of a datagram: by its key (an address,
/// a socket id, an ICE username), or starts one, or drops it. The protocol's state
/// machines stay sans-IO; this is the only part of a protocol the endpoint calls.
pub trait Demux {
    /// A datagram from `from`, received at `now`.
    fn receive(&mut self, from: SocketAddr, datagram: &[u8], now: Instant) -> Claim;

    /// The datagrams of one receive call have all been handed on: what their sessions
    /// answered and the demux held back can go now, together.
    fn batch_done(&mut self) {}
}

/// What an endpoint counts, read by `/metrics`; one per protocol, shared by its
/// workers' endpoints.
#[derive(Debug, Default)]
pub struct Counters {
    /// Datagrams received and handed to the demux (each of a GRO train counts).
    pub datagrams: AtomicU64,
    /// Receive system calls that returned datagrams.
    pub receive_calls: AtomicU64,
    /// Datagrams the demux claimed for no session.
    pub unclaimed: AtomicU64,
    /// Datagrams dropped for being longer than the protocol takes.
    pub oversized: AtomicU64,
    /// Send system calls that sent datagrams (each a batch, of GSO messages or not).
    pub send_calls: AtomicU64,
}

/// A worker's UDP socket and its send state.
#[derive(Debug)]
pub struct Endpoint {
    sock: UdpSocket,
    /// Longest datagram the protocol takes.
    max_datagram: usize,
    gro: bool,
    /// Whether to send runs as GSO messages (off after the kernel's first refusal).
    gso: Cell<bool>,
    scratch: RefCell<Scratch>,
    counters: Arc<Counters>,
}

impl Endpoint {
    /// Takes over a bound socket (on the worker's runtime), turning GRO on where the
    /// kernel has it; datagrams longer than `max_datagram` will be dropped.
    pub fn new(
        sock: StdUdpSocket,
        max_datagram: usize,
        counters: Arc<Counters>,
    ) -> io::Result<Rc<Endpoint>> {
        sock.set_nonblocking(true)?;
        let gro = set_gro(sock.as_fd());
        Ok(Rc::new(Endpoint {
            sock: UdpSocket::from_std(sock)?,
            max_datagram: max_datagram.min(udp_send::MAX_MESSAGE),
            gro,
            gso: Cell::new(true),
            scratch: RefCell::default(),
            counters,
        }))
    }

    /// Waits until the socket may take more datagrams.
    pub async fn writable(&self) -> io::Result<()> {
        self.sock.writable().await
    }

    /// Receives until the worker stops, handing every datagram to `demux`.
    pub async fn serve(self: Rc<Self>, mut demux: impl Demux) {
        let mut rx = Receiver::new(self.max_datagram, self.gro);
        loop {
            if let Err(e) = self.sock.readable().await {
                return tracing::error!("udp endpoint: cannot wait on the socket: {e}");
            }
            let got = self.sock.try_io(Interest::READABLE, || {
                let n = rx.receive(self.sock.as_fd())?;
                // A short batch: the queue is empty now (these sockets are unconnected
                // and without IP_RECVERR, so no ICMP error cuts a batch short). Told
                // as WouldBlock, tokio clears the readiness now instead of after one
                // more call that only finds EAGAIN; a datagram that arrives after the
                // call is a new epoll edge, so none waits unseen.
                if n < BATCH {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match got {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && rx.got > 0 => {}
                // No datagram: readiness was stale, or an error (none is expected on
                // an unconnected socket) was read and cleared.
                Err(_) => continue,
            }
            let now = tokio::time::Instant::now().into_std();
            let (mut datagrams, mut unclaimed) = (0u64, 0u64);
            for (from, datagram) in rx.datagrams() {
                datagrams += 1;
                if demux.receive(from, datagram, now) == Claim::Dropped {
                    unclaimed += 1;
                }
            }
            demux.batch_done();
            let c = &self.counters;
            c.receive_calls.fetch_add(1, Ordering::Relaxed);
            c.datagrams.fetch_add(datagrams, Ordering::Relaxed);
            c.unclaimed.fetch_add(unclaimed, Ordering::Relaxed);
            c.oversized.fetch_add(rx.oversized(), Ordering::Relaxed);
        }
    }

    /// Sends datagrams `0..count`, `datagram(i)` giving the i-th's destination and
    /// bytes (two slices, joined: a header and a payload, say, or one and an empty
    /// one), in as few system calls as the kernel allows; returns how many went, in
    /// order. It stops when the socket is full: what is left is the caller's to drop
    /// (as UDP may) or retry. An error only when nothing went.
    pub fn send<'a>(
        &self,
        count: usize,
        datagram: impl Fn(usize) -> (SocketAddr, [&'a [u8]; 2]),
    ) -> io::Result<usize> {
        let shape = |i: usize| {
            let (dest, [a, b]) = datagram(i);
            (dest, a.len() + b.len())
        };
        let mut scratch = self.scratch.borrow_mut();
        let mut at = 0;
        // After a refusal: whether the retry without GSO is to tell whose fault it was.
        let mut retrying = false;
        while at < count {
            let gso = self.gso.get();
            let mut msgs = scratch.messages();
            for run in udp_send::gso_runs(at..count, gso, shape) {
                let (dest, first) = shape(run.start);
                let segment = (run.len() > 1).then_some(first as u16);
                let slices = run.flat_map(|i| datagram(i).1).filter(|s| !s.is_empty());
                msgs.push(dest, slices, segment);
            }
            let sent = self
                .sock
                .try_io(Interest::WRITABLE, || msgs.send(self.sock.as_fd()));
            match sent {
                Ok(0) => break,
                // The runs again, not kept: a send allocates nothing.
                Ok(n) => {
                    retrying = false;
                    self.counters.send_calls.fetch_add(1, Ordering::Relaxed);
                    at += udp_send::gso_runs(at..count, gso, shape)
                        .take(n)
                        .map(|r| r.len())
                        .sum::<usize>();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if gso
                        && udp_send::is_gso_refused(&e)
                        && udp_send::gso_runs(at..count, true, shape).any(|r| r.len() > 1) =>
                {
                    tracing::info!("udp: the kernel refuses UDP GSO ({e}); sending without");
                    self.gso.set(false);
                    retrying = true;
                }
                Err(e) => {
                    if retrying {
                        // Not GSO's fault after all (a bad destination): keep it on.
                        self.gso.set(true);
                    }
                    return if at > 0 { Ok(at) } else { Err(e) };
                }
            }
        }
        Ok(at)
    }

    /// [`Endpoint::send`] of a slice: `datagram` gives each item's destination and bytes.
    pub fn send_each<'a, T>(
        &self,
        items: &'a [T],
        datagram: impl Fn(&'a T) -> (SocketAddr, [&'a [u8]; 2]),
    ) -> io::Result<usize> {
        // `send` asks for indices below the count only.
        self.send(items.len(), |i| datagram(&items[i]))
    }

    /// Sends one datagram (non-blocking).
    pub fn send_to(&self, bytes: &[u8], dest: SocketAddr) -> io::Result<usize> {
        self.sock.try_send_to(bytes, dest)
    }
}

/// Asks for GRO; false where the kernel (before 5.0) or the socket refuses it.
fn set_gro(fd: BorrowedFd<'_>) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to an int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            UDP_GRO,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Room for one `cmsghdr` with an `int`, 8-byte aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Control([u8; 32]);

/// The buffers `recvmmsg` fills, kept by the receive loop: [`BATCH`] slots of `slot`
/// bytes in one allocation, with their addresses and control messages.
struct Receiver {
    buf: Vec<u8>,
    slot: usize,
    /// Longest datagram handed on.
    max: usize,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<Control>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Messages the last call received.
    got: usize,
}

impl Receiver {
    fn new(max_datagram: usize, gro: bool) -> Receiver {
        let slot = if gro { GRO_SLOT } else { max_datagram };
        Receiver {
            buf: vec![0; slot * BATCH],
            slot,
            max: max_datagram,
            // SAFETY: all-zero is a valid sockaddr_storage and mmsghdr.
            names: vec![unsafe { zeroed() }; BATCH],
            controls: vec![Control([0; 32]); BATCH],
            iovs: Vec::with_capacity(BATCH),
            hdrs: Vec::with_capacity(BATCH),
            got: 0,
        }
    }

    /// One `recvmmsg` (non-blocking); returns the messages received.
    fn receive(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.got = 0;
        self.iovs.clear();
        self.hdrs.clear();
        let base = self.buf.as_mut_ptr();
        for i in 0..BATCH {
            self.iovs.push(libc::iovec {
                // SAFETY: i * slot + slot <= buf.len().
                iov_base: unsafe { base.add(i * self.slot) }.cast(),
                iov_len: self.slot,
            });
        }
        for i in 0..BATCH {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut h: libc::mmsghdr = unsafe { zeroed() };
            // SAFETY: i < BATCH, the length of each vector; none moves until the call
            // returns.
            unsafe {
                h.msg_hdr.msg_name = self.names.as_mut_ptr().add(i).cast();
                h.msg_hdr.msg_iov = self.iovs.as_mut_ptr().add(i);
                h.msg_hdr.msg_control = self.controls.as_mut_ptr().add(i).cast();
            }
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_controllen = size_of::<Control>() as _;
            self.hdrs.push(h);
        }
        // SAFETY: every header points into `names`, `iovs` (into `buf`) and `controls`,
        // with their lengths, all alive and unmoved until the call returns.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.got = n as usize;
        Ok(self.got)
    }

    /// Datagrams of the last call dropped for their length: cut short by the kernel
    /// (longer than a slot), or longer than the protocol takes (a GRO slot holds them).
    fn oversized(&self) -> u64 {
        let cut = self.messages().filter(|m| m.truncated).count();
        let long = self.pieces().filter(|(_, d)| d.len() > self.max).count();
        (cut + long) as u64
    }

    fn messages(&self) -> impl Iterator<Item = Message> + '_ {
        self.hdrs.iter().take(self.got).enumerate().map(|(i, h)| {
            let m = &h.msg_hdr;
            let from = self.names.get(i).and_then(socket_addr);
            Message {
                slot: i,
                len: h.msg_len as usize,
                truncated: m.msg_flags & libc::MSG_TRUNC != 0,
                from,
                segment: gro_segment(m),
            }
        })
    }

    /// The datagrams of the last call, a GRO train cut into its datagrams; messages
    /// cut short by the kernel, with no address, or longer than the protocol takes
    /// are left out.
    fn datagrams(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.pieces().filter(|(_, d)| d.len() <= self.max)
    }

    /// The whole messages of the last call, each cut at its GRO segment size.
    fn pieces(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.messages()
            .filter(|m| !m.truncated)
            .filter_map(|m| {
                let from = m.from?;
                let start = m.slot * self.slot;
                let bytes = self.buf.get(start..start + m.len.min(self.slot))?;
                let size = m.segment.unwrap_or(bytes.len()).max(1);
                Some((from, bytes, size))
            })
            .flat_map(|(from, bytes, size)| bytes.chunks(size).map(move |d| (from, d)))
    }
}

/// The address the kernel wrote; `None` for a family UDP does not use.
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let p: *const libc::sockaddr_storage = storage;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in, which the storage fits.
            let a = unsafe { std::ptr::read(p.cast::<libc::sockaddr_in>()) };
            let ip = std::net::Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { std::ptr::read(p.cast::<libc::sockaddr_in6>()) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// One received message, before it is cut into datagrams.
struct Message {
    slot: usize,
    len: usize,
    truncated: bool,
    from: Option<SocketAddr>,
    /// With GRO: the size of each datagram of the train.
    segment: Option<usize>,
}

/// The segment size of a GRO train, from its `UDP_GRO` control message.
fn gro_segment(m: &libc::msghdr) -> Option<usize> {
    // SAFETY: `m` is a header the kernel filled; CMSG_FIRSTHDR/NXTHDR stay within
    // `msg_controllen`, which the kernel set to what it wrote.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(m);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                return usize::try_from(size).ok().filter(|&s| s > 0);
            }
            cmsg = libc::CMSG_NXTHDR(m, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket as Std;

    /// Claims datagrams whose first byte is even, and keeps what it saw.
    #[derive(Default, Clone)]
    struct Even(Rc<RefCell<Vec<Seen>>>);

    type Seen = (SocketAddr, Vec<u8>);

    impl Demux for Even {
        fn receive(&mut self, from: SocketAddr, datagram: &[u8], _: Instant) -> Claim {
            self.0.borrow_mut().push((from, datagram.to_vec()));
            match datagram.first() {
                Some(b) if b % 2 == 0 => Claim::Taken,
                _ => Claim::Dropped,
            }
        }
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    /// Waits (bounded) until the endpoint has counted `n` datagrams.
    async fn until_received(endpoint: &Endpoint, n: u64) {
        for _ in 0..500 {
            if endpoint.counters.datagrams.load(Ordering::Relaxed) >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the endpoint did not receive {n} datagrams");
    }

    #[test]
    fn a_burst_is_taken_in_fewer_calls_and_the_unclaimed_are_counted() {
        run(async {
            let sock = Std::bind("127.0.0.1:0").unwrap();
            let addr = sock.local_addr().unwrap();
            let endpoint = Endpoint::new(sock, 1500, Arc::default()).unwrap();
            let seen = Even::default();
            // The burst is queued before the endpoint first reads.
            let peer = Std::bind("127.0.0.1:0").unwrap();
            const N: u8 = 100;
            for i in 0..N {
                peer.send_to(&[i; 100], addr).unwrap();
            }
            tokio::task::spawn_local(endpoint.clone().serve(seen.clone()));
            until_received(&endpoint, u64::from(N)).await;
            let c = &endpoint.counters;
            let calls = c.receive_calls.load(Ordering::Relaxed);
            assert!(calls < u64::from(N) / 2, "{calls} receive calls");
            assert_eq!(c.unclaimed.load(Ordering::Relaxed), u64::from(N) / 2);
            let from = peer.local_addr().unwrap();
            let firsts: Vec<u8> = seen.0.borrow().iter().map(|(_, d)| d[0]).collect();
            assert!(seen.0.borrow().iter().all(|(f, _)| *f == from));
            assert_eq!(firsts, (0..N).collect::<Vec<_>>(), "in order, none lost");
            // The short last batch cleared the readiness: a later datagram still wakes it.
            peer.send_to(&[N; 10], addr).unwrap();
            until_received(&endpoint, u64::from(N) + 1).await;
        });
    }

    #[test]
    fn a_datagram_longer_than_the_protocol_takes_is_dropped_and_counted() {
        run(async {
            let sock = Std::bind("127.0.0.1:0").unwrap();
            let addr = sock.local_addr().unwrap();
            let endpoint = Endpoint::new(sock, 200, Arc::default()).unwrap();
            let seen = Even::default();
            tokio::task::spawn_local(endpoint.clone().serve(seen.clone()));
            let peer = Std::bind("127.0.0.1:0").unwrap();
            peer.send_to(&[2; 1000], addr).unwrap();
            peer.send_to(&[4; 200], addr).unwrap();
            until_received(&endpoint, 1).await;
            // Cut by the kernel (no GRO) or held whole in a GRO slot: dropped either way.
            assert_eq!(
                *seen.0.borrow(),
                [(peer.local_addr().unwrap(), vec![4; 200])]
            );
            assert_eq!(endpoint.counters.oversized.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn a_gso_train_is_cut_into_its_datagrams() {
        run(async {
            let rx_sock = Std::bind("127.0.0.1:0").unwrap();
            let addr = rx_sock.local_addr().unwrap();
            let rx = Endpoint::new(rx_sock, 1500, Arc::default()).unwrap();
            let tx =
                Endpoint::new(Std::bind("127.0.0.1:0").unwrap(), 1500, Arc::default()).unwrap();
            let seen = Even::default();
            tokio::task::spawn_local(rx.clone().serve(seen.clone()));
            // A frame: three full datagrams and a short one, sent as one GSO message
            // where the kernel takes it; a GRO socket then receives it as one.
            let frame = [[2u8; 1000], [4; 1000], [6; 1000]];
            let all: Vec<(SocketAddr, [&[u8]; 2])> = vec![
                (addr, [&frame[0], &[]]),
                (addr, [&frame[1], &[]]),
                (addr, [&frame[2], &[]]),
                (addr, [&frame[0][..10], &[]]),
            ];
            tx.writable().await.unwrap();
            assert_eq!(tx.send(all.len(), |i| all[i]).unwrap(), 4);
            until_received(&rx, 4).await;
            let got: Vec<Vec<u8>> = seen.0.borrow().iter().map(|(_, d)| d.clone()).collect();
            let sent: Vec<Vec<u8>> = all.iter().map(|(_, [a, _])| a.to_vec()).collect();
            assert_eq!(got, sent);
            if rx.gro && tx.gso.get() {
                assert_eq!(rx.counters.receive_calls.load(Ordering::Relaxed), 1);
            }
        });
    }

    #[test]
    fn sends_reach_their_peers_as_separate_datagrams() {
        run(async {
            let sock = Std::bind("127.0.0.1:0").unwrap();
            let endpoint = Endpoint::new(sock, 1500, Arc::default()).unwrap();
            let (x, y) = (
                Std::bind("127.0.0.1:0").unwrap(),
                Std::bind("127.0.0.1:0").unwrap(),
            );
            let (xa, ya) = (x.local_addr().unwrap(), y.local_addr().unwrap());
            // A frame to x (3 full datagrams and a short one, header and payload
            // apart), then one to y.
            let header = [0xAAu8; 16];
            let payloads = [[1u8; 1000], [2; 1000], [3; 1000]];
            let short = [4u8; 10];
            let all: Vec<(SocketAddr, [&[u8]; 2])> = vec![
                (xa, [&header, &payloads[0]]),
                (xa, [&header, &payloads[1]]),
                (xa, [&header, &payloads[2]]),
                (xa, [&header, &short]),
                (ya, [&short, &[]]),
            ];
            endpoint.writable().await.unwrap();
            assert_eq!(endpoint.send(all.len(), |i| all[i]).unwrap(), 5);
            // Whether GSO was taken or refused, each arrives as its own datagram.
            let mut buf = [0u8; 2048];
            for s in [&x, &y] {
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
            }
            let sizes: Vec<usize> = (0..4).map(|_| x.recv(&mut buf).unwrap()).collect();
            assert_eq!(sizes, [1016, 1016, 1016, 26]);
            assert_eq!(&buf[..26], [&header[..], &short[..]].concat());
            assert_eq!(y.recv(&mut buf).unwrap(), 10);
        });
    }

    #[test]
    fn a_refused_gso_message_is_sent_again_without() {
        run(async {
            let sock = Std::bind("127.0.0.1:0").unwrap();
            // Without UDP checksums the kernel refuses GSO messages (EINVAL), as a
            // kernel or route without GSO would.
            let on: libc::c_int = 1;
            // SAFETY: a valid socket and an int of the size given.
            let r = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_NO_CHECK,
                    (&on as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(r, 0);
            let endpoint = Endpoint::new(sock, 1500, Arc::default()).unwrap();
            let x = Std::bind("127.0.0.1:0").unwrap();
            let xa = x.local_addr().unwrap();
            let frame = [[7u8; 1000], [8; 1000]];
            let all: Vec<(SocketAddr, [&[u8]; 2])> =
                vec![(xa, [&frame[0], &[]]), (xa, [&frame[1], &[]])];
            endpoint.writable().await.unwrap();
            let sent = endpoint.send(all.len(), |i| all[i]);
            assert_eq!(sent.unwrap(), 2);
            assert!(!endpoint.gso.get(), "GSO is off after the refusal");
            x.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut buf = vec![0u8; 65_536];
            assert_eq!(x.recv(&mut buf).unwrap(), 1000);
            assert_eq!(buf[0], 7);
            assert_eq!(x.recv(&mut buf).unwrap(), 1000);
            assert_eq!(buf[0], 8);
        });
    }
}
