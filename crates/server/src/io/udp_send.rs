//! Many datagrams in one system call: `sendmmsg`, each message optionally a train of
//! equal-sized datagrams cut by the kernel (UDP generic segmentation offload,
//! `UDP_SEGMENT`).
//!
//! Why GSO: the RTP packets of a video frame are all full-sized but the last, and go to
//! the same player: as one GSO message they cross the socket layer once, as one large
//! buffer, and are only cut into datagrams below it — most of the per-datagram cost of
//! the send path is paid once per frame instead of once per packet.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One socket per worker on `addr`, all sharing its port (SO_REUSEPORT), non-blocking;
/// and the address they are bound to (the port chosen when `addr` asks for 0).
pub fn bind_shared(
    addr: SocketAddr,
    workers: usize,
) -> io::Result<(SocketAddr, Vec<std::net::UdpSocket>)> {
    // A plain bind first: SO_REUSEPORT would share the port with another server left
    // running and silently split its sessions.
    if addr.port() != 0 {
        drop(std::net::UdpSocket::bind(addr)?);
    }
    let first = bind(addr)?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(bound)?);
    }
    Ok((bound, all))
}

fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    // Room for bursts of many viewers' packets (the kernel caps it at rmem_max).
    let _ = socket.set_recv_buffer_size(4 << 20);
    let _ = socket.set_send_buffer_size(4 << 20);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// `UDP_SEGMENT` (linux/udp.h), missing from the libc crate for glibc targets.
const UDP_SEGMENT: libc::c_int = 103;
/// The kernel's limit on segments per GSO message (`UDP_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 64;
/// Largest UDP payload of one message, GSO or not.
pub const MAX_MESSAGE: usize = 65_507;

/// Room for one `cmsghdr` with a `u16`, 8-byte aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Control([u8; 32]);

/// What `sendmmsg` calls are built in, kept between calls (one per worker's socket):
/// it grows to the largest batch its user sends and is reused, so a send allocates
/// nothing. It holds no bytes to send, only their addresses, and only while a
/// [`Messages`] borrows it.
#[derive(Default)]
pub struct Scratch {
    /// Per message: its first slice in `iovs`, how many, and its GSO segment size.
    msgs: Vec<(usize, usize, Option<u16>)>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    name_lens: Vec<libc::socklen_t>,
    controls: Vec<Control>,
    hdrs: Vec<libc::mmsghdr>,
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scratch")
            .field("messages", &self.hdrs.capacity())
            .field("slices", &self.iovs.capacity())
            .finish()
    }
}

impl Scratch {
    /// Starts gathering messages whose bytes live for `'a`.
    pub fn messages<'a>(&mut self) -> Messages<'_, 'a> {
        self.msgs.clear();
        self.iovs.clear();
        self.names.clear();
        self.name_lens.clear();
        Messages {
            scratch: self,
            bytes: PhantomData,
        }
    }
}

/// Messages gathered for one `sendmmsg`: each datagrams to one destination. The
/// bytes they point to are borrowed for `'a`, which outlives this.
pub struct Messages<'s, 'a> {
    scratch: &'s mut Scratch,
    bytes: PhantomData<&'a [u8]>,
}

impl<'a> Messages<'_, 'a> {
    /// Adds a message to `dest`: `slices` as one datagram, or with `segment` (UDP
    /// GSO) as datagrams of `segment` bytes, the last possibly shorter.
    pub fn push(
        &mut self,
        dest: SocketAddr,
        slices: impl IntoIterator<Item = &'a [u8]>,
        segment: Option<u16>,
    ) {
        let s = &mut *self.scratch;
        let first = s.iovs.len();
        s.iovs.extend(slices.into_iter().map(|b| libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        }));
        s.msgs.push((first, s.iovs.len() - first, segment));
        let (name, len) = sockaddr(dest);
        s.names.push(name);
        s.name_lens.push(len);
    }

    /// Sends the messages with one `sendmmsg` (non-blocking); returns how many went.
    pub fn send(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let s = &mut *self.scratch;
        if s.msgs.is_empty() {
            return Ok(0);
        }
        s.controls.clear();
        s.controls.resize(s.msgs.len(), Control([0; 32]));
        s.hdrs.clear();
        for (i, &(first, count, segment)) in s.msgs.iter().enumerate() {
            // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
            let mut h: libc::mmsghdr = unsafe { zeroed() };
            // Pointers from the vectors' base, not from `&mut v[i]`: later indexing must
            // not invalidate earlier ones.
            // SAFETY: i < len of `names` and `controls`, first + count <= len of `iovs`
            // (pushed together); none is resized below.
            unsafe {
                h.msg_hdr.msg_name = s.names.as_mut_ptr().add(i).cast();
                h.msg_hdr.msg_iov = s.iovs.as_mut_ptr().add(first);
            }
            h.msg_hdr.msg_namelen = s.name_lens[i];
            h.msg_hdr.msg_iovlen = count as _;
            if let Some(segment) = segment {
                // SAFETY: as for the name.
                let control = unsafe { s.controls.as_mut_ptr().add(i) };
                h.msg_hdr.msg_control = control.cast();
                // SAFETY: CMSG_SPACE only computes a size.
                h.msg_hdr.msg_controllen =
                    unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as _;
                // SAFETY: msg_control points to 32 aligned bytes, more than
                // CMSG_SPACE(2); CMSG_FIRSTHDR is non-null because msg_controllen
                // covers one header.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
                }
            }
            s.hdrs.push(h);
        }
        // SAFETY: every header points into `names`, `controls` and `iovs`, unmoved
        // until the call returns, and the slices' bytes are borrowed for `'a`, which
        // outlives `self`.
        let sent = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                s.hdrs.as_mut_ptr(),
                s.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }
}

