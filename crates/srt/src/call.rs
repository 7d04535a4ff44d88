//! The caller's side of the caller-listener handshake: what a pull or push relay
//! and the bench's players and publishers open a connection with.
//!
//! srt-runtime's `CallerHandshake` builds and checks the packets (induction, the
//! conclusion with the HSv5 extensions, the stream id and the key material). Ours
//! is the time: the last handshake datagram goes again every [`RESEND`] until an
//! answer comes or the caller's `timeout` passes, as libsrt's connect does.
//!
//! The result is a [`Conclusion`], the same a listener's handshake gives, so both
//! sides make their [`Connection`](crate::Connection) the same way.

use crate::keys::Keys;
use crate::Conclusion;
use srt_runtime::caller::CallerHandshake;
use srt_runtime::crypto::SALT_LEN;
use srt_runtime::handshake_sm::{CryptoConfig, HandshakeConfig, HandshakeOutput};
use srt_runtime::packet::{ControlPacket, EncryptionField};
use std::time::{Duration, Instant};

/// How long a handshake datagram waits for its answer before it goes again.
pub const RESEND: Duration = Duration::from_millis(250);

/// A caller's settings.
#[derive(Clone)]
pub struct CallConfig {
    /// What to ask the listener for (`#!::r=live/cam,m=request` ...).
    pub stream_id: Option<String>,
    /// The receiver latency this side asks for; the larger of both sides' wins.
    pub latency: Duration,
    /// Encrypt with a key wrapped with this passphrase (10 to 79 bytes).
    pub passphrase: Option<Vec<u8>>,
    /// Key length: 16, 24 or 32.
    pub key_len: usize,
    /// Packets the receiver may hold (the flow window announced).
    pub flow_window: u32,
    /// Give up when the handshake has not completed after this long (libsrt's
    /// `SRTO_CONNTIMEO` is 3 s).
    pub timeout: Duration,
}

impl std::fmt::Debug for CallConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallConfig")
            .field("stream_id", &self.stream_id)
            .field("latency", &self.latency)
            .field("encrypted", &self.passphrase.is_some())
            .field("key_len", &self.key_len)
            .field("flow_window", &self.flow_window)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for CallConfig {
    fn default() -> Self {
        CallConfig {
            stream_id: None,
            latency: Duration::from_millis(120),
            passphrase: None,
            key_len: 16,
            flow_window: 8192,
            timeout: Duration::from_secs(3),
        }
    }
}

/// The random choices of one call, drawn by the application (sans-IO: no RNG here).
#[derive(Clone, Copy)]
pub struct CallSeed {
    /// Our socket id: the destination of the listener's packets.
    pub socket_id: u32,
    /// The first sequence number of both directions (31 bits).
    pub isn: u32,
    /// Salt and stream key of an encrypted connection (the first 16, 24 or 32 key
    /// bytes are used).
    pub salt: [u8; SALT_LEN],
    pub key: [u8; 32],
}

impl std::fmt::Debug for CallSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSeed")
            .field("socket_id", &self.socket_id)
            .field("isn", &self.isn)
            .finish_non_exhaustive()
    }
}

/// Why a call did not connect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The listener refused: `SRT_REJ_*` (1000 + n) or an application's code
    /// (1400 + an HTTP status, as [`crate::reject`]).
    #[error("refused by the listener ({code}: {})", reject_name(*.code))]
    Refused { code: u32 },
    #[error("no answer to the handshake")]
    TimedOut,
    #[error("bad settings: {0}")]
    Config(String),
}

/// A name for a rejection code, as libsrt reports it.
pub fn reject_name(code: u32) -> &'static str {
    use crate::reject::*;
    match code {
        BAD_REQUEST => "bad request",
        UNAUTHORIZED => "unauthorized",
        FORBIDDEN => "forbidden",
        NOT_FOUND => "not found",
        CONFLICT => "conflict",
        INTERNAL => "internal error",
        UNAVAILABLE => "unavailable",
        c => srt_runtime::handshake_sm::RejectionReason::from_bits(c).name(),
    }
}

/// A handshake in progress.
#[derive(Debug)]
pub struct Caller {
    hs: CallerHandshake,
    seed: CallSeed,
    passphrase: Option<Vec<u8>>,
    flow_window: u32,
    outgoing: Option<Vec<u8>>,
    /// The last handshake datagram sent: what goes again when its answer is overdue.
    last: Vec<u8>,
    next_resend: Instant,
    deadline: Instant,
    outcome: Option<Result<Conclusion, CallError>>,
}

