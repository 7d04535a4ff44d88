//! The socket of one UDP output (a push of MPEG-TS to `udp://` or `rtp://`): bound to
//! any local address of the target's family, connected to the target, with a group's
//! TTL and sending interface set.
//!
//! Why here: the URL is parsed sans-IO (`sluice_media::ts::TsOutUrl`); this is the part
//! that asks the kernel. Connected, so that each send names no address and a unicast
//! receiver's ICMP "port unreachable" comes back as the next send's `ECONNREFUSED`,
//! which the push counts and sends on past (a receiver that starts later gets the
//! stream).
//!
//! # Invariants
//! - The socket is non-blocking and never bound to a fixed port.
//! - Errors name the target and the step that failed.

use sluice_media::ts::TsOutUrl;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

/// Send buffer asked for: half a second at 16 Mbit/s, so a worker busy for a moment
/// does not see `EAGAIN`. The kernel caps it at `net.core.wmem_max`.
const SEND_BUFFER: usize = 1 << 20;

/// Why a UDP output's socket could not be made.
#[derive(Debug, thiserror::Error)]
pub enum UdpOutError {
    #[error("socket for {target}: {source}")]
    Socket {
        target: SocketAddr,
        source: io::Error,
    },
    #[error("multicast TTL {ttl} for {target}: {source}")]
    Ttl {
        target: SocketAddr,
        ttl: u8,
        source: io::Error,
    },
    #[error("multicast interface {iface} for {target}: {source}")]
    Interface {
        target: SocketAddr,
        iface: std::net::Ipv4Addr,
        source: io::Error,
    },
    #[error("connect to {target}: {source}")]
    Connect {
        target: SocketAddr,
        source: io::Error,
    },
}

/// The connected, non-blocking socket that sends to `url`'s target.
pub fn open(url: &TsOutUrl) -> Result<std::net::UdpSocket, UdpOutError> {
    let target = url.addr;
    let socket_err = |source| UdpOutError::Socket { target, source };
    let socket = Socket::new(
        Domain::for_address(target),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(socket_err)?;
    // Best effort: a smaller buffer only makes EAGAIN likelier, which the send awaits.
    let _ = socket.set_send_buffer_size(SEND_BUFFER);
    socket.set_nonblocking(true).map_err(socket_err)?;
    socket.bind(&url.local_any().into()).map_err(socket_err)?;
    if url.is_multicast() {
        if let Some(ttl) = url.ttl {
            let ttl_err = |source| UdpOutError::Ttl {
                target,
                ttl,
                source,
            };
            match target {
                SocketAddr::V4(_) => socket.set_multicast_ttl_v4(u32::from(ttl)),
                SocketAddr::V6(_) => socket.set_multicast_hops_v6(u32::from(ttl)),
            }
            .map_err(ttl_err)?;
        }
        if let Some(iface) = url.iface {
            socket
                .set_multicast_if_v4(&iface)
                .map_err(|source| UdpOutError::Interface {
                    target,
                    iface,
                    source,
                })?;
        }
    }
    socket
        .connect(&target.into())
        .map_err(|source| UdpOutError::Connect { target, source })?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicast_socket_reaches_its_target() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let url = TsOutUrl::parse(&format!("udp://{}", rx.local_addr().unwrap())).unwrap();
        let tx = open(&url).unwrap();
        tx.send(&[0x47; 188]).unwrap();
        let mut buf = [0u8; 256];
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), 188);
    }

    #[test]
    fn group_options_are_set() {
        let url = TsOutUrl::parse("udp://239.255.0.1:5000?ttl=3&iface=127.0.0.1").unwrap();
        let tx = Socket::from(open(&url).unwrap());
        assert_eq!(tx.multicast_ttl_v4().unwrap(), 3);
        assert_eq!(tx.multicast_if_v4().unwrap(), std::net::Ipv4Addr::LOCALHOST);
    }
}