/// Errors of a kernel or route without UDP GSO.
pub fn is_gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP)
    )
}

/// Runs of consecutive datagrams of `range` that can go as one message each with GSO:
/// the same destination, every datagram but the run's last as long as the first,
/// within the kernel's limits; one datagram each without `gso`. `of(i)` gives the
/// i-th datagram's destination and length.
pub fn gso_runs(
    range: std::ops::Range<usize>,
    gso: bool,
    of: impl Fn(usize) -> (SocketAddr, usize),
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let end = range.end;
    let mut i = range.start;
    std::iter::from_fn(move || {
        if i >= end {
            return None;
        }
        let (dest, size) = of(i);
        let mut total = size;
        let mut j = i + 1;
        while gso && j < end && j - i < MAX_SEGMENTS && size <= usize::from(u16::MAX) {
            let (next_dest, next_len) = of(j);
            if next_dest != dest
                || of(j - 1).1 != size
                || next_len > size
                || total + next_len > MAX_MESSAGE
            {
                break;
            }
            total += next_len;
            j += 1;
        }
        let run = i..j;
        i = j;
        Some(run)
    })
}

pub(crate) fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn runs(all: &[(u16, usize)], gso: bool) -> Vec<std::ops::Range<usize>> {
        let of = |i: usize| (SocketAddr::from(([127, 0, 0, 1], all[i].0)), all[i].1);
        gso_runs(0..all.len(), gso, of).collect()
    }

    #[test]
    fn a_frame_to_one_peer_is_one_run_and_peers_are_apart() {
        // Two viewers' packets of one frame: 3 full and a short last, then 2.
        let all = [
            (1, 1200),
            (1, 1200),
            (1, 1200),
            (1, 700),
            (2, 1200),
            (2, 300),
        ];
        assert_eq!(runs(&all, true), [0..4, 4..6]);
        // A longer datagram after a shorter one starts a new run; so does no GSO.
        let odd = [(1, 300), (1, 1200), (1, 1200)];
        assert_eq!(runs(&odd, true), [0..1, 1..3]);
        assert_eq!(runs(&all, false).len(), all.len());
        // A short packet ends a run even when more full ones follow.
        assert_eq!(runs(&[(1, 1200), (1, 300), (1, 1200)], true), [0..2, 2..3]);
    }

    #[test]
    fn runs_stay_within_the_kernels_limits() {
        let many = [(1, 1000); 150];
        let found = runs(&many, true);
        assert!(found.iter().all(|r| r.len() <= MAX_SEGMENTS));
        assert!(found.iter().all(|r| r.len() * 1000 <= MAX_MESSAGE));
        assert_eq!(found.iter().map(|r| r.len()).sum::<usize>(), 150);
        assert_eq!(runs(&[(1, 50); 100], true), [0..64, 64..100]);
    }

    #[test]
    fn a_gso_message_arrives_as_separate_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dest = rx.local_addr().unwrap();
        let (a, b, c, d) = ([1u8; 100], [2u8; 100], [3u8; 40], [9u8; 7]);
        let mut scratch = Scratch::default();
        let mut msgs = scratch.messages();
        msgs.push(dest, [&a[..], &b[..], &c[..]], Some(100));
        msgs.push(dest, [&d[..]], None);
        let sent = match msgs.send(tx.as_fd()) {
            Ok(n) => n,
            // A kernel without UDP GSO (before 4.18): nothing to test here.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(sent, 2);
        let mut buf = [0u8; 2048];
        let mut got = Vec::new();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        for _ in 0..4 {
            let n = rx.recv(&mut buf).unwrap();
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got, [a.to_vec(), b.to_vec(), c.to_vec(), d.to_vec()]);
    }
}
