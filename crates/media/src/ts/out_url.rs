//! [`TsOutUrl`]: where a stream's MPEG-TS is sent over UDP, as a push target names it:
//! `udp://HOST:PORT[?OPTIONS]` (TS in datagrams) or `rtp://HOST:PORT[?OPTIONS]` (TS in
//! RTP, RFC 2250), to one receiver or a multicast group.
//!
//! Why a parser of its own (beside the ingest's [`super::UdpUrl`]): a sender's options
//! differ (TTL, the interface to send on, packets per datagram, a constant mux rate),
//! and a typo must be a configuration error naming the part, not datagrams sent
//! somewhere unexpected. It is sans-IO: the socket is the caller's.
//!
//! # Grammar
//! `SCHEME://HOST:PORT[?KEY=VALUE[&KEY=VALUE]...]`, SCHEME `udp` or `rtp`; HOST an IPv4
//! address or a bracketed IPv6 one, no names (a name resolved at start would hide a
//! change of address). Keys:
//! - `ttl=N` (1..=255): the multicast TTL (hops); only with a group. Default 1 (the
//!   kernel's default: the group stays on the local network).
//! - `iface=IP` (also `localaddr`, ffmpeg's name): the address of the interface to send
//!   a group's datagrams on (`IP_MULTICAST_IF`); only with an IPv4 group.
//! - `pkts=N` (1..=[`MAX_PACKETS_PER_DATAGRAM`]): TS packets per datagram, default 7.
//! - `bitrate=BITS` ([`MIN_BITRATE`]..=[`MAX_BITRATE`]): a constant mux rate in bits per
//!   second, filled with null packets; absent, the stream goes out at its own (variable)
//!   rate, paced by its PCR.
//!
//! # Invariants
//! - A parsed URL can be used as it is: port above 0, options in range, a group's
//!   options only for a group.
//! - Nothing panics on any input; inputs longer than [`MAX_OUT_URL_LEN`] are refused.
//! - [`TsOutUrl`]'s `Display` prints a URL that parses back to the same value.

use super::udp_url::Carriage;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Longest URL accepted: an address and four options fit many times over.
pub const MAX_OUT_URL_LEN: usize = 512;
/// Most TS packets per datagram: seven (1316 bytes, 1328 with RTP's header) is the
/// most that fits a 1500-byte Ethernet frame, which every IPTV receiver expects.
pub const MAX_PACKETS_PER_DATAGRAM: usize = 7;
/// Lowest constant rate: below it a stream with video cannot fit, and the null packets'
/// datagrams come too seldom to pace anything.
pub const MIN_BITRATE: u64 = 100_000;
/// Highest constant rate: far above any one program, and it keeps the pacer's
/// arithmetic far from overflow.
pub const MAX_BITRATE: u64 = 1_000_000_000;

/// A parsed UDP output target. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TsOutUrl {
    /// Plain TS or TS in RTP.
    pub carriage: Carriage,
    /// Where datagrams go: a receiver or a group, with its port.
    pub addr: SocketAddr,
    /// Multicast TTL; `None`: the kernel's default (1).
    pub ttl: Option<u8>,
    /// The interface address a group's datagrams leave by; `None`: the routing table's.
    pub iface: Option<Ipv4Addr>,
    /// TS packets per datagram.
    pub packets: usize,
    /// Constant mux rate in bits per second; `None`: the stream's own rate.
    pub bitrate: Option<u64>,
}

