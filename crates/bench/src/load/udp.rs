//! UDP for the bench's players: sockets with a receive buffer of their own, and
//! datagrams read in batches (`recvmmsg`) into the thread's read buffer.

use super::{READ_BUF, READ_LEN};
use std::io;
use std::net::SocketAddr;
use tokio::net::UdpSocket;

/// Datagrams read per `recvmmsg`.
pub(crate) const BATCH: usize = 16;
/// Room for one datagram in the thread's buffer. Media over UDP stays under the path
/// MTU (Sluice sends at most 1,412 bytes of RTP, 1,332 of SRT); a longer datagram
/// fails the player rather than being counted cut short.
pub(crate) const SLOT: usize = READ_LEN / BATCH;

/// A UDP socket bound to `addr`, non-blocking, with a receive buffer of `recv_buffer`.
pub(crate) fn udp_socket(
    addr: SocketAddr,
    recv_buffer: Option<usize>,
) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(n) = recv_buffer {
        s.set_recv_buffer_size(n)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Reads up to [`BATCH`] datagrams waiting on `sock` into the thread's buffer and
/// passes each to `on`; returns how many (0: none waiting).
pub(crate) fn recv_batch(sock: &UdpSocket, mut on: impl FnMut(&[u8])) -> io::Result<usize> {
    READ_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        let mut lens = [0usize; BATCH];
        let n = match recv_many(sock, &mut buf, &mut lens) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        for (slot, &len) in buf.chunks_exact(SLOT).zip(&lens[..n]) {
            on(&slot[..len.min(SLOT)]);
        }
        Ok(n)
    })
}

/// `recvmmsg` into [`SLOT`]-byte slots of `buf`: one syscall for a burst of packets.
#[cfg(target_os = "linux")]
fn recv_many(sock: &UdpSocket, buf: &mut [u8], lens: &mut [usize; BATCH]) -> io::Result<usize> {
    // SAFETY: iovec and mmsghdr are plain C structs for which all zeroes (null
    // pointers, zero lengths) is a valid value.
    let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut slots = 0;
    for (iov, slot) in iovs.iter_mut().zip(buf.chunks_exact_mut(SLOT)) {
        iov.iov_base = slot.as_mut_ptr().cast();
        iov.iov_len = slot.len();
        slots += 1;
    }
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // The first `slots` headers each point at one iovec of `iovs`, each at its own
    // SLOT-byte slot of `buf`; all of them outlive the call.
    let n = recvmmsg(sock, &mut msgs[..slots])?;
    for (len, m) in lens.iter_mut().zip(&msgs[..n.min(BATCH)]) {
        if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a datagram over {SLOT} bytes"),
            ));
        }
        *len = m.msg_len as usize;
    }
    Ok(n.min(BATCH))
}

/// One `recv` per datagram where `recvmmsg` is not available.
#[cfg(not(target_os = "linux"))]
fn recv_many(sock: &UdpSocket, buf: &mut [u8], lens: &mut [usize; BATCH]) -> io::Result<usize> {
    let mut n = 0;
    for (len, slot) in lens.iter_mut().zip(buf.chunks_exact_mut(SLOT)) {
        match sock.try_recv(slot) {
            Ok(got) => {
                *len = got;
                n += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// `UDP_GRO` (linux/udp.h): as a socket option, and the cmsg with a train's segment size.
#[cfg(target_os = "linux")]
const UDP_GRO: libc::c_int = 104;
/// Messages per [`recv_gro`]: each slot holds the largest UDP payload, a whole train.
pub(crate) const GRO_BATCH: usize = 2;
const GRO_SLOT: usize = READ_LEN / GRO_BATCH;

/// One non-blocking `recvmmsg` into `msgs`; the caller has pointed every header at
/// buffers that outlive the call (the kernel writes only within them, and the headers'
/// length and flag fields).
#[cfg(target_os = "linux")]
fn recvmmsg(sock: &UdpSocket, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    use tokio::io::Interest;
    let count = msgs.len();
    sock.try_io(Interest::READABLE, || {
        // SAFETY: `msgs` is `count` headers whose buffers the caller keeps alive.
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                count as _,
                libc::MSG_DONTWAIT as _,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok((r as usize).min(count))
        }
    })
}

/// Asks the kernel to hand over a train of equal-sized datagrams from one sender as one
/// message (UDP GRO); whether it took it. Over loopback a sender's GSO message then
/// reaches the socket whole, as a TCP segment does, instead of being cut into
/// datagrams on the sender's CPU.
#[cfg(target_os = "linux")]
pub(crate) fn set_gro(sock: &impl std::os::fd::AsRawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a pointer to an int of the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_gro<T>(_: &T) -> bool {
    false
}

/// [`recv_batch`] on a socket with GRO: up to [`GRO_BATCH`] messages, each cut into its
/// datagrams by the segment size the kernel reports; returns the messages read.
#[cfg(target_os = "linux")]
pub(crate) fn recv_gro(sock: &UdpSocket, mut on: impl FnMut(&[u8])) -> io::Result<usize> {
    #[repr(C, align(8))]
    struct Control([u8; 32]);
    READ_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        // SAFETY: plain C structs for which all zeroes is a valid value.
        let mut iovs: [libc::iovec; GRO_BATCH] = unsafe { std::mem::zeroed() };
        let mut controls = [Control([0; 32]), Control([0; 32])];
        let mut msgs: [libc::mmsghdr; GRO_BATCH] = unsafe { std::mem::zeroed() };
        for ((iov, slot), (m, c)) in iovs
            .iter_mut()
            .zip(buf.chunks_exact_mut(GRO_SLOT))
            .zip(msgs.iter_mut().zip(controls.iter_mut()))
        {
            iov.iov_base = slot.as_mut_ptr().cast();
            iov.iov_len = slot.len();
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = c.0.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = c.0.len() as _;
        }
        // Each header points at one iovec (its own GRO_SLOT of `buf`) and one control
        // buffer, all alive until the call returns.
        let n = match recvmmsg(sock, &mut msgs) {
            Ok(n) => n.min(GRO_BATCH),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        };
        for (slot, m) in buf.chunks_exact(GRO_SLOT).zip(&msgs[..n]) {
            let len = (m.msg_len as usize).min(GRO_SLOT);
            let mut segment = len;
            // SAFETY: the header's control buffer, as the kernel filled it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                        let mut size: libc::c_int = 0;
                        std::ptr::copy_nonoverlapping(
                            libc::CMSG_DATA(c),
                            (&mut size as *mut libc::c_int).cast(),
                            std::mem::size_of::<libc::c_int>(),
                        );
                        segment = usize::try_from(size).unwrap_or(len).max(1);
                    }
                    c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
                }
            }
            for d in slot[..len].chunks(segment) {
                on(d);
            }
        }
        Ok(n)
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_gro(sock: &UdpSocket, on: impl FnMut(&[u8])) -> io::Result<usize> {
    recv_batch(sock, on)
}
