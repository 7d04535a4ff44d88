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
    use std::os::fd::AsRawFd;
    use tokio::io::Interest;
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
    let n = sock.try_io(Interest::READABLE, || {
        // SAFETY: the first `slots` headers each point at one iovec of `iovs`, each
        // at its own SLOT-byte slot of `buf`; all of them outlive the call, and the
        // kernel writes only within them (and the headers' length and flag fields).
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                slots as _,
                libc::MSG_DONTWAIT as _,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    })?;
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