/// Why a URL was refused; each names the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TsOutUrlError {
    /// Longer than [`MAX_OUT_URL_LEN`].
    #[error("URL of {len} bytes exceeds {MAX_OUT_URL_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Neither `udp://` nor `rtp://`.
    #[error("scheme must be udp:// or rtp://")]
    Scheme,
    /// The host and port do not parse (a name, no port, IPv6 without brackets).
    #[error("{0:?} is not an IP address and port (IPv6 in brackets, no names)")]
    Address(String),
    /// Port 0: datagrams need a port to go to.
    #[error("port 0: the receiver's port is needed")]
    PortZero,
    /// An option this grammar does not have.
    #[error("unknown option {0:?} (ttl, iface, pkts, bitrate)")]
    UnknownOption(String),
    /// An option given twice.
    #[error("option {0} given twice")]
    Repeated(&'static str),
    /// A value out of its range or not a number.
    #[error("{key}={value:?}: expected {expected}")]
    Value {
        /// The option.
        key: &'static str,
        /// What was given (at most 32 characters of it).
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// `ttl` or `iface` for an address that is not a group.
    #[error("{what} only applies to a multicast group")]
    NotMulticast {
        /// The option.
        what: &'static str,
    },
    /// `iface` for an IPv6 group: it is chosen by an interface index, not an address;
    /// the routing table's route for the group decides.
    #[error("iface is for IPv4 groups: an IPv6 group leaves by its route")]
    V6Interface,
}

impl TsOutUrl {
    /// Parses `url`; see the module docs for the grammar.
    pub fn parse(url: &str) -> Result<TsOutUrl, TsOutUrlError> {
        if url.len() > MAX_OUT_URL_LEN {
            return Err(TsOutUrlError::TooLong { len: url.len() });
        }
        let (carriage, rest) = Carriage::split(url).ok_or(TsOutUrlError::Scheme)?;
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| TsOutUrlError::Address(authority.chars().take(64).collect()))?;
        if addr.port() == 0 {
            return Err(TsOutUrlError::PortZero);
        }
        let mut parsed = TsOutUrl {
            carriage,
            addr,
            ttl: None,
            iface: None,
            packets: MAX_PACKETS_PER_DATAGRAM,
            bitrate: None,
        };
        let mut seen_packets = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "ttl" => {
                    let ttl = number(value, "ttl", 1, 255, "a TTL of 1 to 255")?;
                    once(&mut parsed.ttl, ttl as u8, "ttl")?;
                }
                "iface" | "localaddr" => {
                    let ip: Ipv4Addr = value.parse().map_err(|_| TsOutUrlError::Value {
                        key: "iface",
                        value: clip(value),
                        expected: "the IPv4 address of an interface",
                    })?;
                    once(&mut parsed.iface, ip, "iface")?;
                }
                "pkts" => {
                    if seen_packets {
                        return Err(TsOutUrlError::Repeated("pkts"));
                    }
                    seen_packets = true;
                    let max = MAX_PACKETS_PER_DATAGRAM as u64;
                    parsed.packets = number(value, "pkts", 1, max, "1 to 7 TS packets")? as usize;
                }
                "bitrate" => {
                    let expected = "bits per second, 100000 to 1000000000";
                    let rate = number(value, "bitrate", MIN_BITRATE, MAX_BITRATE, expected)?;
                    once(&mut parsed.bitrate, rate, "bitrate")?;
                }
                other => return Err(TsOutUrlError::UnknownOption(clip(other))),
            }
        }
        let group = addr.ip().is_multicast();
        if !group && parsed.ttl.is_some() {
            return Err(TsOutUrlError::NotMulticast { what: "ttl" });
        }
        if parsed.iface.is_some() && !group {
            return Err(TsOutUrlError::NotMulticast { what: "iface" });
        }
        if parsed.iface.is_some() && addr.is_ipv6() {
            return Err(TsOutUrlError::V6Interface);
        }
        Ok(parsed)
    }

    /// Whether datagrams go to a multicast group.
    pub fn is_multicast(&self) -> bool {
        self.addr.ip().is_multicast()
    }

    /// Whether the TS travels in RTP.
    pub fn is_rtp(&self) -> bool {
        self.carriage == Carriage::Rtp
    }

    /// The address datagrams are sent from: any address of the target's family.
    pub fn local_any(&self) -> SocketAddr {
        let ip = match self.addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        SocketAddr::new(ip, 0)
    }
}

impl fmt::Display for TsOutUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.carriage.scheme(), self.addr)?;
        let mut sep = '?';
        let mut opt = |f: &mut fmt::Formatter<'_>, kv: String| {
            let r = write!(f, "{sep}{kv}");
            sep = '&';
            r
        };
        if let Some(ttl) = self.ttl {
            opt(f, format!("ttl={ttl}"))?;
        }
        if let Some(iface) = self.iface {
            opt(f, format!("iface={iface}"))?;
        }
        if self.packets != MAX_PACKETS_PER_DATAGRAM {
            opt(f, format!("pkts={}", self.packets))?;
        }
        if let Some(rate) = self.bitrate {
            opt(f, format!("bitrate={rate}"))?;
        }
        Ok(())
    }
}

