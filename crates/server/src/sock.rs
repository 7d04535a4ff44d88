//! A connection's socket, plain TCP or TLS, with the non-blocking calls the fan-out
//! and the drivers use: `try_read`, `try_write_vectored`, and readiness of the TCP
//! socket underneath.
//!
//! Why not `AsyncWrite`: the worker's pump writes players directly and must never
//! wait on one of them. For TLS the plaintext goes into rustls (bounded by its buffer
//! limit) and the ciphertext out as far as the socket takes it; what is left is
//! flushed when the socket becomes writable again.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A connection's socket.
#[derive(Debug)]
pub enum Sock {
    Tcp(TcpStream),
    Tls {
        /// Boxed: a plain player should not pay for the size of TLS state.
        tls: Box<RefCell<TlsStream<SharedTcp>>>,
        /// The same socket, for readiness without borrowing the TLS state.
        tcp: Rc<TcpStream>,
    },
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
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Sock::Tcp(s) => s,
            Sock::Tls { tcp, .. } => tcp,
        }
    }

    /// Waits until the socket has input (TLS may also hold decrypted bytes: callers
    /// read until `WouldBlock` after each wake-up).
    pub async fn readable(&self) -> io::Result<()> {
        self.tcp().readable().await
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.try_read(buf),
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
            Sock::Tls { tls, .. } => {
                let mut tls = tls.borrow_mut();
                let mut total = 0;
                for buf in bufs.iter().filter(|b| !b.is_empty()) {
                    match once(|cx| Pin::new(&mut *tls).poll_write(cx, buf)) {
                        Ok(n) => {
                            total += n;
                            if n < buf.len() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock && total > 0 => break,
                        Err(e) => return Err(e),
                    }
                }
                Ok(total)
            }
        }
    }

    /// Pushes out ciphertext rustls still holds. `Ok(true)` when nothing is left.
    pub fn try_flush(&self) -> io::Result<bool> {
        match self {
            Sock::Tcp(_) => Ok(true),
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
            Sock::Tcp(_) => false,
            Sock::Tls { tls, .. } => tls.borrow().get_ref().1.wants_write(),
        }
    }
}

/// Caps a socket's kernel send buffer (see `player_send_buffer`).
pub fn cap_send_buffer(sock: &TcpStream, bytes: usize) {
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
