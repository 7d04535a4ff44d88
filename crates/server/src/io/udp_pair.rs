//! An RTP socket on an even UDP port and its RTCP socket on the next (RFC 3550 §11):
//! what RTSP's server side binds per worker and an RTSP pull binds per track.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// Attempts at a kernel-chosen even/odd port pair.
const PAIR_ATTEMPTS: usize = 64;

/// Binds an RTP socket on an even port and RTCP on the next, within `range`
/// (`(0, 0)`: ports the kernel chooses).
pub fn bind_pair(ip: IpAddr, range: (u16, u16)) -> io::Result<(UdpSocket, UdpSocket)> {
    let bind = |port: u16| UdpSocket::bind(SocketAddr::new(ip, port));
    if range == (0, 0) {
        for _ in 0..PAIR_ATTEMPTS {
            let rtp = bind(0)?;
            let port = rtp.local_addr()?.port();
            if port & 1 == 0 && port < u16::MAX {
                if let Ok(rtcp) = bind(port + 1) {
                    return Ok((rtp, rtcp));
                }
            }
        }
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "no free even/odd UDP port pair",
        ));
    }
    let (first, last) = range;
    let mut port = first;
    while port < last {
        if let (Ok(rtp), Ok(rtcp)) = (bind(port), bind(port + 1)) {
            return Ok((rtp, rtcp));
        }
        port = port.saturating_add(2);
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no free UDP port pair in {first}-{last}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_even_then_odd() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let (rtp, rtcp) = bind_pair(ip, (0, 0)).unwrap();
        let p = rtp.local_addr().unwrap().port();
        assert_eq!(p % 2, 0);
        assert_eq!(rtcp.local_addr().unwrap().port(), p + 1);
        // The same range again skips the pair in use.
        let (rtp2, _) = bind_pair(ip, (p, p.saturating_add(10))).unwrap();
        assert_ne!(rtp2.local_addr().unwrap().port(), p);
    }
}
