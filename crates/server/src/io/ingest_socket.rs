//! The socket of one UDP ingest: bound to its address and, for a multicast group,
//! joined to it (any source, or source-specific) on the interface its URL names.
//!
//! Why here: the URL is parsed sans-IO (`sluice_media::ts::UdpUrl`); this is the part
//! that asks the kernel. Joins by interface name, IPv6 joins and every source-specific
//! join go through the protocol-independent `MCAST_JOIN_GROUP` and
//! `MCAST_JOIN_SOURCE_GROUP` (RFC 3678) with the interface's index; an IPv4 interface
//! given by its address uses `IP_ADD_MEMBERSHIP` / `IP_ADD_SOURCE_MEMBERSHIP`.
//!
//! # Invariants
//! - A group's socket is bound to the group's address (so it receives that group only)
//!   with `SO_REUSEADDR`, so other receivers on the host may join it too; a unicast
//!   address is bound plainly, and a port in use is an error.
//! - Errors name the address (and the join that failed).

use sluice_media::ts::{Interface, UdpUrl};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// Receive buffer asked for: a quarter of a second at 64 Mbit/s, so a worker busy for
/// a moment loses nothing. The kernel caps it at `net.core.rmem_max`.
const RECEIVE_BUFFER: usize = 2 << 20;

/// Why an ingest's socket could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IngestSocketError {
    #[error("bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("join {group} (sources {sources:?}): {source}")]
    Join {
        group: IpAddr,
        sources: Vec<IpAddr>,
        source: io::Error,
    },
    #[error("interface {name:?}: {source}")]
    Interface { name: String, source: io::Error },
    #[error("an IPv6 group's interface is given by its name, not an address")]
    V6InterfaceAddress,
}

/// The bound (and joined) non-blocking socket of `url`.
pub fn bind(url: &UdpUrl) -> Result<std::net::UdpSocket, IngestSocketError> {
    let addr = url.addr;
    let bind_err = |source| IngestSocketError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(bind_err)?;
    if url.is_multicast() {
        socket.set_reuse_address(true).map_err(bind_err)?;
    }
    // Best effort: a smaller buffer only makes loss under load likelier.
    let _ = socket.set_recv_buffer_size(RECEIVE_BUFFER);
    socket.set_nonblocking(true).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
    if url.is_multicast() {
        join(&socket, url)?;
    }
    Ok(socket.into())
}

fn join(socket: &Socket, url: &UdpUrl) -> Result<(), IngestSocketError> {
    let group = url.addr.ip();
    let join_err = |source| IngestSocketError::Join {
        group,
        sources: url.sources.clone(),
        source,
    };
    let index = match (&url.interface, group) {
        (Some(Interface::Addr(IpAddr::V4(local))), IpAddr::V4(g)) => {
            if url.sources.is_empty() {
                return socket.join_multicast_v4(&g, local).map_err(join_err);
            }
            for s in &url.sources {
                if let IpAddr::V4(s) = s {
                    socket.join_ssm_v4(s, &g, local).map_err(join_err)?;
                }
            }
            return Ok(());
        }
        (Some(Interface::Addr(_)), _) => return Err(IngestSocketError::V6InterfaceAddress),
        (Some(Interface::Name(name)), _) => rustix::net::netdevice::name_to_index(socket, name)
            .map_err(|e| IngestSocketError::Interface {
                name: name.clone(),
                source: e.into(),
            })?,
        (None, _) => 0,
    };
    let level = match group {
        IpAddr::V4(_) => libc::IPPROTO_IP,
        IpAddr::V6(_) => libc::IPPROTO_IPV6,
    };
    let (group_addr, _) = crate::io::udp_send::sockaddr(SocketAddr::new(group, 0));
    if url.sources.is_empty() {
        let req = libc::group_req {
            gr_interface: index,
            gr_group: group_addr,
        };
        return setsockopt(socket, level, libc::MCAST_JOIN_GROUP, &req).map_err(join_err);
    }
    for &s in &url.sources {
        let (source_addr, _) = crate::io::udp_send::sockaddr(SocketAddr::new(s, 0));
        let req = libc::group_source_req {
            gsr_interface: index,
            gsr_group: group_addr,
            gsr_source: source_addr,
        };
        setsockopt(socket, level, libc::MCAST_JOIN_SOURCE_GROUP, &req).map_err(join_err)?;
    }
    Ok(())
}

fn setsockopt<T>(
    socket: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialized `T` for the duration of the call, and the
    // length passed is its size; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unicast_port_in_use_is_an_error_naming_it() {
        let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let url = UdpUrl::parse(&format!("udp://{}", taken.local_addr().unwrap())).unwrap();
        let err = bind(&url).unwrap_err();
        assert!(
            err.to_string()
                .contains(&taken.local_addr().unwrap().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_unicast_socket_receives() {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let sock = bind(&UdpUrl::parse(&format!("udp://{addr}")).unwrap()).unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"ts", addr).unwrap();
        sock.set_nonblocking(false).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0; 8];
        assert_eq!(sock.recv(&mut buf).unwrap(), 2);
    }
}