impl Caller {
    /// Starts a call at `now`: its induction is the first [`Caller::poll_transmit`].
    pub fn new(config: CallConfig, seed: CallSeed, now: Instant) -> Result<Caller, CallError> {
        let encryption_field = match (&config.passphrase, config.key_len) {
            (None, _) => EncryptionField::NoEncryption,
            (Some(_), 16) => EncryptionField::Aes128,
            (Some(_), 24) => EncryptionField::Aes192,
            (Some(_), 32) => EncryptionField::Aes256,
            (Some(_), n) => return Err(CallError::Config(format!("key length {n}"))),
        };
        if let Some(p) = &config.passphrase {
            if !(10..=79).contains(&p.len()) {
                return Err(CallError::Config("a passphrase has 10 to 79 bytes".into()));
            }
        }
        let hs_config = HandshakeConfig {
            latency_ms: u16::try_from(config.latency.as_millis()).unwrap_or(u16::MAX),
            initial_seq_number: seed.isn & 0x7fff_ffff,
            max_flow_window_size: config.flow_window,
            stream_id: config.stream_id,
            encryption_field,
            crypto: config.passphrase.as_ref().map(|p| CryptoConfig {
                passphrase: p.clone(),
                salt: seed.salt,
                sek: seed.key[..config.key_len].to_vec(),
            }),
            // Our clock resends and gives up (`handle_timeout`); the machine is never
            // ticked.
            max_retries: u32::MAX,
            ..HandshakeConfig::default()
        };
        let mut hs = CallerHandshake::new(seed.socket_id, hs_config);
        let induction = hs.start().map_err(|e| CallError::Config(e.to_string()))?;
        Ok(Caller {
            hs,
            seed: CallSeed {
                isn: seed.isn & 0x7fff_ffff,
                ..seed
            },
            passphrase: config.passphrase,
            flow_window: config.flow_window,
            last: induction.clone(),
            outgoing: Some(induction),
            next_resend: now + RESEND,
            deadline: now + config.timeout,
            outcome: None,
        })
    }

    pub fn socket_id(&self) -> u32 {
        self.seed.socket_id
    }

