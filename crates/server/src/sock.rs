//! A connection's socket, plain TCP or TLS, with the non-blocking calls the fan-out
//! and the drivers use: `try_read`, `try_write_vectored`, and readiness of the TCP
//! socket underneath.
//!
//! Why not `AsyncWrite`: the worker's pump writes players directly and must never
//! wait on one of them. For TLS the plaintext goes into rustls (bounded by its buffer
//! limit) and the ciphertext out as far as the socket takes it; what is left is
//! flushed when the socket becomes writable again.

use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::server::TlsStream;

/// A connection's socket.
#[derive(Debug)]
pub enum Sock {
    Tcp(TcpStream),
    /// An RTSP/TCP player written one RTP packet per send call, as servers without
    /// frame batching do; only to measure what batching saves (`rtsp_batch = false`).
    TcpPerPacket(TcpStream),
    Tls {
        /// Boxed: a plain player should not pay for the size of TLS state.
        tls: Box<RefCell<TlsStream<SharedTcp>>>,
        /// The same socket, for readiness without borrowing the TLS state.
        tcp: Rc<TcpStream>,
    },
    /// An in-memory pipe to an HTTP/2 response body (HTTP-FLV over h2).
    Pipe(Rc<Pipe>),
    /// An RTSP player over UDP: media as datagrams, answers on its TCP connection.
    Udp(Box<crate::udp::UdpOut>),
}

/// A bounded buffer between the fan-out (writer) and an HTTP/2 response body
/// (reader). Full is `WouldBlock`, as a socket's send buffer would be; a dropped body
/// is a broken pipe.
#[derive(Debug, Default)]
pub struct Pipe {
    buf: RefCell<BytesMut>,
    cap: usize,
    reader: RefCell<Option<Waker>>,
    drained: Notify,
    closed: Cell<bool>,
}

impl Pipe {
    /// A pipe holding at most `cap` bytes (like a capped socket send buffer).
    pub fn new(cap: usize) -> Rc<Pipe> {
        Rc::new(Pipe {
            cap: cap.max(16 << 10),
            ..Pipe::default()
        })
    }

    fn write(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.closed.get() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut buf = self.buf.borrow_mut();
        let mut space = self.cap.saturating_sub(buf.len());
        if space == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut total = 0;
        for b in bufs {
            let n = b.len().min(space);
            buf.extend_from_slice(&b[..n]);
            total += n;
            space -= n;
            if space == 0 {
                break;
            }
        }
        if let Some(w) = self.reader.borrow_mut().take() {
            w.wake();
        }
        Ok(total)
    }

    async fn writable(&self) {
        loop {
            let drained = self.drained.notified();
            if self.closed.get() || self.buf.borrow().len() < self.cap {
                return;
            }
            drained.await;
        }
    }

    /// The body side: what is buffered, `Ready(None)` once closed and empty.
    pub fn poll_read(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut buf = self.buf.borrow_mut();
        if !buf.is_empty() {
            let data = buf.split().freeze();
            drop(buf);
            self.drained.notify_one();
            return Poll::Ready(Some(data));
        }
        if self.closed.get() {
            return Poll::Ready(None);
        }
        *self.reader.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The body went away (the client reset the stream or closed the connection).
    pub fn close(&self) {
        self.closed.set(true);
        self.drained.notify_one();
        if let Some(w) = self.reader.borrow_mut().take() {
            w.wake();
        }
    }
}

/// A TCP socket shared between a TLS stream and readiness waits.
#[derive(Debug, Clone)]
pub struct SharedTcp(pub Rc<TcpStream>);

impl AsyncRead for SharedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}

/// Something a streaming route can hand to the fan-out.
pub trait IntoSock {
    fn into_sock(self) -> Sock;
}

impl IntoSock for TcpStream {
    fn into_sock(self) -> Sock {
        Sock::Tcp(self)
    }
}

impl IntoSock for TlsStream<SharedTcp> {
    fn into_sock(self) -> Sock {
        let tcp = self.get_ref().0 .0.clone();
        Sock::Tls {
            tls: Box::new(RefCell::new(self)),
            tcp,
        }
    }
}

