//! The listener's side of the caller-listener handshake, kept stateless until the
//! caller proves it receives at its address.
//!
//! Why stateless: an induction costs one datagram to send, from any forged address.
//! The answer carries a SYN cookie derived from the caller's address and the minute
//! (keyed with a secret), and nothing is kept. Only a conclusion that echoes a valid
//! cookie makes a connection, so a flood of inductions allocates nothing and a flood
//! of conclusions needs the answers to reach the flooder.
//!
//! The handshake itself (HSv5 extensions, latency, the key material) is
//! srt-runtime's `ListenerHandshake`, driven through induction and conclusion in one
//! go when the cookie checks out. The application then looks at the stream id and
//! either accepts (the conclusion response goes out) or rejects with a code the
//! caller's libsrt reports (`SRT_REJX_*`: 1401, 1403, 1404, 1409 ...).

use crate::keys::Keys;
use srt_runtime::crypto::SALT_LEN;
use srt_runtime::handshake_sm::{CryptoConfig, HandshakeConfig, HandshakeOutput, RejectionReason};
use srt_runtime::listener::ListenerHandshake;
use srt_runtime::packet::{
    ControlPacket, EncryptionField, HandshakeExtensionFlags, HandshakeExtensions, HandshakePacket,
    HandshakeType,
};
use std::net::SocketAddr;
use std::time::Duration;

/// The listener's settings.
#[derive(Clone)]
pub struct ListenConfig {
    /// The receiver latency this side asks for; the larger of both sides' wins.
    pub latency: Duration,
    /// Encryption: callers must use this passphrase (none: callers must not encrypt).
    pub passphrase: Option<Vec<u8>>,
    /// Key length (16, 24 or 32) announced to callers that do not choose one.
    pub key_len: usize,
    /// Packets the receiver may hold (the flow window announced).
    pub flow_window: u32,
}

impl std::fmt::Debug for ListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenConfig")
            .field("latency", &self.latency)
            .field("encrypted", &self.passphrase.is_some())
            .field("key_len", &self.key_len)
            .field("flow_window", &self.flow_window)
            .finish()
    }
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            latency: Duration::from_millis(120),
            passphrase: None,
            key_len: 16,
            flow_window: 8192,
        }
    }
}

/// What a handshake datagram from a caller comes to.
#[derive(Debug)]
pub enum Handshake {
    /// Send these bytes back and remember nothing (the induction answer).
    Reply(Vec<u8>),
    /// A caller that proved its address: the application accepts or rejects it.
    Conclusion(Conclusion),
    /// Refused in the handshake itself (a bad cookie, version, passphrase): send the
    /// rejection back.
    Refused(Vec<u8>, RejectionReason),
}

/// A completed handshake, waiting for the application's decision.
#[derive(Debug)]
pub struct Conclusion {
    /// The caller's socket id: our packets' destination.
    pub peer_socket_id: u32,
    /// Our socket id: the destination of the caller's packets.
    pub socket_id: u32,
    /// The first sequence number the caller sends with.
    pub peer_isn: u32,
    /// The first sequence number we send with: the caller's, as libsrt does.
    pub isn: u32,
    /// What the caller asked for (not yet parsed: see `StreamId`).
    pub stream_id: Option<String>,
    /// The latency both sides agreed on.
    pub latency: Duration,
    /// The caller's flow window.
    pub flow_window: u32,
    /// The keys, when the connection is encrypted.
    pub keys: Option<Keys>,
    /// The conclusion response to send on accepting.
    pub response: Vec<u8>,
}

impl Conclusion {
    /// The rejection to send instead of the response, with `code` (1000 + a
    /// `RejectionReason`, or an application code `1400 + an HTTP status`).
    pub fn reject(&self, code: u32) -> Vec<u8> {
        rejection(self.socket_id, self.peer_socket_id, code)
    }
}

/// Makes and checks SYN cookies, and answers handshakes.
#[derive(Debug)]
pub struct Acceptor {
    secret: u128,
    config: ListenConfig,
}

/// Why a datagram was not taken as a handshake; nothing is sent back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("not a handshake: {0}")]
    NotHandshake(String),
    #[error("a handshake of type {0:?} is not a caller's")]
    Unexpected(HandshakeType),
}

/// SYN cookies change every minute; a conclusion may echo the previous minute's.
const COOKIE_PERIOD_SECS: u64 = 60;