    /// One datagram from the listener. What is not a handshake answer is ignored
    /// (a listener's data may overtake its conclusion response: libsrt's caller
    /// drops it too, and the sender retransmits).
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        if self.outcome.is_some() {
            return;
        }
        let Ok(packet) = ControlPacket::parse(datagram) else {
            return;
        };
        let ControlPacket::Handshake(hs) = &packet else {
            return;
        };
        // The listener's first sequence number (libsrt's is ours again): the
        // machine checks it but does not hand it on.
        let peer_isn = hs.initial_seq_number;
        let Ok(out) = self.hs.feed(&packet) else {
            return;
        };
        for o in out {
            match o {
                HandshakeOutput::Send(bytes) => {
                    self.last.clone_from(&bytes);
                    self.outgoing = Some(bytes);
                    self.next_resend = now + RESEND;
                }
                HandshakeOutput::Connected(n) => {
                    // The machine confirmed the listener's echo of our key material.
                    let keys = match (&self.passphrase, &n.sek) {
                        (Some(p), Some(sek)) => Some(Keys::agreed(p, sek, self.seed.salt)),
                        _ => None,
                    };
                    self.outgoing = None;
                    self.outcome = Some(Ok(Conclusion {
                        peer_socket_id: n.peer_socket_id,
                        socket_id: self.seed.socket_id,
                        peer_isn,
                        isn: self.seed.isn,
                        stream_id: n.stream_id,
                        latency: Duration::from_millis(u64::from(n.latency_ms)),
                        flow_window: n.max_flow_window_size.min(self.flow_window),
                        keys,
                        response: Vec::new(),
                    }));
                }
                HandshakeOutput::Rejected(r) => {
                    self.outgoing = None;
                    self.outcome = Some(Err(CallError::Refused { code: r.to_bits() }));
                }
                _ => {}
            }
        }
    }

    /// When [`Caller::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.outcome
            .is_none()
            .then(|| self.next_resend.min(self.deadline))
    }

    /// Resends the last handshake datagram when its answer is overdue, and gives up
    /// at the deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.outcome.is_some() {
            return;
        }
        if now >= self.deadline {
            self.outcome = Some(Err(CallError::TimedOut));
            self.outgoing = None;
            return;
        }
        if now >= self.next_resend {
            // The machine's own retransmission counts ticks; ours counts time: the
            // last datagram goes again as it was.
            self.outgoing = Some(self.last.clone());
            self.next_resend = now + RESEND;
        }
    }

    /// The next datagram for the listener.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outgoing.take()
    }

    /// The call's end, once: the conclusion to make a connection of, or why none.
    pub fn poll_outcome(&mut self) -> Option<Result<Conclusion, CallError>> {
        self.outcome.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Acceptor, Connection, Handshake, ListenConfig};
    use std::net::SocketAddr;

    const PEER: &str = "127.0.0.1:4000";

    fn seed() -> CallSeed {
        CallSeed {
            socket_id: 0x0101,
            isn: 0x8000_0007,
            salt: [3; SALT_LEN],
            key: [9; 32],
        }
    }

    /// Runs the handshake through `acceptor`, which accepts or refuses with `reject`;
    /// returns the caller's outcome and the listener's side when it accepted.
    fn call(
        config: CallConfig,
        acceptor: &Acceptor,
        reject: Option<u32>,
        now: Instant,
    ) -> (Result<Conclusion, CallError>, Option<Conclusion>) {
        let peer: SocketAddr = PEER.parse().unwrap();
        let mut caller = Caller::new(config, seed(), now).unwrap();
        let mut accepted = None;
        for _ in 0..4 {
            let Some(out) = caller.poll_transmit() else {
                break;
            };
            match acceptor.handle(&out, peer, 100, 0x0202, 1).unwrap() {
                Handshake::Reply(r) | Handshake::Refused(r, _) => caller.handle_datagram(now, &r),
                Handshake::Conclusion(c) => {
                    let answer = match reject {
                        Some(code) => c.reject(code),
                        None => c.response.clone(),
                    };
                    caller.handle_datagram(now, &answer);
                    accepted = reject.is_none().then_some(c);
                }
            }
        }
        (caller.poll_outcome().expect("an outcome"), accepted)
    }

    /// Moves every datagram between the two until both are quiet, at `now`.
    fn shuttle(a: &mut Connection, b: &mut Connection, now: Instant) {
        for _ in 0..64 {
            if !(deliver(a, b, now) | deliver(b, a, now)) {
                return;
            }
        }
    }

    /// Moves what `from` has to send to `to`; whether there was anything.
    fn deliver(from: &mut Connection, to: &mut Connection, now: Instant) -> bool {
        let (mut control, mut data) = (Vec::new(), Vec::new());
        from.take_transmits(&mut control, &mut data);
        let moved = !control.is_empty() || !data.is_empty();
        for c in control {
            to.handle_datagram(now, &c).unwrap();
        }
        for d in data {
            let mut bytes = d.header.to_vec();
            bytes.extend_from_slice(&d.payload);
            to.handle_datagram(now, &bytes).unwrap();
        }
        moved
    }

    fn both_ways(config: CallConfig, listen: ListenConfig) {
        let now = Instant::now();
        let acceptor = Acceptor::new(5, listen);
        let (called, accepted) = call(config, &acceptor, None, now);
        let called = called.expect("connected");
        let accepted = accepted.expect("accepted");
        assert_eq!(called.peer_socket_id, accepted.socket_id);
        assert_eq!(accepted.peer_socket_id, called.socket_id);
        assert_eq!((called.isn, called.peer_isn), (7, 7));
        assert_eq!(called.latency, accepted.latency);
        assert_eq!(
            called.keys.as_ref().map(Keys::key_len),
            accepted.keys.as_ref().map(Keys::key_len)
        );
        let idle = Duration::from_secs(5);
        let mut caller = Connection::accepted(called, idle, now);
        let mut listener = Connection::accepted(accepted, idle, now);
        for i in 0..50u8 {
            caller.send(now, &[i; 1316]);
            listener.send(now, &[i ^ 0xff; 188]);
        }
        let mut at = now;
        for _ in 0..20 {
            shuttle(&mut caller, &mut listener, at);
            at += Duration::from_millis(2);
            caller.handle_timeout(at);
            listener.handle_timeout(at);
        }
        let got: Vec<_> = std::iter::from_fn(|| listener.poll_data()).collect();
        assert_eq!(got.len(), 50);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, p)| *p == [i as u8; 1316][..]));
        let got: Vec<_> = std::iter::from_fn(|| caller.poll_data()).collect();
        assert_eq!(got.len(), 50);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, p)| *p == [i as u8 ^ 0xff; 188][..]));
    }

    #[test]
    fn a_call_connects_and_data_goes_both_ways() {
        let config = CallConfig {
            stream_id: Some("#!::r=live/a,m=request".into()),
            latency: Duration::from_millis(300),
            ..CallConfig::default()
        };
        both_ways(config, ListenConfig::default());
    }

    #[test]
    fn an_encrypted_call_connects_with_its_key_length() {
        let phrase = b"a passphrase of ours".to_vec();
        for key_len in [16, 24, 32] {
            let config = CallConfig {
                passphrase: Some(phrase.clone()),
                key_len,
                ..CallConfig::default()
            };
            let listen = ListenConfig {
                passphrase: Some(phrase.clone()),
                ..ListenConfig::default()
            };
            both_ways(config, listen);
        }
    }

    #[test]
    fn a_player_never_has_more_unacknowledged_packets_than_its_window() {
        let now = Instant::now();
        let acceptor = Acceptor::new(5, ListenConfig::default());
        let config = CallConfig {
            flow_window: 40,
            ..CallConfig::default()
        };
        let (called, accepted) = call(config, &acceptor, None, now);
        let idle = Duration::from_secs(5);
        let mut player = Connection::accepted(called.expect("connected"), idle, now);
        let mut server = Connection::accepted(accepted.expect("accepted"), idle, now);
        for i in 0..200u8 {
            server.send(now, &[i; 1316]);
        }
        // Nothing comes back from the player yet: the server stops at its window.
        let (mut control, mut data) = (Vec::new(), Vec::new());
        let mut at = now;
        for _ in 0..20 {
            at += Duration::from_millis(1);
            server.handle_timeout(at);
            server.take_transmits(&mut control, &mut data);
        }
        assert_eq!(data.len(), 40);
        for d in data.drain(..) {
            let mut bytes = d.header.to_vec();
            bytes.extend_from_slice(&d.payload);
            player.handle_datagram(at, &bytes).unwrap();
        }
        // The player's ACK opens the window at once, not at the server's next timer.
        player.handle_timeout(at);
        player.take_transmits(&mut control, &mut data);
        assert!(!control.is_empty());
        for c in control.drain(..) {
            server.handle_datagram(at, &c).unwrap();
        }
        server.take_transmits(&mut control, &mut data);
        assert!(!data.is_empty() && data.len() <= 40, "{}", data.len());
        data.clear();
        // And everything arrives, the window kept all along.
        for _ in 0..200 {
            at += Duration::from_millis(1);
            server.handle_timeout(at);
            player.handle_timeout(at);
            shuttle(&mut server, &mut player, at);
        }
        let got: Vec<_> = std::iter::from_fn(|| player.poll_data()).collect();
        assert_eq!(got.len(), 200);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, p)| *p == [i as u8; 1316][..]));
        assert_eq!(player.recv_stats().outside, 0);
    }

    #[test]
    fn refusals_carry_their_codes() {
        let now = Instant::now();
        let acceptor = Acceptor::new(5, ListenConfig::default());
        let (out, _) = call(CallConfig::default(), &acceptor, Some(1403), now);
        assert_eq!(out.unwrap_err(), CallError::Refused { code: 1403 });
        assert_eq!(reject_name(1403), "forbidden");
        // A passphrase the listener does not have.
        let config = CallConfig {
            passphrase: Some(b"0123456789".to_vec()),
            ..CallConfig::default()
        };
        let (out, _) = call(config, &acceptor, None, now);
        assert!(
            matches!(out, Err(CallError::Refused { code: 1011 })),
            "{out:?}"
        );
    }

    #[test]
    fn the_last_datagram_goes_again_until_the_timeout() {
        let now = Instant::now();
        let config = CallConfig {
            timeout: Duration::from_secs(1),
            ..CallConfig::default()
        };
        let mut caller = Caller::new(config, seed(), now).unwrap();
        let first = caller.poll_transmit().unwrap();
        let mut sent = 0;
        let mut at = now;
        while let Some(t) = caller.poll_timeout() {
            assert!(t > at);
            at = t;
            caller.handle_timeout(at);
            if let Some(again) = caller.poll_transmit() {
                assert_eq!(again, first);
                sent += 1;
            }
        }
        assert_eq!(sent, 3);
        assert!(matches!(
            caller.poll_outcome(),
            Some(Err(CallError::TimedOut))
        ));
        assert!(Caller::new(
            CallConfig {
                key_len: 20,
                passphrase: Some(b"0123456789".to_vec()),
                ..CallConfig::default()
            },
            seed(),
            now
        )
        .is_err());
    }
}