/// Polls once without registering interest: readiness is awaited separately on
/// the TCP socket, so a `Pending` here only means "would block".
fn once<T>(f: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match f(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

impl Sock {
    /// The TCP socket underneath, if any.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Sock::Tcp(s) | Sock::TcpPerPacket(s) => Some(s),
            Sock::Tls { tcp, .. } => Some(tcp),
            Sock::Pipe(_) => None,
            Sock::Udp(udp) => udp.control().tcp(),
        }
    }

    /// Waits until the socket has input (TLS may also hold decrypted bytes: callers
    /// read until `WouldBlock` after each wake-up). A pipe has no input.
    pub async fn readable(&self) -> io::Result<()> {
        match self.tcp() {
            Some(tcp) => tcp.readable().await,
            None => std::future::pending().await,
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Sock::Pipe(pipe) => {
                pipe.writable().await;
                Ok(())
            }
            Sock::Udp(udp) => udp.writable().await,
            _ => match self.tcp() {
                Some(tcp) => tcp.writable().await,
                None => Ok(()),
            },
        }
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) | Sock::TcpPerPacket(s) => s.try_read(buf),
            Sock::Pipe(_) => Err(io::ErrorKind::WouldBlock.into()),
            Sock::Udp(udp) => udp.control().try_read(buf),
            Sock::Tls { tls, .. } => {
                let mut tls = tls.borrow_mut();
                let mut read = ReadBuf::new(buf);
                once(|cx| Pin::new(&mut *tls).poll_read(cx, &mut read))?;
                Ok(read.filled().len())
            }
        }
    }

    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.try_write_vectored(bufs),
            Sock::TcpPerPacket(s) => write_per_packet(s, bufs),
            Sock::Pipe(pipe) => pipe.write(bufs),
            Sock::Udp(udp) => udp.try_write_vectored(bufs),
            Sock::Tls { tls, .. } => {
                // One vectored write: rustls packs all the slices into full records
                // (one per 16 KiB), where a write per slice made a record, and a
                // send, per FLV tag.
                let mut tls = tls.borrow_mut();
                once(|cx| Pin::new(&mut *tls).poll_write_vectored(cx, bufs))
            }
        }
    }

    /// Pushes out ciphertext rustls still holds. `Ok(true)` when nothing is left.
    pub fn try_flush(&self) -> io::Result<bool> {
        match self {
            Sock::Tcp(_) | Sock::TcpPerPacket(_) | Sock::Pipe(_) | Sock::Udp(_) => Ok(true),
            Sock::Tls { tls, .. } => {
                let mut tls = tls.borrow_mut();
                match once(|cx| Pin::new(&mut *tls).poll_flush(cx)) {
                    Ok(()) => Ok(!tls.get_ref().1.wants_write()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Whether written bytes are still held in user space (TLS ciphertext).
    pub fn has_pending_output(&self) -> bool {
        match self {
            Sock::Tcp(_) | Sock::TcpPerPacket(_) | Sock::Pipe(_) | Sock::Udp(_) => false,
            Sock::Tls { tls, .. } => tls.borrow().get_ref().1.wants_write(),
        }
    }
}

/// One `send` per interleaved RTP packet (and per other buffer), until one is cut short.
fn write_per_packet(s: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let mut total = 0;
    for buf in bufs {
        let mut rest: &[u8] = buf;
        while !rest.is_empty() {
            let len = match rest {
                [b'$', _, hi, lo, ..] => {
                    (4 + usize::from(u16::from_be_bytes([*hi, *lo]))).min(rest.len())
                }
                _ => rest.len(),
            };
            match s.try_write(&rest[..len]) {
                Ok(n) => {
                    total += n;
                    if n < len {
                        return Ok(total);
                    }
                    rest = &rest[len..];
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && total > 0 => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }
    Ok(total)
}

/// Caps a socket's kernel send buffer (see `player_send_buffer`).
pub fn cap_send_buffer(sock: Option<&TcpStream>, bytes: usize) {
    let Some(sock) = sock else { return };
    if bytes > 0 {
        let _ = socket2::SockRef::from(sock).set_send_buffer_size(bytes);
    }
}

/// Writes queued session output (outside of playing, where the fan-out writes).
pub async fn write_all(
    sock: &Sock,
    out: &mut std::collections::VecDeque<bytes::Bytes>,
) -> io::Result<()> {
    loop {
        // An empty buffer would make a zero-byte write that never advances.
        while out.front().is_some_and(|b| b.is_empty()) {
            out.pop_front();
        }
        if out.is_empty() {
            return Ok(());
        }
        sock.writable().await?;
        let iov: Vec<IoSlice<'_>> = out.iter().take(64).map(|b| IoSlice::new(b)).collect();
        let mut n = match sock.try_write_vectored(&iov) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        while n > 0 {
            let Some(front) = out.front_mut() else { break };
            if n >= front.len() {
                n -= front.len();
                out.pop_front();
            } else {
                bytes::Buf::advance(front, n);
                n = 0;
            }
        }
    }
}
