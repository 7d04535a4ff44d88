//! ICE restarts of WHIP and WHEP sessions (RFC 9725 §4.3.1): the client's `PATCH`
//! carries an SDP fragment (`application/trickle-ice-sdpfrag`, RFC 8840) with its new
//! ICE username fragment and password, and the answer's fragment carries the server's
//! new ones. An ICE restart redoes neither DTLS nor SRTP: only which credentials a
//! check must bear, and so from which address it may come. Reading and writing those
//! fragments, and making new credentials, are here; the peer's side is
//! [`crate::Peer::restart_ice`].

use std::fmt::Write;
use std::net::SocketAddr;
use thiserror::Error;

/// Largest fragment taken (a browser's restart carries a few candidates: under 2 KB).
pub const MAX_FRAGMENT: usize = 16 << 10;

/// An ICE agent's credentials (RFC 8839 §5.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceCredentials {
    pub ufrag: String,
    pub pwd: String,
}

/// Why a fragment is no ICE restart.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FragmentError {
    #[error("the fragment is larger than {MAX_FRAGMENT} bytes")]
    TooLarge,
    #[error("the fragment has no a=ice-ufrag and a=ice-pwd")]
    NoCredentials,
    #[error("bad ICE credentials (RFC 8839: ice-chars, a ufrag of 4-256, a pwd of 22-256)")]
    BadCredentials,
}

/// ice-char (RFC 8839 §5.4): letters, digits, `+` and `/`.
const ICE_CHARS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn is_ice_chars(s: &str, min: usize) -> bool {
    (min..=256).contains(&s.len()) && s.bytes().all(|b| ICE_CHARS.contains(&b))
}

impl IceCredentials {
    /// New credentials from the system's random source: an 8-character ufrag and a
    /// 24-character pwd (144 bits), longer than RFC 8839's minimum of 128.
    pub fn random() -> Option<IceCredentials> {
        use aws_lc_rs::rand::SecureRandom;
        let mut bytes = [0u8; 32];
        aws_lc_rs::rand::SystemRandom::new().fill(&mut bytes).ok()?;
        let chars: String = bytes
            .iter()
            .filter_map(|b| ICE_CHARS.get(usize::from(b & 63)).copied().map(char::from))
            .collect();
        let (ufrag, pwd) = chars.split_at(8);
        Some(IceCredentials {
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
        })
    }
}

/// The new credentials a client's fragment carries: its first `a=ice-ufrag` and
/// `a=ice-pwd` (a bundled session has one pair).
pub fn credentials(fragment: &str) -> Result<IceCredentials, FragmentError> {
    if fragment.len() > MAX_FRAGMENT {
        return Err(FragmentError::TooLarge);
    }
    let attribute = |name: &str| {
        fragment
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .map(str::trim)
    };
    let (Some(ufrag), Some(pwd)) = (attribute("a=ice-ufrag:"), attribute("a=ice-pwd:")) else {
        return Err(FragmentError::NoCredentials);
    };
    if !is_ice_chars(ufrag, 4) || !is_ice_chars(pwd, 22) {
        return Err(FragmentError::BadCredentials);
    }
    Ok(IceCredentials {
        ufrag: ufrag.to_owned(),
        pwd: pwd.to_owned(),
    })
}

/// The server's fragment in answer to a restart: its new credentials and its host
/// candidates (unchanged: the server's addresses do not move).
pub fn answer(ours: &IceCredentials, candidates: &[SocketAddr]) -> String {
    let mut out = format!("a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n", ours.ufrag, ours.pwd);
    for (i, c) in candidates.iter().enumerate() {
        let _ = write!(
            out,
            "a=candidate:{} 1 udp {} {} {} typ host\r\n",
            i + 1,
            2_130_706_431u32.saturating_sub(i as u32),
            c.ip(),
            c.port()
        );
    }
    out.push_str("a=end-of-candidates\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_fragment_gives_its_credentials() {
        let frag = "a=ice-ufrag:EsAw\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n\
                    m=audio 9 RTP/AVP 0\r\na=mid:0\r\n\
                    a=candidate:1 1 udp 2130706431 10.0.0.1 5000 typ host\r\n";
        let c = credentials(frag).unwrap();
        assert_eq!(
            (c.ufrag.as_str(), c.pwd.as_str()),
            ("EsAw", "P2uYro0UCOQ4zxjKXaWCBui1")
        );
    }

    #[test]
    fn candidates_alone_short_or_odd_credentials_and_huge_fragments_are_refused() {
        let only = "a=mid:0\r\na=candidate:1 1 udp 1 10.0.0.1 5000 typ host\r\n";
        assert_eq!(credentials(only), Err(FragmentError::NoCredentials));
        let short = "a=ice-ufrag:abc\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n";
        assert_eq!(credentials(short), Err(FragmentError::BadCredentials));
        let odd = "a=ice-ufrag:ab:cd\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n";
        assert_eq!(credentials(odd), Err(FragmentError::BadCredentials));
        let huge = "a".repeat(MAX_FRAGMENT + 1);
        assert_eq!(credentials(&huge), Err(FragmentError::TooLarge));
    }

    #[test]
    fn new_credentials_are_valid_and_differ_and_the_answer_reads_back() {
        let (a, b) = (
            IceCredentials::random().unwrap(),
            IceCredentials::random().unwrap(),
        );
        assert_ne!(a, b);
        let answer = answer(&a, &["127.0.0.1:8189".parse().unwrap()]);
        assert_eq!(credentials(&answer), Ok(a));
        assert!(answer.contains("127.0.0.1 8189 typ host"), "{answer}");
    }
}
