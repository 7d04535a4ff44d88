//! An in-memory connection: a [`Transport`] for the server's side, a [`Peer`] for the
//! test's. What the server writes waits in a bounded window (the peer's socket
//! buffers), so a peer that does not read fills it and the server sees `WouldBlock`,
//! as it would from a socket; the peer's own writes are not bounded.
//!
//! # Invariants
//! - Either end dropped closes both directions: the other end reads what is left,
//!   then the end (`Ok(0)`, `None`); a write to a closed end is a broken pipe.
//! - One waker per direction and side, as the transport seam's contract allows.

use crate::io::sock::{Ready, Sock, Transport};
use bytes::{Buf, Bytes, BytesMut};
use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The bytes of one direction.
#[derive(Debug, Default)]
struct Pipe {
    data: RefCell<BytesMut>,
    /// Most bytes it holds (only for what the server writes).
    window: Cell<usize>,
    closed: Cell<bool>,
    reader: RefCell<Option<Waker>>,
    writer: RefCell<Option<Waker>>,
}

impl Pipe {
    fn new(window: usize) -> Rc<Pipe> {
        let pipe = Pipe::default();
        pipe.window.set(window);
        Rc::new(pipe)
    }

    fn room(&self) -> usize {
        self.window.get().saturating_sub(self.data.borrow().len())
    }

    fn wake(slot: &RefCell<Option<Waker>>) {
        if let Some(w) = slot.borrow_mut().take() {
            w.wake();
        }
    }

    fn close(&self) {
        self.closed.set(true);
        Pipe::wake(&self.reader);
        Pipe::wake(&self.writer);
    }

    /// Ready when `ready` says so, or once closed; otherwise `slot` is woken.
    fn poll(
        &self,
        cx: &mut Context<'_>,
        slot: &RefCell<Option<Waker>>,
        ready: bool,
    ) -> Poll<io::Result<()>> {
        if ready || self.closed.get() {
            return Poll::Ready(Ok(()));
        }
        *slot.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A connection: the server's [`Sock`] and the test's [`Peer`]; the server may have
/// `window` bytes unread by the peer.
pub fn pair(window: usize) -> (Sock, Peer) {
    let up = Pipe::new(usize::MAX);
    let down = Pipe::new(window);
    let server = ServerEnd {
        up: up.clone(),
        down: down.clone(),
    };
    (Sock::new(server), Peer { up, down })
}

/// The server's end.
#[derive(Debug)]
struct ServerEnd {
    /// Peer to server.
    up: Rc<Pipe>,
    /// Server to peer.
    down: Rc<Pipe>,
}

impl Drop for ServerEnd {
    fn drop(&mut self) {
        self.up.close();
        self.down.close();
    }
}

impl Transport for ServerEnd {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut data = self.up.data.borrow_mut();
        if data.is_empty() {
            return match self.up.closed.get() {
                true => Ok(0),
                false => Err(io::ErrorKind::WouldBlock.into()),
            };
        }
        let n = buf.len().min(data.len());
        buf[..n].copy_from_slice(&data[..n]);
        data.advance(n);
        Ok(n)
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.down.closed.get() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut room = self.down.room();
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = 0;
        let mut data = self.down.data.borrow_mut();
        for b in bufs {
            let take = b.len().min(room);
            data.extend_from_slice(&b[..take]);
            n += take;
            room -= take;
            if room == 0 {
                break;
            }
        }
        drop(data);
        Pipe::wake(&self.down.reader);
        Ok(n)
    }

    fn readable(&self) -> Ready<'_> {
        Box::pin(std::future::poll_fn(|cx| {
            let ready = !self.up.data.borrow().is_empty();
            self.up.poll(cx, &self.up.reader, ready)
        }))
    }

    fn writable(&self) -> Ready<'_> {
        Box::pin(std::future::poll_fn(|cx| {
            let ready = self.down.room() > 0;
            self.down.poll(cx, &self.down.writer, ready)
        }))
    }
}

/// The test's end of a connection.
#[derive(Debug)]
pub struct Peer {
    up: Rc<Pipe>,
    down: Rc<Pipe>,
}

impl Peer {
    /// Sends `bytes` to the server (dropped once the connection is closed).
    pub fn send(&self, bytes: &[u8]) {
        if !self.up.closed.get() {
            self.up.data.borrow_mut().extend_from_slice(bytes);
            Pipe::wake(&self.up.reader);
        }
    }

    /// What the server wrote since the last call; `None` once it closed the
    /// connection and everything was read.
    pub async fn recv(&self) -> Option<Bytes> {
        std::future::poll_fn(|cx| {
            let mut data = self.down.data.borrow_mut();
            if !data.is_empty() {
                let bytes = data.split().freeze();
                drop(data);
                Pipe::wake(&self.down.writer);
                return Poll::Ready(Some(bytes));
            }
            if self.down.closed.get() {
                return Poll::Ready(None);
            }
            *self.down.reader.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// How many bytes the server may have written that this peer has not read.
    pub fn set_window(&self, window: usize) {
        self.down.window.set(window);
        Pipe::wake(&self.down.writer);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.up.close();
        self.down.close();
    }
}