impl Acceptor {
    /// `secret` keys the cookies: random, and the same on every worker's acceptor of
    /// one listener (a caller's datagrams may reach another worker after a change
    /// of the socket set).
    pub fn new(secret: u128, config: ListenConfig) -> Acceptor {
        Acceptor { secret, config }
    }

    pub fn config(&self) -> &ListenConfig {
        &self.config
    }

    fn cookie(&self, peer: SocketAddr, minute: u64) -> u32 {
        let key = match peer {
            SocketAddr::V4(a) => u64::from(a.ip().to_bits()) << 16 | u64::from(a.port()),
            SocketAddr::V6(a) => {
                let ip = a.ip().to_bits();
                ((ip >> 64) as u64 ^ ip as u64).rotate_left(16) ^ u64::from(a.port())
            }
        };
        srt_runtime::handshake_sm::derive_cookie(key, minute as u32, self.secret)
    }

    fn handshake_config(&self, isn: u32) -> HandshakeConfig {
        let latency_ms = u16::try_from(self.config.latency.as_millis()).unwrap_or(u16::MAX);
        HandshakeConfig {
            latency_ms,
            initial_seq_number: isn,
            max_flow_window_size: self.config.flow_window,
            encryption_field: match (&self.config.passphrase, self.config.key_len) {
                (None, _) => EncryptionField::NoEncryption,
                (Some(_), 24) => EncryptionField::Aes192,
                (Some(_), 32) => EncryptionField::Aes256,
                (Some(_), _) => EncryptionField::Aes128,
            },
            crypto: self.config.passphrase.as_ref().map(|p| CryptoConfig {
                passphrase: p.clone(),
                salt: [0; SALT_LEN],
                sek: Vec::new(),
            }),
            ..HandshakeConfig::default()
        }
    }

    /// A handshake datagram (destination socket id 0) from `peer` at `now_secs`
    /// (any clock in seconds). `socket_id` and `isn` are what a connection made now
    /// would use: random, and the socket id unused on this listener.
    pub fn handle(
        &self,
        datagram: &[u8],
        peer: SocketAddr,
        now_secs: u64,
        socket_id: u32,
        isn: u32,
    ) -> Result<Handshake, AcceptError> {
        let packet =
            ControlPacket::parse(datagram).map_err(|e| AcceptError::NotHandshake(e.to_string()))?;
        let ControlPacket::Handshake(hs) = &packet else {
            return Err(AcceptError::NotHandshake(
                packet.control_type().name().to_owned(),
            ));
        };
        let minute = now_secs / COOKIE_PERIOD_SECS;
        match hs.handshake_type {
            HandshakeType::Induction => {
                let cookie = self.cookie(peer, minute);
                let mut listener =
                    ListenerHandshake::new(socket_id, cookie, self.handshake_config(isn));
                let out = listener
                    .feed(&packet)
                    .map_err(|e| AcceptError::NotHandshake(e.to_string()))?;
                Ok(first_reply(out)
                    .map(|(bytes, rejected)| match rejected {
                        Some(r) => Handshake::Refused(bytes, r),
                        None => Handshake::Reply(bytes),
                    })
                    .unwrap_or_else(|| {
                        Handshake::Refused(
                            rejection(
                                socket_id,
                                hs.srt_socket_id,
                                RejectionReason::Rogue.to_bits(),
                            ),
                            RejectionReason::Rogue,
                        )
                    }))
            }
            HandshakeType::Conclusion => {
                let Some(cookie) = [minute, minute.wrapping_sub(1)]
                    .into_iter()
                    .map(|m| self.cookie(peer, m))
                    .find(|&c| c == hs.syn_cookie)
                else {
                    let code = RejectionReason::Rogue;
                    return Ok(Handshake::Refused(
                        rejection(socket_id, hs.srt_socket_id, code.to_bits()),
                        code,
                    ));
                };
                self.conclude(hs, cookie, socket_id, isn)
            }
            other => Err(AcceptError::Unexpected(other)),
        }
    }

