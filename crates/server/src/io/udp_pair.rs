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

    #[test]
    fn rtp_port_ranges() {
        let parse = |s: &str| s.parse::<RtpPorts>().map(RtpPorts::range);
        assert_eq!(parse("30000-30199"), Ok(Some((30000, 30199))));
        assert_eq!(parse("0"), Ok(Some((0, 0))));
        assert_eq!(parse("off"), Ok(None));
        assert_eq!(RtpPorts::Range(30000, 30199).to_string(), "30000-30199");
        for bad in ["30001-30100", "30000-30000", "x-y", "30000", "0-10", ""] {
            assert!(bad.parse::<RtpPorts>().is_err(), "{bad}");
        }
    }
}

/// Where RTSP's RTP/RTCP pairs may bind (`rtsp.rtp_ports`): off, ports the kernel
/// chooses (`0`), or a range `A-B` with `A` even (each pair takes an even port and the
/// next). Parsed where the setting is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtpPorts {
    Off,
    Any,
    Range(u16, u16),
}

/// An `rtsp.rtp_ports` value that is no port range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not \"A-B\" (A even, B > A), \"0\" or \"off\"")]
pub struct RtpPortsError(String);

impl RtpPorts {
    pub const OFF: RtpPorts = RtpPorts::Off;

    /// The range [`bind_pair`] takes (`(0, 0)`: the kernel's choice), `None` when off.
    pub fn range(self) -> Option<(u16, u16)> {
        match self {
            RtpPorts::Off => None,
            RtpPorts::Any => Some((0, 0)),
            RtpPorts::Range(a, b) => Some((a, b)),
        }
    }
}

impl std::str::FromStr for RtpPorts {
    type Err = RtpPortsError;
    fn from_str(s: &str) -> Result<RtpPorts, RtpPortsError> {
        let bad = || RtpPortsError(s.to_string());
        match s.trim() {
            "off" => Ok(RtpPorts::Off),
            "0" => Ok(RtpPorts::Any),
            range => {
                let (a, b) = range.split_once('-').ok_or_else(bad)?;
                let a: u16 = a.trim().parse().map_err(|_| bad())?;
                let b: u16 = b.trim().parse().map_err(|_| bad())?;
                if a & 1 != 0 || b <= a || a == 0 {
                    return Err(bad());
                }
                Ok(RtpPorts::Range(a, b))
            }
        }
    }
}

impl std::fmt::Display for RtpPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RtpPorts::Off => f.write_str("off"),
            RtpPorts::Any => f.write_str("0"),
            RtpPorts::Range(a, b) => write!(f, "{a}-{b}"),
        }
    }
}

impl serde::Serialize for RtpPorts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RtpPorts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RtpPorts, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
