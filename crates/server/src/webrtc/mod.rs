//! WebRTC players (WHEP): an HTTP request answers the viewer's SDP offer on whichever
//! worker took it; the session then runs on the worker whose UDP socket its first
//! binding request reaches (every worker has a SO_REUSEPORT socket on the one port,
//! and the kernel keeps a 4-tuple on one of them), found by the ICE username fragment
//! the answer gave it. From there the session plays the stream through the fan-out
//! like any player: its transport (`session::PeerOut`) takes the stream's shared RTP
//! packets and sends each with the viewer's header and SRTP.
//!
//! Publishers (WHIP) take the same path; their session publishes the stream on that
//! worker, depacketizing the peer's RTP like an RTSP publisher's.
//!
//! Files: `registry` (answered sessions waiting for their first datagram, and the
//! resources DELETE and PATCH name, the ICE restarts a PATCH asked for), `udp` (a worker's socket: sessions by address, then by
//! ufrag), `session` (one peer's task and its transport), `ingest` (a publisher's RTP
//! to frames), `whep` and `whip` (answering offers; their HTTP side is in `http`).

mod ingest;
mod registry;
mod session;
pub mod tcp;
mod udp;
pub mod whep;
pub mod whip;

pub use registry::Registry;
pub use udp::{bind_sockets, sweep, WebrtcDemux, MAX_DATAGRAM};

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{Duration, Instant};

/// Video packets sent again on a viewer's NACK, and NACKed packets the history no
/// longer had (metrics).
pub static RESENT: AtomicU64 = AtomicU64::new(0);
pub static RESEND_MISSES: AtomicU64 = AtomicU64::new(0);

/// Times a session's task was woken (metrics): its timer, its peer's events, a
/// keyframe wanted, the end of its play. Media a WHIP publisher sends does not wake it.
pub static TASK_WAKES: AtomicU64 = AtomicU64::new(0);

/// Sessions by how much of them str0m runs (metrics): `[str0m, settled]`, where a
/// settled one is a viewer whose str0m is dropped (`session::Held`).
pub static SESSIONS: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

/// The host candidates of the UDP port `bound`: the configured addresses (IPs or
/// names, resolved now), else the bound IP when it is one, else this machine's IPv4
/// interface addresses (loopback last).
pub fn candidates(configured: &[String], bound: SocketAddr) -> Vec<SocketAddr> {
    if !configured.is_empty() {
        return configured
            .iter()
            .flat_map(|host| match host.parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, bound.port())],
                Err(_) => (host.as_str(), bound.port())
                    .to_socket_addrs()
                    .map(|a| a.collect())
                    .unwrap_or_else(|e| {
                        tracing::warn!("webrtc candidate {host}: {e}");
                        Vec::new()
                    }),
            })
            .collect();
    }
    if !bound.ip().is_unspecified() {
        return vec![bound];
    }
    let mut ips = interface_addresses();
    ips.sort_by_key(|ip| ip.is_loopback());
    ips.into_iter()
        .map(|ip| SocketAddr::new(ip, bound.port()))
        .collect()
}

/// This machine's IPv4 interface addresses.
fn interface_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read, then free once.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return out;
        }
        let mut at = list;
        while !at.is_null() {
            let entry = &*at;
            let up = entry.ifa_flags & (libc::IFF_UP as libc::c_uint) != 0;
            if up
                && !entry.ifa_addr.is_null()
                && i32::from((*entry.ifa_addr).sa_family) == libc::AF_INET
            {
                let sin = &*(entry.ifa_addr as *const libc::sockaddr_in);
                out.push(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
            }
            at = entry.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    out
}

/// How long each STUN server has to answer, and how often it is asked in that time.
const STUN_WAIT: Duration = Duration::from_millis(1500);
const STUN_TRIES: u32 = 3;

/// The addresses STUN `servers` (`host:port`) see the UDP port at, asked from the
/// port's sockets before the workers start (a server's answer may reach any socket of
/// the SO_REUSEPORT group, so all are read). A server that does not answer in time
/// is logged and skipped.
pub fn discover(sockets: &[UdpSocket], servers: &[String]) -> Vec<SocketAddr> {
    let mut found: Vec<SocketAddr> = Vec::new();
    let Some(first) = sockets.first() else {
        return found;
    };
    for server in servers {
        let target = match server.to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(a)) => a,
            Ok(None) | Err(_) => {
                tracing::warn!(server, "webrtc: STUN server not resolved");
                continue;
            }
        };
        let transaction: [u8; 12] = rand::random();
        let request = sluice_webrtc::stun::binding_request(transaction);
        let mut answer = None;
        'tries: for _ in 0..STUN_TRIES {
            if let Err(e) = first.send_to(&request, target) {
                tracing::warn!(server, "webrtc: STUN request not sent: {e}");
                break;
            }
            let until = Instant::now() + STUN_WAIT / STUN_TRIES;
            while Instant::now() < until {
                let mut buf = [0u8; 576];
                for sock in sockets {
                    // The sockets are non-blocking: nothing there is WouldBlock.
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let mapped = sluice_webrtc::stun::mapped_address(&buf[..n], &transaction);
                        if from == target && mapped.is_some() {
                            answer = mapped;
                            break 'tries;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        match answer {
            Some(a) => {
                tracing::info!(server, address = %a, "webrtc: STUN says the UDP port is at");
                if !found.contains(&a) {
                    found.push(a);
                }
            }
            None => tracing::warn!(server, "webrtc: no answer from the STUN server"),
        }
    }
    found
}
