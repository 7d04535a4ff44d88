//! [`UdpUrl`]: where MPEG-TS arrives over UDP, as an `[[ingest]]` entry or the API names
//! it: `udp://ADDR:PORT` (TS in datagrams) or `rtp://ADDR:PORT` (TS in RTP, RFC 2250),
//! with, for a multicast group, the sources to take it from and the interface to join
//! on.
//!
//! Why a parser of its own: the address is bound and (for a group) joined with options
//! that ffmpeg users know from its `udp://` URLs; a typo there must be an error naming
//! the part, not a socket bound somewhere unexpected. It is sans-IO: resolving an
//! interface name to an address is the caller's.
//!
//! # Grammar
//! `SCHEME://[@]HOST:PORT[?KEY=VALUE[&KEY=VALUE]...]`, SCHEME `udp` or `rtp`; HOST an
//! IPv4 address or a bracketed IPv6 one (`[::]`, `[ff3e::1]`), no names. Keys:
//! - `sources=IP[,IP...]` (also `source`, repeatable): a source-specific join (SSM,
//!   RFC 4607) of each; only with a multicast group.
//! - `interface=IP|NAME` (also `localaddr`, ffmpeg's name): the interface to join the
//!   group on, by its address or its name (`eth0`); only with a multicast group.
//!
//! # Invariants
//! - A parsed URL is one the bind can use: a group's port above 0 (a unicast port 0 is
//!   the kernel's choice, which the API shows), sources only for a group
//!   and of its family, at most [`MAX_SOURCES`] of them.
//! - Nothing panics on any input; inputs longer than [`MAX_URL_LEN`] are refused.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Longest URL accepted: a group, a few sources and an interface fit many times over.
pub const MAX_URL_LEN: usize = 2048;
/// Most sources of one source-specific join: the kernel's default per-socket limit
/// (`net.ipv4.igmp_max_msf`) is 10.
pub const MAX_SOURCES: usize = 10;

/// How the TS is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carriage {
    /// Whole TS packets in each datagram (normally seven), nothing around them.
    Plain,
    /// TS packets in RTP (RFC 2250): reordered and loss-counted by sequence number.
    Rtp,
}

impl Carriage {
    /// The carriage a URL's scheme names (`udp://`, `rtp://`) and what follows it.
    pub(super) fn split(url: &str) -> Option<(Carriage, &str)> {
        if let Some(r) = url.strip_prefix("udp://") {
            Some((Carriage::Plain, r))
        } else {
            url.strip_prefix("rtp://").map(|r| (Carriage::Rtp, r))
        }
    }

    /// Its URL scheme.
    pub fn scheme(self) -> &'static str {
        match self {
            Carriage::Plain => "udp",
            Carriage::Rtp => "rtp",
        }
    }
}

/// The interface a group is joined on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interface {
    /// The interface with this address.
    Addr(IpAddr),
    /// The interface of this name, resolved by the caller.
    Name(String),
}

/// A parsed ingest address. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpUrl {
    /// Plain TS or TS in RTP.
    pub carriage: Carriage,
    /// The address to bind: a group's with its port, or a local (or any) address.
    pub addr: SocketAddr,
    /// Sources of a source-specific join; empty: any source (ASM) or unicast.
    pub sources: Vec<IpAddr>,
    /// The interface to join a group on; `None`: the kernel's choice.
    pub interface: Option<Interface>,
}

/// Why a URL was refused; each names the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UdpUrlError {
    /// Longer than [`MAX_URL_LEN`].
    #[error("URL of {len} bytes exceeds {MAX_URL_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Neither `udp://` nor `rtp://`.
    #[error("scheme must be udp:// or rtp://")]
    Scheme,
    /// The host and port do not parse (a name, no port, IPv6 without brackets).
    #[error("{0:?} is not an IP address and port (IPv6 in brackets)")]
    Address(String),
    /// Port 0 for a group: its senders choose the port, not the kernel.
    #[error("port 0 for a multicast group: a group's port is its senders'")]
    PortZero,
    /// An option this grammar does not have.
    #[error("unknown option {0:?} (sources, interface)")]
    UnknownOption(String),
    /// A source that is not an IP address.
    #[error("{0:?} is not an IP address")]
    Source(String),
    /// An interface that is neither an address nor a plausible name.
    #[error("{0:?} is not an interface address or name")]
    Interface(String),
    /// Sources or an interface for an address that is not a group.
    #[error("{what} only applies to a multicast group")]
    NotMulticast {
        /// The option.
        what: &'static str,
    },
    /// An IPv6 source for an IPv4 group, or the reverse.
    #[error("source {0} is not of the group's address family")]
    SourceFamily(IpAddr),
    /// More than [`MAX_SOURCES`] sources.
    #[error("more than {MAX_SOURCES} sources")]
    TooManySources,
}

