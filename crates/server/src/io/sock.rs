//! The transport seam: what the fan-out and the protocol drivers write a connection
//! through, whatever carries it — plain TCP, TLS, an HTTP/2 stream's pipe, RTP over
//! UDP (`rtsp::udp`), and later DTLS-SRTP and SRT. A [`Sock`] is any [`Transport`]
//! behind one box, with the non-blocking calls the fan-out uses: `try_read`,
//! `try_write_vectored`, and readiness.
//!
//! Why not `AsyncWrite`: the worker's pump writes players directly and must never
//! wait on one of them. For TLS the plaintext goes into rustls (bounded by its buffer
//! limit) and the ciphertext out as far as the socket takes it; what is left is
//! flushed when the socket becomes writable again.
//!
//! # Contract
//! - `try_write_vectored` takes whole buffers or a prefix, never blocks, and says
//!   `WouldBlock` when it took nothing; the fan-out keeps the rest (shared, no copy).
//! - A transport that keeps written bytes in user space (TLS ciphertext) says so with
//!   `has_pending_output` and pushes them with `try_flush`.
//! - Readiness futures may be awaited by one task at a time per direction.

use bytes::{Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::TlsStream;

/// A readiness wait of a transport.
pub type Ready<'a> = Pin<Box<dyn Future<Output = io::Result<()>> + 'a>>;

/// One way of carrying a connection's bytes (see the module's contract).
pub trait Transport: fmt::Debug {
    /// Reads what the peer sent; `WouldBlock` when nothing is there.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;

    /// Reads what the peer sent onto the end of `buf` (into its spare capacity, which
    /// the caller reserved); `WouldBlock` when nothing is there. The default zeroes the
    /// spare room first; plain TCP reads into it as it is.
    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let len = buf.len();
        buf.resize(buf.capacity().min(len + (64 << 10)), 0);
        let result = self.try_read(&mut buf[len..]);
        buf.truncate(len + *result.as_ref().unwrap_or(&0));
        result
    }

    /// Writes a prefix of `bufs` without blocking.
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Pushes out bytes held in user space. `Ok(true)` when nothing is left.
    fn try_flush(&self) -> io::Result<bool> {
        Ok(true)
    }

    /// Whether written bytes are still held in user space (TLS ciphertext).
    fn has_pending_output(&self) -> bool {
        false
    }

    /// The end of the connection, said in the protocol where it has a way to (TLS's
    /// close_notify); pushed out without waiting.
    fn close(&self) {}

    /// Waits until the peer may have sent something (TLS may also hold decrypted
    /// bytes: callers read until `WouldBlock` after each wake-up).
    fn readable(&self) -> Ready<'_>;

    /// Waits until a write may make progress.
    fn writable(&self) -> Ready<'_>;

    /// The TCP socket underneath, if any (for socket options).
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// The TCP socket when bytes written to it reach the peer as they are (no TLS):
    /// where the kernel can send a file itself.
    fn plain_tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// Whether the transport takes the writer's shared buffers themselves
    /// ([`Transport::try_write_shared`]): one that keeps what it sent for retransmission
    /// (SRT) then holds references to the stream's bytes instead of copies.
    fn takes_shared(&self) -> bool {
        false
    }

    /// As `try_write_vectored`, with the buffers by reference count. Only called
    /// when [`Transport::takes_shared`] says so.
    fn try_write_shared(&self, bufs: &[Bytes]) -> io::Result<usize> {
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        self.try_write_vectored(&slices)
    }
}

/// A connection's transport.
#[derive(Debug)]
pub struct Sock(Box<dyn Transport>);

impl Sock {
    pub fn new(transport: impl Transport + 'static) -> Sock {
        Sock(Box::new(transport))
    }

    /// Plain TCP.
    pub fn tcp_stream(tcp: TcpStream) -> Sock {
        Sock::new(Tcp(tcp))
    }

    pub fn tcp(&self) -> Option<&TcpStream> {
        self.0.tcp()
    }

    pub fn plain_tcp(&self) -> Option<&TcpStream> {
        self.0.plain_tcp()
    }

    pub async fn readable(&self) -> io::Result<()> {
        self.0.readable().await
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.0.writable().await
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }

