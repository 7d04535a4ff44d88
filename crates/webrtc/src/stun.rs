//! Just enough STUN (RFC 8489) to route a datagram to its session before any session
//! has seen its sender: is it STUN, and whose ICE username fragment does a binding
//! request name; and to ask a STUN server which address it sees us at (the public
//! address candidates announce behind NAT). Everything else about STUN is str0m's.

use aws_lc_rs::hmac;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// STUN's magic cookie (RFC 8489 §5).
const MAGIC_COOKIE: u32 = 0x2112_a442;

/// The header: type, length, cookie, transaction id.
const HEADER_LEN: usize = 20;

/// The USERNAME attribute's type.
const USERNAME: u16 = 0x0006;

/// Longest USERNAME accepted (RFC 8489 §14.3: under 509 bytes).
const MAX_USERNAME: usize = 512;

/// The address attributes of a binding response.
const MAPPED_ADDRESS: u16 = 0x0001;
const XOR_MAPPED_ADDRESS: u16 = 0x0020;

/// What kind of packet a datagram on a WebRTC port is (RFC 7983 §7, by first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramKind {
    Stun,
    Dtls,
    Rtp,
    Other,
}

/// Classifies a datagram by its first byte.
pub fn classify(datagram: &[u8]) -> DatagramKind {
    match datagram.first() {
        Some(0..=3) => DatagramKind::Stun,
        Some(20..=63) => DatagramKind::Dtls,
        Some(128..=191) => DatagramKind::Rtp,
        _ => DatagramKind::Other,
    }
}

/// The USERNAME of a STUN binding request, split at its colon: the receiver's
/// (our) ufrag, then the sender's. `None` for anything else, or anything malformed.
pub fn binding_username(datagram: &[u8]) -> Option<(&str, &str)> {
    // A binding request: method 0x001, class request.
    let mut attributes = attributes(datagram, 0x0001)?;
    let value = attributes.find(|(kind, _)| *kind == USERNAME)?.1;
    if value.len() > MAX_USERNAME {
        return None;
    }
    std::str::from_utf8(value).ok()?.split_once(':')
}

/// Whether a binding request nominates its pair (USE-CANDIDATE, RFC 8445 §7.1.2):
/// the pair the controlling agent has picked for media.
pub fn nominates(datagram: &[u8]) -> bool {
    attributes(datagram, 0x0001).is_some_and(|mut a| a.any(|(kind, _)| kind == USE_CANDIDATE))
}

/// The USE-CANDIDATE attribute's type.
const USE_CANDIDATE: u16 = 0x0025;