    fn conclude(
        &self,
        hs: &HandshakePacket<'_>,
        cookie: u32,
        socket_id: u32,
        _isn: u32,
    ) -> Result<Handshake, AcceptError> {
        // Both directions number from the caller's first sequence number: libsrt's
        // listener adopts it, and its callers expect our packets to start there too.
        let isn = hs.initial_seq_number;
        let mut listener = ListenerHandshake::new(socket_id, cookie, self.handshake_config(isn));
        // The machine expects the induction it answered; we kept none, so it hears
        // this caller's again first (its answer is dropped: the caller had it).
        let induction = HandshakePacket {
            handshake_type: HandshakeType::Induction,
            extension_field: HandshakeExtensionFlags(0),
            extensions: HandshakeExtensions(&[]),
            ..hs.clone()
        };
        listener
            .feed(&ControlPacket::Handshake(induction))
            .map_err(|e| AcceptError::NotHandshake(e.to_string()))?;
        let out = listener
            .feed(&ControlPacket::Handshake(hs.clone()))
            .map_err(|e| AcceptError::NotHandshake(e.to_string()))?;
        let mut response = None;
        let mut negotiated = None;
        let mut rejected = None;
        for o in out {
            match o {
                HandshakeOutput::Send(b) => response = Some(b),
                HandshakeOutput::Connected(n) => negotiated = Some(n),
                HandshakeOutput::Rejected(r) => rejected = Some(r),
                _ => {}
            }
        }
        let response = response.unwrap_or_default();
        if let Some(r) = rejected {
            return Ok(Handshake::Refused(response, r));
        }
        let Some(n) = negotiated else {
            let r = RejectionReason::Rogue;
            return Ok(Handshake::Refused(
                rejection(socket_id, hs.srt_socket_id, r.to_bits()),
                r,
            ));
        };
        let keys = match (&self.config.passphrase, &n.sek, n.salt) {
            (Some(p), Some(sek), Some(salt)) => Some(Keys::agreed(p, sek, salt)),
            _ => None,
        };
        Ok(Handshake::Conclusion(Conclusion {
            peer_socket_id: n.peer_socket_id,
            socket_id,
            peer_isn: hs.initial_seq_number,
            isn,
            stream_id: n.stream_id,
            latency: Duration::from_millis(u64::from(n.latency_ms)),
            flow_window: n.max_flow_window_size,
            keys,
            response,
        }))
    }
}

/// The caller's socket id, if `datagram` is a conclusion handshake (a repeated one
/// finds the connection it made).
pub fn conclusion_from(datagram: &[u8]) -> Option<u32> {
    match ControlPacket::parse(datagram).ok()? {
        ControlPacket::Handshake(h) if h.handshake_type == HandshakeType::Conclusion => {
            Some(h.srt_socket_id)
        }
        _ => None,
    }
}

/// The first datagram to send among a machine's outputs, and whether it rejects.
fn first_reply(out: Vec<HandshakeOutput>) -> Option<(Vec<u8>, Option<RejectionReason>)> {
    let rejected = out.iter().find_map(|o| match o {
        HandshakeOutput::Rejected(r) => Some(*r),
        _ => None,
    });
    out.into_iter()
        .find_map(|o| match o {
            HandshakeOutput::Send(b) => Some(b),
            _ => None,
        })
        .map(|b| (b, rejected))
}

