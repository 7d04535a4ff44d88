//! Just enough STUN (RFC 8489) to route a datagram to its session before any session
//! has seen its sender: is it STUN, and whose ICE username fragment does a binding
//! request name. Everything else about STUN is str0m's.

/// STUN's magic cookie (RFC 8489 §5).
const MAGIC_COOKIE: u32 = 0x2112_a442;

/// The header: type, length, cookie, transaction id.
const HEADER_LEN: usize = 20;

/// The USERNAME attribute's type.
const USERNAME: u16 = 0x0006;

/// Longest USERNAME accepted (RFC 8489 §14.3: under 509 bytes).
const MAX_USERNAME: usize = 512;

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
    if be16(datagram, 0)? != 0x0001 {
        return None;
    }
    let len = usize::from(be16(datagram, 2)?);
    let cookie: [u8; 4] = datagram.get(4..8)?.try_into().ok()?;
    if u32::from_be_bytes(cookie) != MAGIC_COOKIE {
        return None;
    }
    if len % 4 != 0 {
        return None;
    }
    let mut attributes = datagram.get(HEADER_LEN..HEADER_LEN + len)?;
    while attributes.len() >= 4 {
        let kind = be16(attributes, 0)?;
        let alen = usize::from(be16(attributes, 2)?);
        let value = attributes.get(4..4 + alen)?;
        if kind == USERNAME {
            if alen > MAX_USERNAME {
                return None;
            }
            let name = std::str::from_utf8(value).ok()?;
            return name.split_once(':');
        }
        // Values are padded to a multiple of four.
        let next = 4 + alen.div_ceil(4) * 4;
        attributes = attributes.get(next..)?;
    }
    None
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
