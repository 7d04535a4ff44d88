//! ICE over TCP (RFC 6544) for browsers whose network blocks UDP: the answer carries
//! passive TCP candidates, the browser connects, and every datagram (STUN, DTLS,
//! SRTP) travels framed by a 2-byte length (RFC 4571). A connection's first frame
//! must be a binding request naming an answered session's ufrag, within the
//! handshake bound; the session then runs on this worker with the connection as its
//! link, and ends when either ends.
//!
//! The connection is a datagram path, not a stream to keep whole: what the socket
//! cannot take waits in a bounded buffer, and past it whole datagrams are dropped, as
//! UDP would drop them (the peers recover with NACKs and keyframe requests).

use super::registry::Registry;
use super::session::{self, Link};
use crate::ctx::{Accept, Ctx};
use bytes::{Buf, BytesMut};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Bytes waiting for a slow connection, at most (about a second of a 4 Mbit/s stream).
const MAX_PENDING: usize = 512 << 10;

/// Accepts WebRTC TCP connections on this worker.
pub fn accept(ctx: &Rc<Ctx>, registry: Arc<Registry>) -> Accept {
    let ctx = ctx.clone();
    Rc::new(move |sock, peer, admission| {
        let served = serve(ctx.clone(), registry.clone(), sock, peer);
        tokio::task::spawn_local(async move {
            served.await;
            drop(admission);
        });
    })
}

async fn serve(ctx: Rc<Ctx>, registry: Arc<Registry>, sock: TcpStream, peer: SocketAddr) {
    let _ = sock.set_nodelay(true);
    let (mut read, write) = sock.into_split();
    let mut buf = BytesMut::with_capacity(4096);
    let limit = ctx.config().limits.handshake_bound();
    let first = match tokio::time::timeout(limit, next_frame(&mut read, &mut buf)).await {
        Ok(Ok(Some(frame))) => frame,
        Ok(Ok(None)) | Ok(Err(_)) => return,
        Err(_) => return tracing::debug!(%peer, "webrtc tcp: no binding request in time"),
    };
    let Some((ours, _)) = sluice_webrtc::stun::binding_username(&first) else {
        return tracing::debug!(%peer, "webrtc tcp: the first frame is no binding request");
    };
    let Some(pending) = registry.take(ours) else {
        return tracing::debug!(%peer, "webrtc tcp: no answered session for this ufrag");
    };
    let out = Rc::new(TcpOut {
        write,
        pending: RefCell::default(),
        wake: Notify::new(),
    });
    let session = session::start(&ctx, Link::Tcp(out.clone()), &registry, pending, peer, None);
    session.receive(peer, &first);
    loop {
        tokio::select! {
            frame = next_frame(&mut read, &mut buf) => match frame {
                Ok(Some(frame)) => session.receive(peer, &frame),
                Ok(None) | Err(_) => break session.hang_up(),
            },
            r = out.flush_when_writable() => if r.is_err() {
                break session.hang_up();
            },
            () = session.ended() => break,
        }
    }
}

/// The next RFC 4571 frame: `None` at the end of the connection. Cancel-safe: what
/// was read stays in `buf`.
async fn next_frame(read: &mut OwnedReadHalf, buf: &mut BytesMut) -> io::Result<Option<Vec<u8>>> {
    loop {
        if buf.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            if buf.len() >= 2 + len {
                buf.advance(2);
                let frame = buf.split_to(len).to_vec();
                return Ok(Some(frame));
            }
            buf.reserve(2 + len - buf.len());
        }
        if read.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// The sending side of an ICE-TCP session's connection.
#[derive(Debug)]
pub struct TcpOut {
    write: OwnedWriteHalf,
    /// Framed datagrams the socket has not taken yet.
    pending: RefCell<BytesMut>,
    /// Something is pending.
    wake: Notify,
}

impl TcpOut {
    /// Frames and writes what the socket takes now; keeps the rest up to
    /// [`MAX_PENDING`], and drops whole datagrams past it.
    pub fn send_all(&self, datagrams: &sluice_webrtc::outbound::Datagrams) {
        let mut pending = self.pending.borrow_mut();
        for (_, d) in datagrams.iter() {
            let Ok(len) = u16::try_from(d.len()) else {
                continue;
            };
            if pending.len() + 2 + d.len() > MAX_PENDING {
                continue;
            }
            pending.extend_from_slice(&len.to_be_bytes());
            pending.extend_from_slice(d);
        }
        // An error shows again when the connection's task writes.
        let _ = self.write_some(&mut pending);
        if !pending.is_empty() {
            self.wake.notify_one();
        }
    }

    /// Writes what the socket takes without waiting.
    fn write_some(&self, pending: &mut BytesMut) -> io::Result<()> {
        while !pending.is_empty() {
            match self.write.try_write(pending) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => pending.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits for something pending and a writable socket, and writes; only an error
    /// returns.
    async fn flush_when_writable(&self) -> io::Result<()> {
        loop {
            if self.pending.borrow().is_empty() {
                self.wake.notified().await;
                continue;
            }
            self.write.writable().await?;
            let mut pending = self.pending.borrow_mut();
            self.write_some(&mut pending)?;
        }
    }
}