    pub fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        self.0.try_read_buf(buf)
    }

    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    pub fn try_flush(&self) -> io::Result<bool> {
        self.0.try_flush()
    }

    pub fn takes_shared(&self) -> bool {
        self.0.takes_shared()
    }

    pub fn try_write_shared(&self, bufs: &[Bytes]) -> io::Result<usize> {
        self.0.try_write_shared(bufs)
    }

    pub fn has_pending_output(&self) -> bool {
        self.0.has_pending_output()
    }

    /// See [`Transport::close`].
    pub fn close(&self) {
        self.0.close()
    }
}

/// Plain TCP.
#[derive(Debug)]
pub struct Tcp(pub TcpStream);

impl Tcp {
    /// Runs `read`, a non-blocking read of at most `room` bytes, so that a short read
    /// also clears tokio's readiness, as its own `poll_read` does: the socket is
    /// drained (epoll is edge-triggered), and the next wait need not learn that from
    /// one more read returning EAGAIN (one per request on a kept-alive connection).
    /// `try_io` clears only the readiness it saw before the read, so data that arrives
    /// meanwhile still wakes the next wait.
    fn read_draining(
        &self,
        room: usize,
        read: impl FnOnce() -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut got = 0;
        let result = self.0.try_io(Interest::READABLE, || {
            got = read()?;
            if got > 0 && got < room {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(got)
            }
        });
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
            other => other,
        }
    }
}

impl Transport for Tcp {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let room = buf.len();
        self.read_draining(room, || self.0.try_read(buf))
    }

    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let room = buf.capacity() - buf.len();
        self.read_draining(room, || self.0.try_read_buf(buf))
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(self.0.readable())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(self.0.writable())
    }

    fn tcp(&self) -> Option<&TcpStream> {
        Some(&self.0)
    }

    fn plain_tcp(&self) -> Option<&TcpStream> {
        Some(&self.0)
    }
}

/// TLS over TCP: a connection we accepted, or one a relay made.
#[derive(Debug)]
struct Tls {
    tls: RefCell<TlsStream<SharedTcp>>,
    /// The same socket, for readiness without borrowing the TLS state.
    tcp: Rc<TcpStream>,
}