/// A decimal number in `min..=max`.
fn number(
    value: &str,
    key: &'static str,
    min: u64,
    max: u64,
    expected: &'static str,
) -> Result<u64, TsOutUrlError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| TsOutUrlError::Value {
            key,
            value: clip(value),
            expected,
        })
}

fn once<T>(slot: &mut Option<T>, value: T, key: &'static str) -> Result<(), TsOutUrlError> {
    if slot.is_some() {
        return Err(TsOutUrlError::Repeated(key));
    }
    *slot = Some(value);
    Ok(())
}

/// What an error quotes of the input: bounded, so a log line stays a line.
fn clip(s: &str) -> String {
    s.chars().take(32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_unicast_defaults() {
        let u = TsOutUrl::parse("udp://127.0.0.1:5000").unwrap();
        assert_eq!(u.carriage, Carriage::Plain);
        assert_eq!(u.addr, "127.0.0.1:5000".parse().unwrap());
        assert_eq!(
            (u.ttl, u.iface, u.packets, u.bitrate),
            (None, None, 7, None)
        );
        assert!(!u.is_multicast() && !u.is_rtp());
        assert_eq!(u.to_string(), "udp://127.0.0.1:5000");
    }

    #[test]
    fn multicast_with_every_option() {
        let text = "rtp://239.1.2.3:5004?ttl=16&iface=10.0.0.9&pkts=4&bitrate=4000000";
        let u = TsOutUrl::parse(text).unwrap();
        assert!(u.is_rtp() && u.is_multicast());
        assert_eq!(u.ttl, Some(16));
        assert_eq!(u.iface, Some("10.0.0.9".parse().unwrap()));
        assert_eq!((u.packets, u.bitrate), (4, Some(4_000_000)));
        assert_eq!(u.to_string(), text);
        assert_eq!(TsOutUrl::parse(&u.to_string()).unwrap(), u);
        let u = TsOutUrl::parse("udp://239.0.0.1:1234?localaddr=10.1.1.1").unwrap();
        assert_eq!(u.iface, Some("10.1.1.1".parse().unwrap()));
        let v6 = TsOutUrl::parse("udp://[ff3e::1]:5000?ttl=2").unwrap();
        assert_eq!(TsOutUrl::parse(&v6.to_string()).unwrap(), v6);
    }

    #[test]
    fn refusals_name_the_part() {
        use TsOutUrlError as E;
        let cases: &[(&str, E)] = &[
            ("srt://1.2.3.4:1", E::Scheme),
            ("udp://host:1234", E::Address("host:1234".into())),
            ("udp://::1:1234", E::Address("::1:1234".into())),
            ("udp://1.2.3.4:0", E::PortZero),
            ("udp://1.2.3.4:1?foo=1", E::UnknownOption("foo".into())),
            ("udp://1.2.3.4:1?ttl=2", E::NotMulticast { what: "ttl" }),
            (
                "udp://1.2.3.4:1?iface=1.1.1.1",
                E::NotMulticast { what: "iface" },
            ),
            ("udp://[ff3e::1]:1?iface=1.1.1.1", E::V6Interface),
            ("udp://239.0.0.1:1?ttl=1&ttl=2", E::Repeated("ttl")),
            ("udp://1.2.3.4:1?pkts=7&pkts=7", E::Repeated("pkts")),
        ];
        for (url, want) in cases {
            assert_eq!(&TsOutUrl::parse(url).unwrap_err(), want, "{url}");
        }
        for url in [
            "udp://239.0.0.1:1?ttl=0",
            "udp://239.0.0.1:1?ttl=256",
            "udp://1.2.3.4:1?pkts=0",
            "udp://1.2.3.4:1?pkts=8",
            "udp://1.2.3.4:1?bitrate=99999",
            "udp://1.2.3.4:1?bitrate=4M",
            "udp://1.2.3.4:1?bitrate=",
            "udp://239.0.0.1:1?iface=eth0",
        ] {
            assert!(
                matches!(TsOutUrl::parse(url), Err(E::Value { .. })),
                "{url}"
            );
        }
        let long = format!("udp://1.2.3.4:1?{}", "a".repeat(MAX_OUT_URL_LEN));
        assert!(matches!(TsOutUrl::parse(&long), Err(E::TooLong { .. })));
    }
}