/// A binding request to a STUN server, with no attributes (RFC 8489 §6): it asks the
/// server which address it sees the request come from.
pub fn binding_request(transaction: [u8; 12]) -> [u8; HEADER_LEN] {
    let mut d = [0u8; HEADER_LEN];
    d[..2].copy_from_slice(&0x0001u16.to_be_bytes());
    d[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
    d[8..].copy_from_slice(&transaction);
    d
}

/// The address a binding success response to `transaction` says the request came
/// from: its XOR-MAPPED-ADDRESS, or the MAPPED-ADDRESS of old servers. `None` for
/// anything else, or anything malformed.
pub fn mapped_address(datagram: &[u8], transaction: &[u8; 12]) -> Option<SocketAddr> {
    // A binding success response: method 0x001, class success.
    let attributes = attributes(datagram, 0x0101)?;
    if datagram.get(8..HEADER_LEN)? != transaction {
        return None;
    }
    let mut plain = None;
    for (kind, value) in attributes {
        match kind {
            XOR_MAPPED_ADDRESS => return address(value, Some(transaction)),
            MAPPED_ADDRESS => plain = address(value, None),
            _ => {}
        }
    }
    plain
}

/// An address attribute's value (RFC 8489 §14.1, §14.2); XORed with the cookie and
/// `transaction` when that is given.
fn address(value: &[u8], transaction: Option<&[u8; 12]>) -> Option<SocketAddr> {
    let cookie = MAGIC_COOKIE.to_be_bytes();
    let mut port = be16(value, 2)?;
    let ip = match (value.get(1)?, value.len()) {
        (0x01, 8) => {
            let mut b: [u8; 4] = value.get(4..8)?.try_into().ok()?;
            if transaction.is_some() {
                b.iter_mut().zip(cookie).for_each(|(x, c)| *x ^= c);
            }
            IpAddr::V4(Ipv4Addr::from(b))
        }
        (0x02, 20) => {
            let mut b: [u8; 16] = value.get(4..20)?.try_into().ok()?;
            if let Some(t) = transaction {
                let key = cookie.iter().chain(t.iter());
                b.iter_mut().zip(key).for_each(|(x, k)| *x ^= k);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    if transaction.is_some() {
        port ^= (MAGIC_COOKIE >> 16) as u16;
    }
    Some(SocketAddr::new(ip, port))
}

/// The attributes of ICE's connectivity checks (RFC 8489 §14.5, §14.7).
const MESSAGE_INTEGRITY: u16 = 0x0008;
const FINGERPRINT: u16 = 0x8028;
const FINGERPRINT_XOR: u32 = 0x5354_554e;
/// MESSAGE-INTEGRITY's attribute: header and HMAC-SHA1.
const INTEGRITY_LEN: usize = 4 + 20;

/// The success response to an ICE connectivity check `from` a peer (RFC 8445 §7.3):
/// a binding request whose USERNAME starts with our `ufrag` and whose
/// MESSAGE-INTEGRITY is keyed with our `pwd`. The response carries the request's
/// source as XOR-MAPPED-ADDRESS, then MESSAGE-INTEGRITY and FINGERPRINT. `None` for
/// anything else: a request that is not ours or fails its check gets no answer.
pub fn answer_check(datagram: &[u8], ufrag: &str, pwd: &str, from: SocketAddr) -> Option<Vec<u8>> {
    let (ours, _) = binding_username(datagram)?;
    if ours != ufrag {
        return None;
    }
    // HMAC over the message before MESSAGE-INTEGRITY, its length field set as if the
    // message ended with it.
    let mut at = HEADER_LEN;
    let mut integrity = None;
    for (kind, value) in attributes(datagram, 0x0001)? {
        if kind == MESSAGE_INTEGRITY {
            integrity = Some((at, value));
            break;
        }
        at += 4 + value.len().div_ceil(4) * 4;
    }
    let (at, mac) = integrity?;
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, pwd.as_bytes());
    let mut check = hmac::Context::with_key(&key);
    check.update(datagram.get(..2)?);
    check.update(&((at - HEADER_LEN + INTEGRITY_LEN) as u16).to_be_bytes());
    check.update(datagram.get(4..at)?);
    if check.sign().as_ref() != mac {
        return None;
    }
    let transaction: [u8; 12] = datagram.get(8..HEADER_LEN)?.try_into().ok()?;
    let mut out = Vec::with_capacity(HEADER_LEN + 24 + INTEGRITY_LEN + 8);
    out.extend_from_slice(&0x0101u16.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
    out.extend_from_slice(&transaction);
    let cookie = MAGIC_COOKIE.to_be_bytes();
    let port = from.port() ^ (MAGIC_COOKIE >> 16) as u16;
    match from.ip() {
        IpAddr::V4(ip) => {
            out.extend_from_slice(&[0x00, 0x20, 0, 8, 0, 0x01]);
            out.extend_from_slice(&port.to_be_bytes());
            out.extend(ip.octets().iter().zip(cookie).map(|(b, c)| b ^ c));
        }
        IpAddr::V6(ip) => {
            out.extend_from_slice(&[0x00, 0x20, 0, 20, 0, 0x02]);
            out.extend_from_slice(&port.to_be_bytes());
            let key = cookie.iter().chain(transaction.iter());
            out.extend(ip.octets().iter().zip(key).map(|(b, k)| b ^ k));
        }
    }
    // The length field counts what follows the header, up to the attribute being made.
    let set_len = |out: &mut Vec<u8>, extra: usize| {
        let len = (out.len() + extra - HEADER_LEN) as u16;
        if let Some(field) = out.get_mut(2..4) {
            field.copy_from_slice(&len.to_be_bytes());
        }
    };
    set_len(&mut out, INTEGRITY_LEN);
    let mac = hmac::sign(&key, &out);
    out.extend_from_slice(&[0x00, 0x08, 0, 20]);
    out.extend_from_slice(mac.as_ref());
    set_len(&mut out, 8);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&out) ^ FINGERPRINT_XOR;
    out.extend_from_slice(&FINGERPRINT.to_be_bytes());
    out.extend_from_slice(&[0, 4]);
    out.extend_from_slice(&crc.to_be_bytes());
    Some(out)
}

/// The attributes (type, value) of a STUN message of type `message`, after checking
/// its header; `None` when the header is not one.
fn attributes(datagram: &[u8], message: u16) -> Option<impl Iterator<Item = (u16, &[u8])>> {
    if be16(datagram, 0)? != message {
        return None;
    }
    let len = usize::from(be16(datagram, 2)?);
    let cookie: [u8; 4] = datagram.get(4..8)?.try_into().ok()?;
    if u32::from_be_bytes(cookie) != MAGIC_COOKIE || len % 4 != 0 {
        return None;
    }
    let mut rest = datagram.get(HEADER_LEN..HEADER_LEN + len)?;
    Some(std::iter::from_fn(move || {
        let kind = be16(rest, 0)?;
        let alen = usize::from(be16(rest, 2)?);
        let value = rest.get(4..4 + alen)?;
        // Values are padded to a multiple of four.
        rest = rest.get(4 + alen.div_ceil(4) * 4..).unwrap_or_default();
        Some((kind, value))
    }))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use str0m::ice::{StunMessage, TransId};

    fn sha1_hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 20] {
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
        let mut c = hmac::Context::with_key(&key);
        parts.iter().for_each(|p| c.update(p));
        c.sign().as_ref().try_into().unwrap()
    }

    /// A connectivity check as a browser's ICE agent sends it (str0m's encoder).
    fn check(username: &str, pwd: &str) -> Vec<u8> {
        let request = StunMessage::binding_request(username, TransId::new(), true, 7, 99, true);
        let mut buf = [0u8; 512];
        let n = request
            .to_bytes(Some(pwd.as_bytes()), &mut buf, sha1_hmac)
            .unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn a_check_with_our_credentials_is_answered_with_its_source() {
        for from in ["192.0.2.5:40000", "[2001:db8::7]:5000"] {
            let from: SocketAddr = from.parse().unwrap();
            let request = check("ours:theirs", "secret-password-22chars");
            let answer = answer_check(&request, "ours", "secret-password-22chars", from).unwrap();
            let parsed = StunMessage::parse(&answer).unwrap();
            assert!(parsed.is_successful_binding_response());
            assert_eq!(
                parsed.trans_id(),
                StunMessage::parse(&request).unwrap().trans_id()
            );
            assert!(parsed.verify(b"secret-password-22chars", sha1_hmac));
            assert_eq!(parsed.mapped_address(), Some(from));
        }
    }

    #[test]
    fn a_check_with_other_credentials_is_not_answered() {
        let from: SocketAddr = "192.0.2.5:40000".parse().unwrap();
        let request = check("ours:theirs", "secret-password-22chars");
        assert!(answer_check(&request, "ours", "another-password-22chr", from).is_none());
        assert!(answer_check(&request, "other", "secret-password-22chars", from).is_none());
        let mut flipped = request.clone();
        flipped[30] ^= 1;
        assert!(answer_check(&flipped, "ours", "secret-password-22chars", from).is_none());
        // No MESSAGE-INTEGRITY at all.
        assert!(answer_check(&request_of(b"ours:theirs"), "ours", "x", from).is_none());
    }

    fn request_of(username: &[u8]) -> Vec<u8> {
        request(username)
    }

    fn request(username: &[u8]) -> Vec<u8> {
        let padded = username.len().div_ceil(4) * 4;
        // A PRIORITY attribute first, then USERNAME.
        let len = 8 + 4 + padded;
        let mut d = vec![0x00, 0x01];
        d.extend_from_slice(&(len as u16).to_be_bytes());
        d.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
        d.extend_from_slice(&[7; 12]);
        d.extend_from_slice(&[0x00, 0x24, 0x00, 0x04, 1, 2, 3, 4]);
        d.extend_from_slice(&USERNAME.to_be_bytes());
        d.extend_from_slice(&(username.len() as u16).to_be_bytes());
        d.extend_from_slice(username);
        d.resize(20 + len, 0);
        d
    }

    #[test]
    fn a_binding_request_names_both_ufrags() {
        let d = request(b"srvfrag:clientfr");
        assert_eq!(classify(&d), DatagramKind::Stun);
        assert_eq!(binding_username(&d), Some(("srvfrag", "clientfr")));
    }

    #[test]
    fn anything_else_names_nobody() {
        let d = request(b"srvfrag:clientfr");
        // A response, a bad cookie, a truncated attribute, no colon.
        let mut response = d.clone();
        response[0] = 0x01;
        assert_eq!(binding_username(&response), None);
        let mut cookie = d.clone();
        cookie[4] ^= 1;
        assert_eq!(binding_username(&cookie), None);
        assert_eq!(binding_username(&d[..d.len() - 4]), None);
        assert_eq!(binding_username(&request(b"nocolon")), None);
        assert_eq!(binding_username(&[]), None);
        assert_eq!(classify(&[0x16, 0xfe]), DatagramKind::Dtls);
        assert_eq!(classify(&[0x80]), DatagramKind::Rtp);
    }

    /// A binding success response to `transaction` with `attributes` (type, value).
    fn response(transaction: [u8; 12], attributes: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, value) in attributes {
            body.extend_from_slice(&kind.to_be_bytes());
            body.extend_from_slice(&(value.len() as u16).to_be_bytes());
            body.extend_from_slice(value);
            body.resize(body.len().div_ceil(4) * 4, 0);
        }
        let mut d = vec![0x01, 0x01];
        d.extend_from_slice(&(body.len() as u16).to_be_bytes());
        d.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
        d.extend_from_slice(&transaction);
        d.extend_from_slice(&body);
        d
    }

    #[test]
    fn a_binding_request_is_a_bare_header() {
        let r = binding_request([9; 12]);
        assert_eq!(&r[..8], &[0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42]);
        assert_eq!(&r[8..], &[9; 12]);
    }

    #[test]
    fn the_mapped_address_is_read_from_a_response() {
        // RFC 5769 §2.2's address, 192.0.2.1 port 32853, XORed with the cookie.
        let t = [
            0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae,
        ];
        let xor_v4 = [0x00, 0x01, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43];
        let d = response(
            t,
            &[(0x8022, b"test vector"), (XOR_MAPPED_ADDRESS, &xor_v4)],
        );
        let want: SocketAddr = "192.0.2.1:32853".parse().unwrap();
        assert_eq!(mapped_address(&d, &t), Some(want));
        // RFC 5769 §2.3's IPv6 address, 2001:db8:1234:5678:11:2233:4455:6677 port 32853.
        let xor_v6 = [
            0x00, 0x02, 0xa1, 0x47, 0x01, 0x13, 0xa9, 0xfa, 0xa5, 0xd3, 0xf1, 0x79, 0xbc, 0x25,
            0xf4, 0xb5, 0xbe, 0xd2, 0xb9, 0xd9,
        ];
        let d = response(t, &[(XOR_MAPPED_ADDRESS, &xor_v6)]);
        let want: SocketAddr = "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
            .parse()
            .unwrap();
        assert_eq!(mapped_address(&d, &t), Some(want));
        // An old server's plain MAPPED-ADDRESS.
        let plain = [0x00, 0x01, 0x1f, 0x90, 203, 0, 113, 9];
        let d = response(t, &[(MAPPED_ADDRESS, &plain)]);
        assert_eq!(
            mapped_address(&d, &t),
            Some("203.0.113.9:8080".parse().unwrap())
        );
    }

    #[test]
    fn other_responses_say_no_address() {
        let t = [1; 12];
        let xor_v4 = [0x00, 0x01, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43];
        let good = response(t, &[(XOR_MAPPED_ADDRESS, &xor_v4)]);
        // Another transaction, an error response, a bad family, truncated, empty.
        assert_eq!(mapped_address(&good, &[2; 12]), None);
        let mut error = good.clone();
        error[0] = 0x01;
        error[1] = 0x11;
        assert_eq!(mapped_address(&error, &t), None);
        let bad_family = response(t, &[(XOR_MAPPED_ADDRESS, &[0, 3, 0, 0, 1, 2, 3, 4])]);
        assert_eq!(mapped_address(&bad_family, &t), None);
        assert_eq!(mapped_address(&good[..good.len() - 2], &t), None);
        assert_eq!(mapped_address(&response(t, &[]), &t), None);
    }
}
