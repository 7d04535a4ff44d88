//! A worker's WebRTC UDP socket: datagrams to the session of their sender's address;
//! a binding request from an address not seen yet to the answered session its ICE
//! ufrag names, which then starts on this worker. Anything else is dropped unread.

use super::registry::Registry;
use super::session::{self, Sessions};
use crate::ctx::Ctx;
use sluice_webrtc::stun;
use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Largest datagram read; WebRTC keeps packets under the path MTU.
const MAX_DATAGRAM: usize = 2048;

/// One socket per worker on `addr`, all sharing its port (SO_REUSEPORT), non-blocking;
/// and the address they are bound to (the port chosen when `addr` asks for 0).
pub fn bind_sockets(
    addr: SocketAddr,
    workers: usize,
) -> io::Result<(SocketAddr, Vec<StdUdpSocket>)> {
    // A plain bind first: SO_REUSEPORT would share the port with another server left
    // running and silently split its sessions.
    if addr.port() != 0 {
        drop(StdUdpSocket::bind(addr)?);
    }
    let first = bind(addr)?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(bound)?);
    }
    Ok((bound, all))
}

fn bind(addr: SocketAddr) -> io::Result<StdUdpSocket> {
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

/// Serves this worker's socket until the worker stops.
pub async fn serve(ctx: Rc<Ctx>, registry: Arc<Registry>, socket: StdUdpSocket) {
    let sock = match UdpSocket::from_std(socket) {
        Ok(s) => Rc::new(s),
        Err(e) => return tracing::error!("webrtc: cannot register the UDP socket: {e}"),
    };
    let sessions: Sessions = Rc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        let (n, from) = tokio::select! {
            r = sock.recv_from(&mut buf) => match r {
                Ok(r) => r,
                // An ICMP error from an earlier send (a viewer gone): nothing to read.
                Err(_) => continue,
            },
            _ = sweep.tick() => {
                if ctx.worker == 0 {
                    let gone = registry.sweep(Instant::now());
                    if gone > 0 {
                        tracing::info!(gone, "webrtc: answered sessions that never started ICE dropped");
                    }
                }
                continue;
            }
        };
        let datagram = buf.get(..n).unwrap_or_default();
        let known = sessions.borrow().get(&from).cloned();
        let session = match known {
            Some(s) => s,
            None => {
                let Some((ours, _)) = stun::binding_username(datagram) else {
                    continue;
                };
                let Some(pending) = registry.take(ours) else {
                    continue;
                };
                let s = session::start(&ctx, &sock, &registry, pending, from, &sessions);
                sessions.borrow_mut().insert(from, s.clone());
                s
            }
        };
        session.receive(from, datagram);
    }
}
