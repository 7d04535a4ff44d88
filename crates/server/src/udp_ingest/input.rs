//! One ingest's task: silent (waiting for a datagram) or publishing (a [`Session`]),
//! for as long as its worker runs.

use super::session::Session;
use super::{Bound, MAX_DATAGRAM};
use crate::ctx::Ctx;
use crate::ops::EndReason;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::UdpSocket;

/// How long an input waits after its publishing was refused or kicked before the next
/// datagram may publish again: a stream in use is not asked for 300 times a second.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Datagrams read per wake-up before the worker's other tasks get a turn.
pub(super) const BATCH: usize = 64;

thread_local! {
    /// The worker's receive buffer, shared by its inputs (never held across an await).
    static BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; MAX_DATAGRAM].into_boxed_slice());
}

/// Reads what is waiting on `sock` (at most `max` datagrams) into `each`; how many.
pub(super) fn read_batch(
    sock: &UdpSocket,
    max: usize,
    mut each: impl FnMut(&[u8], std::net::SocketAddr),
) -> io::Result<usize> {
    BUF.with_borrow_mut(|buf| {
        let mut n = 0;
        while n < max {
            match sock.try_recv_from(buf) {
                Ok((len, from)) => {
                    n += 1;
                    each(buf.get(..len).unwrap_or_default(), from);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if n == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(n)
    })
}

pub(super) async fn run(ctx: Rc<Ctx>, bound: Bound) {
    let Bound {
        entry: input,
        socket,
    } = bound;
    let socket = match UdpSocket::from_std(socket) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot register the ingest's socket: {e}");
            return;
        }
    };
    tracing::info!(bound = %input.info.bound, "ingest listening");
    let counters = &input.info.counters;
    loop {
        // Silent: the first datagram starts a session (and is its first input).
        let mut first = None;
        while first.is_none() {
            if let Err(e) = socket.readable().await {
                tracing::warn!("ingest socket: {e}");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
            // One datagram: those after it wait in the socket for the session.
            let read = read_batch(&socket, 1, |d, from| {
                counters.datagrams.fetch_add(1, Ordering::Relaxed);
                counters.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                first = Some((d.to_vec(), from));
            });
            if let Err(e) = read {
                // Readiness stays set after an error: wait rather than spin.
                tracing::warn!("ingest receive: {e}");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
        let Some((datagram, from)) = first else {
            continue;
        };
        let mut session = match Session::start(&ctx, &input, from).await {
            Ok(s) => s,
            Err(refused) => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(sender = %from, "ingest: publishing refused: {refused}");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        session.datagram(&datagram, from);
        let reason = session.serve(&socket).await;
        tracing::info!(reason = reason.as_str(), "ingest stopped publishing");
        session.end(reason);
        if matches!(reason, EndReason::Kicked | EndReason::IoError) {
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}