impl Transport for Tls {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut tls = self.tls.borrow_mut();
        let mut read = ReadBuf::new(buf);
        once(|cx| Pin::new(&mut *tls).poll_read(cx, &mut read))?;
        Ok(read.filled().len())
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // One vectored write: rustls packs all the slices into full records (one per
        // 16 KiB), where a write per slice made a record, and a send, per FLV tag.
        let mut tls = self.tls.borrow_mut();
        once(|cx| Pin::new(&mut *tls).poll_write_vectored(cx, bufs))
    }

    fn try_flush(&self) -> io::Result<bool> {
        let mut tls = self.tls.borrow_mut();
        match once(|cx| Pin::new(&mut *tls).poll_flush(cx)) {
            Ok(()) => Ok(!tls.get_ref().1.wants_write()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn has_pending_output(&self) -> bool {
        self.tls.borrow().get_ref().1.wants_write()
    }

    fn close(&self) {
        self.tls.borrow_mut().get_mut().1.send_close_notify();
        let _ = self.try_flush();
    }

    /// Readable at once when rustls holds decrypted bytes already (a request that came
    /// with the end of the handshake), else when the socket is.
    fn readable(&self) -> Ready<'_> {
        Box::pin(std::future::poll_fn(|cx| {
            let processed = match &mut *self.tls.borrow_mut() {
                TlsStream::Server(s) => s.get_mut().1.process_new_packets(),
                TlsStream::Client(c) => c.get_mut().1.process_new_packets(),
            };
            let buffered = match processed {
                Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
                // The next read reports it.
                Err(_) => true,
            };
            if buffered {
                return Poll::Ready(Ok(()));
            }
            self.tcp.poll_read_ready(cx)
        }))
    }

    /// Writable once rustls pushed out the ciphertext it holds: waiting for the TCP
    /// socket alone would return at once while rustls, full, takes no plaintext.
    fn writable(&self) -> Ready<'_> {
        Box::pin(std::future::poll_fn(|cx| {
            let mut tls = self.tls.borrow_mut();
            Pin::new(&mut *tls).poll_flush(cx)
        }))
    }

    fn tcp(&self) -> Option<&TcpStream> {
        Some(&self.tcp)
    }
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

impl Transport for Rc<Pipe> {
    /// A pipe has no input.
    fn try_read(&self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write(bufs)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(std::future::pending())
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(async {
            Pipe::writable(self).await;
            Ok(())
        })
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
        Sock::tcp_stream(self)
    }
}

impl IntoSock for TlsStream<SharedTcp> {
    fn into_sock(self) -> Sock {
        let tcp = self.get_ref().0 .0.clone();
        Sock::new(Tls {
            tls: RefCell::new(self),
            tcp,
        })
    }
}

impl IntoSock for tokio_rustls::server::TlsStream<SharedTcp> {
    fn into_sock(self) -> Sock {
        TlsStream::from(self).into_sock()
    }
}

impl IntoSock for tokio_rustls::client::TlsStream<SharedTcp> {
    fn into_sock(self) -> Sock {
        TlsStream::from(self).into_sock()
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

/// Caps a socket's kernel send buffer (see `players.send_buffer`).
pub fn cap_send_buffer(sock: Option<&TcpStream>, bytes: usize) {
    let Some(sock) = sock else { return };
    if bytes > 0 {
        let _ = socket2::SockRef::from(sock).set_send_buffer_size(bytes);
    }
}

/// Writes queued session output (outside of playing, where the fan-out writes), and
/// what TLS still holds of it: a peer waiting for an answer gets all of it.
///
/// It writes first and waits for writability only when the socket takes nothing: an
/// answer (an HLS part, ten a second per LL-HLS viewer) almost always goes out in one
/// call, and a readiness wait before it cost a boxed future and a poll each time.
pub async fn write_all(
    sock: &Sock,
    out: &mut std::collections::VecDeque<bytes::Bytes>,
) -> io::Result<()> {
    /// Buffers per vectored write, on the stack.
    const IOVS: usize = 64;
    loop {
        // An empty buffer would make a zero-byte write that never advances.
        while out.front().is_some_and(|b| b.is_empty()) {
            out.pop_front();
        }
        if out.is_empty() {
            while !sock.try_flush()? {
                sock.writable().await?;
            }
            return Ok(());
        }
        let written = {
            let mut iov = [IoSlice::new(&[]); IOVS];
            let mut k = 0;
            for (slot, b) in iov.iter_mut().zip(out.iter()) {
                *slot = IoSlice::new(b);
                k += 1;
            }
            sock.try_write_vectored(iov.get(..k).unwrap_or_default())
        };
        let mut n = match written {
            // Nothing taken: wait until the socket may take something.
            Ok(0) => {
                sock.writable().await?;
                continue;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sock.writable().await?;
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Takes at most `per_call` bytes a write, refuses the first `refusals` writes,
    /// and counts the readiness waits asked of it.
    #[derive(Debug, Default)]
    struct Counting {
        taken: RefCell<Vec<u8>>,
        per_call: usize,
        refusals: Cell<usize>,
        waits: Cell<usize>,
    }

    impl Transport for Rc<Counting> {
        fn try_read(&self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }

        fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            if self.refusals.get() > 0 {
                self.refusals.set(self.refusals.get() - 1);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut taken = self.taken.borrow_mut();
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.per_call - n);
                taken.extend_from_slice(b.get(..k).unwrap_or_default());
                n += k;
            }
            Ok(n)
        }

        fn readable(&self) -> Ready<'_> {
            Box::pin(std::future::pending())
        }

        fn writable(&self) -> Ready<'_> {
            self.waits.set(self.waits.get() + 1);
            Box::pin(std::future::ready(Ok(())))
        }
    }

    fn queued() -> VecDeque<Bytes> {
        ["head ", "", "body", " and more"]
            .into_iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect()
    }

    #[tokio::test]
    async fn an_answer_the_socket_takes_at_once_waits_for_nothing() {
        let t = Rc::new(Counting {
            per_call: 1 << 20,
            ..Counting::default()
        });
        let sock = Sock::new(t.clone());
        let mut out = queued();
        write_all(&sock, &mut out).await.unwrap();
        assert!(out.is_empty());
        assert_eq!(&t.taken.borrow()[..], b"head body and more");
        assert_eq!(t.waits.get(), 0);
    }

    #[tokio::test]
    async fn a_refused_or_short_write_waits_and_goes_on() {
        let t = Rc::new(Counting {
            per_call: 3,
            refusals: Cell::new(2),
            ..Counting::default()
        });
        let sock = Sock::new(t.clone());
        let mut out = queued();
        write_all(&sock, &mut out).await.unwrap();
        assert!(out.is_empty());
        assert_eq!(&t.taken.borrow()[..], b"head body and more");
        assert_eq!(
            t.waits.get(),
            2,
            "one wait per refusal, none per short write"
        );
    }
}