impl UdpUrl {
    /// Parses `url`; see the module docs for the grammar.
    pub fn parse(url: &str) -> Result<UdpUrl, UdpUrlError> {
        if url.len() > MAX_URL_LEN {
            return Err(UdpUrlError::TooLong { len: url.len() });
        }
        let (carriage, rest) = Carriage::split(url).ok_or(UdpUrlError::Scheme)?;
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        // ffmpeg writes `udp://@239.0.0.1:1234` for "listen on the group".
        let authority = authority.strip_prefix('@').unwrap_or(authority);
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| UdpUrlError::Address(authority.to_string()))?;
        if addr.port() == 0 && addr.ip().is_multicast() {
            return Err(UdpUrlError::PortZero);
        }
        let mut parsed = UdpUrl {
            carriage,
            addr,
            sources: Vec::new(),
            interface: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sources" | "source" => {
                    for s in value.split(',').filter(|s| !s.is_empty()) {
                        let ip: IpAddr = s.parse().map_err(|_| UdpUrlError::Source(s.into()))?;
                        if parsed.sources.len() >= MAX_SOURCES {
                            return Err(UdpUrlError::TooManySources);
                        }
                        if !parsed.sources.contains(&ip) {
                            parsed.sources.push(ip);
                        }
                    }
                }
                "interface" | "localaddr" => {
                    parsed.interface = Some(interface(value)?);
                }
                _ => return Err(UdpUrlError::UnknownOption(key.to_string())),
            }
        }
        if !addr.ip().is_multicast() {
            if !parsed.sources.is_empty() {
                return Err(UdpUrlError::NotMulticast { what: "sources" });
            }
            if parsed.interface.is_some() {
                return Err(UdpUrlError::NotMulticast { what: "interface" });
            }
        }
        if let Some(&s) = parsed
            .sources
            .iter()
            .find(|s| s.is_ipv4() != addr.is_ipv4())
        {
            return Err(UdpUrlError::SourceFamily(s));
        }
        Ok(parsed)
    }

    /// Whether the address is a multicast group (to join).
    pub fn is_multicast(&self) -> bool {
        self.addr.ip().is_multicast()
    }
}

/// An interface's address, or its name: letters, digits and `.-_:@`, as Linux allows
/// in practice, at most 15 bytes (`IFNAMSIZ` - 1).
fn interface(value: &str) -> Result<Interface, UdpUrlError> {
    if let Ok(ip) = value.parse() {
        return Ok(Interface::Addr(ip));
    }
    let name_ok = !value.is_empty()
        && value.len() <= 15
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:@".contains(&b));
    if name_ok {
        Ok(Interface::Name(value.to_string()))
    } else {
        Err(UdpUrlError::Interface(value.to_string()))
    }
}

impl fmt::Display for UdpUrl {
    /// The URL in the grammar [`UdpUrl::parse`] reads back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.carriage.scheme(), self.addr)?;
        let mut sep = '?';
        if !self.sources.is_empty() {
            let list: Vec<String> = self.sources.iter().map(IpAddr::to_string).collect();
            write!(f, "{sep}sources={}", list.join(","))?;
            sep = '&';
        }
        match &self.interface {
            Some(Interface::Addr(ip)) => write!(f, "{sep}interface={ip}"),
            Some(Interface::Name(name)) => write!(f, "{sep}interface={name}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicast_and_multicast_forms() {
        let u = UdpUrl::parse("udp://127.0.0.1:5000").unwrap();
        assert_eq!(u.carriage, Carriage::Plain);
        assert_eq!(u.addr, "127.0.0.1:5000".parse().unwrap());
        assert!(!u.is_multicast());
        let m = UdpUrl::parse("rtp://@239.1.2.3:5004?sources=10.0.0.1,10.0.0.2&localaddr=eth0")
            .unwrap();
        assert_eq!(m.carriage, Carriage::Rtp);
        assert!(m.is_multicast());
        assert_eq!(m.sources.len(), 2);
        assert_eq!(m.interface, Some(Interface::Name("eth0".into())));
        let v6 = UdpUrl::parse("udp://[ff3e::1234]:5000?interface=::1").unwrap();
        assert_eq!(v6.interface, Some(Interface::Addr("::1".parse().unwrap())));
    }

    #[test]
    fn what_is_printed_parses_back() {
        for url in [
            "udp://0.0.0.0:1234",
            "rtp://232.1.1.1:5004?sources=10.1.1.1&interface=10.0.0.2",
            "udp://[ff02::1]:9?interface=lo",
        ] {
            let u = UdpUrl::parse(url).unwrap();
            assert_eq!(u.to_string(), url);
            assert_eq!(UdpUrl::parse(&u.to_string()).unwrap(), u);
        }
    }

    #[test]
    fn mistakes_name_the_part() {
        use UdpUrlError as E;
        let err = |u: &str| UdpUrl::parse(u).unwrap_err();
        assert_eq!(err("srt://1.2.3.4:5"), E::Scheme);
        assert_eq!(err("udp://host:5"), E::Address("host:5".into()));
        assert_eq!(err("udp://1.2.3.4"), E::Address("1.2.3.4".into()));
        assert_eq!(err("udp://239.1.1.1:0"), E::PortZero);
        assert!(UdpUrl::parse("udp://127.0.0.1:0").is_ok());
        assert_eq!(err("udp://1.2.3.4:5?ttl=3"), E::UnknownOption("ttl".into()));
        assert_eq!(
            err("udp://1.2.3.4:5?sources=10.0.0.1"),
            E::NotMulticast { what: "sources" }
        );
        assert_eq!(
            err("udp://1.2.3.4:5?interface=lo"),
            E::NotMulticast { what: "interface" }
        );
        assert_eq!(
            err("udp://239.0.0.1:5?sources=::1"),
            E::SourceFamily("::1".parse().unwrap())
        );
        assert_eq!(err("udp://239.0.0.1:5?sources=x"), E::Source("x".into()));
        assert_eq!(
            err("udp://239.0.0.1:5?interface=a/b"),
            E::Interface("a/b".into())
        );
        let many: Vec<String> = (1..=11).map(|i| format!("10.0.0.{i}")).collect();
        assert_eq!(
            err(&format!("udp://239.0.0.1:5?sources={}", many.join(","))),
            E::TooManySources
        );
        assert!(matches!(
            err(&format!("udp://1.2.3.4:5?{}", "a".repeat(MAX_URL_LEN))),
            E::TooLong { .. }
        ));
    }
}