/// A rejection handshake from `ours` to `theirs` with `code`.
pub fn rejection(ours: u32, theirs: u32, code: u32) -> Vec<u8> {
    let hs = HandshakePacket {
        timestamp: 0,
        dest_socket_id: theirs,
        version: srt_runtime::handshake_sm::HANDSHAKE_VERSION_5,
        encryption_field: EncryptionField::NoEncryption,
        extension_field: HandshakeExtensionFlags(0),
        initial_seq_number: 0,
        mtu: 1500,
        max_flow_window_size: 8192,
        handshake_type: HandshakeType::from_bits(code),
        srt_socket_id: ours,
        syn_cookie: 0,
        peer_ip: [0; 4],
        extensions: HandshakeExtensions(&[]),
    };
    let packet = ControlPacket::Handshake(hs);
    let mut buf = vec![0; packet.serialized_len()];
    match packet.serialize_into(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use srt_runtime::caller::{CallerHandshake, CallerHandshakeState};
    use std::net::{Ipv4Addr, SocketAddr};

    const PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 4000);

    fn sends(out: Vec<HandshakeOutput>) -> Vec<u8> {
        out.into_iter()
            .find_map(|o| match o {
                HandshakeOutput::Send(b) => Some(b),
                _ => None,
            })
            .expect("a datagram")
    }

    fn caller(passphrase: Option<&[u8]>) -> CallerHandshake {
        CallerHandshake::new(
            0x1111,
            HandshakeConfig {
                latency_ms: 200,
                initial_seq_number: 555,
                stream_id: Some("#!::r=live/a,m=publish".into()),
                encryption_field: if passphrase.is_some() {
                    EncryptionField::Aes128
                } else {
                    EncryptionField::NoEncryption
                },
                crypto: passphrase.map(|p| CryptoConfig {
                    passphrase: p.to_vec(),
                    salt: [4; SALT_LEN],
                    sek: vec![8; 16],
                }),
                ..HandshakeConfig::default()
            },
        )
    }

    /// Runs a caller against the acceptor at `t` (seconds) then `t2`.
    fn run(acceptor: &Acceptor, caller: &mut CallerHandshake, t: u64, t2: u64) -> Handshake {
        let induction = caller.start().unwrap();
        let Ok(Handshake::Reply(reply)) = acceptor.handle(&induction, PEER, t, 0x2222, 9) else {
            panic!("an induction answer")
        };
        let conclusion = sends(caller.feed_bytes(&reply).unwrap());
        acceptor.handle(&conclusion, PEER, t2, 0x2222, 9).unwrap()
    }

    #[test]
    fn a_caller_concludes_with_its_stream_id_and_latency() {
        let acceptor = Acceptor::new(77, ListenConfig::default());
        let mut c = caller(None);
        let Handshake::Conclusion(done) = run(&acceptor, &mut c, 1000, 1001) else {
            panic!("a conclusion")
        };
        assert_eq!(done.stream_id.as_deref(), Some("#!::r=live/a,m=publish"));
        assert_eq!(done.latency, Duration::from_millis(200));
        assert_eq!((done.peer_socket_id, done.socket_id), (0x1111, 0x2222));
        assert_eq!((done.peer_isn, done.isn), (555, 555));
        assert!(done.keys.is_none());
        c.feed_bytes(&done.response).unwrap();
        assert_eq!(c.state(), CallerHandshakeState::Connected);
    }

    #[test]
    fn a_cookie_from_another_address_or_an_old_minute_is_refused() {
        let acceptor = Acceptor::new(77, ListenConfig::default());
        // The previous minute's cookie still works; older ones do not.
        let mut c = caller(None);
        assert!(matches!(
            run(&acceptor, &mut c, 60, 120),
            Handshake::Conclusion(_)
        ));
        let mut c = caller(None);
        assert!(matches!(
            run(&acceptor, &mut c, 60, 180),
            Handshake::Refused(_, RejectionReason::Rogue)
        ));
        // Another secret (another server) does not know the cookie.
        let mut c = caller(None);
        let induction = c.start().unwrap();
        let Ok(Handshake::Reply(reply)) = acceptor.handle(&induction, PEER, 0, 1, 1) else {
            panic!()
        };
        let conclusion = sends(c.feed_bytes(&reply).unwrap());
        let other = Acceptor::new(78, ListenConfig::default());
        assert!(matches!(
            other.handle(&conclusion, PEER, 0, 1, 1),
            Ok(Handshake::Refused(..))
        ));
    }

    #[test]
    fn the_passphrase_must_match() {
        let config = ListenConfig {
            passphrase: Some(b"correct horse".to_vec()),
            ..ListenConfig::default()
        };
        let acceptor = Acceptor::new(1, config);
        let mut c = caller(Some(b"correct horse"));
        let Handshake::Conclusion(done) = run(&acceptor, &mut c, 0, 0) else {
            panic!("a conclusion")
        };
        assert_eq!(done.keys.as_ref().map(Keys::key_len), Some(16));
        let mut c = caller(Some(b"wrong horse!!"));
        assert!(matches!(
            run(&acceptor, &mut c, 0, 0),
            Handshake::Refused(_, RejectionReason::BadSecret)
        ));
        let mut c = caller(None);
        assert!(matches!(
            run(&acceptor, &mut c, 0, 0),
            Handshake::Refused(_, RejectionReason::Unsecure)
        ));
    }

    #[test]
    fn garbage_is_not_a_handshake_and_a_rejection_carries_its_code() {
        let acceptor = Acceptor::new(1, ListenConfig::default());
        assert!(acceptor.handle(&[0x80, 0, 0, 0], PEER, 0, 1, 1).is_err());
        assert!(acceptor.handle(&[0; 64], PEER, 0, 1, 1).is_err());
        let bytes = rejection(1, 2, crate::reject::FORBIDDEN);
        let Ok(ControlPacket::Handshake(hs)) = ControlPacket::parse(&bytes) else {
            panic!()
        };
        assert_eq!(hs.handshake_type, HandshakeType::Reserved(1403));
        assert_eq!(hs.dest_socket_id, 2);
    }
}
