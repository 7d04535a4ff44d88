//! The RTMP handshake: C0C1 → S0S1S2 → C2, in the plain form and the digest form.
//!
//! Why both: the plain form (echo the peer's random block) is what the spec describes
//! and what ffmpeg and OBS accept. Flash Player and some hardware encoders send a C1
//! carrying an HMAC-SHA256 digest and refuse a server whose S1/S2 do not carry the
//! matching digests, so a server must detect and answer that form too.
//!
//! The digest form: a 32-byte digest sits inside the 1536-byte block, at an offset
//! derived from four bytes of the block. Two layouts are in use ([`DigestScheme`]); we
//! try both. The digest is HMAC-SHA256 over the block without those 32 bytes, keyed
//! with the first 30 bytes of the Flash Player key (C1) or the first 36 bytes of the
//! Flash Media Server key (S1). S2 ends with a digest keyed by HMAC(full server key,
//! C1's digest); C2 likewise with the full player key and S1's digest.
//!
//! # Invariants
//! - Nothing is consumed until a whole step (C0+C1, C2, S0+S1+S2) is buffered; the
//!   buffer a step can make us hold is bounded by its fixed size.
//! - The server never rejects a C1 without a valid digest: it falls back to the plain
//!   echo. It does not check C2 (clients compute it inconsistently; no server does).

use bytes::{Buf, BufMut, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::RtmpError;

/// Size of C1, C2, S1 and S2.
pub const HANDSHAKE_SIZE: usize = 1536;
/// The only RTMP version byte (C0/S0) we speak; 6 and 8 are RTMPE, which we refuse.
pub const RTMP_VERSION: u8 = 3;
/// Bytes of a handshake block after its time and version fields: the random part.
pub const RANDOM_LEN: usize = HANDSHAKE_SIZE - 8;
const DIGEST_LEN: usize = 32;

/// "Genuine Adobe Flash Player 001" followed by 32 constant bytes; C1 digests use the first 30.
const PLAYER_KEY: [u8; 62] = concat_key(b"Genuine Adobe Flash Player 001");
const PLAYER_KEY_TEXT_LEN: usize = 30;
/// "Genuine Adobe Flash Media Server 001" followed by the same 32 bytes; S1 digests use the first 36.
const SERVER_KEY: [u8; 68] = concat_key(b"Genuine Adobe Flash Media Server 001");
const SERVER_KEY_TEXT_LEN: usize = 36;
const KEY_SUFFIX: [u8; 32] = [
    0xf0, 0xee, 0xc2, 0x4a, 0x80, 0x68, 0xbe, 0xe8, 0x2e, 0x00, 0xd0, 0xd1, 0x02, 0x9e, 0x7e, 0x57,
    0x6e, 0xec, 0x5d, 0x2d, 0x29, 0x80, 0x6f, 0xab, 0x93, 0xb8, 0xe6, 0x36, 0xcf, 0xeb, 0x31, 0xae,
];
/// The version field a digest-form S1 carries (any non-zero value marks the digest form).
const SERVER_VERSION: [u8; 4] = [0x04, 0x05, 0x00, 0x01];
/// The version field our digest-form C1 carries (a Flash Player 10-era value).
const CLIENT_VERSION: [u8; 4] = [0x80, 0x00, 0x07, 0x02];

// Only evaluated for the two key constants: an index out of bounds there fails the
// build, it cannot panic at run time (and a const fn cannot use iterators).
#[allow(clippy::indexing_slicing)]
const fn concat_key<const N: usize>(text: &[u8]) -> [u8; N] {
    let mut key = [0u8; N];
    let mut i = 0;
    while i < text.len() {
        key[i] = text[i];
        i += 1;
    }
    let mut j = 0;
    while j < KEY_SUFFIX.len() {
        key[text.len() + j] = KEY_SUFFIX[j];
        j += 1;
    }
    key
}

/// Where the digest sits in a handshake block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestScheme {
    /// Offset from bytes 8..12 (right after time and version), digest within bytes 12..772.
    First,
    /// Offset from bytes 772..776, digest within the second half (776..1536).
    Second,
}

/// Which form a completed handshake took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeKind {
    /// Random blocks echoed back.
    Plain,
    /// HMAC-SHA256 digests, placed by the given scheme.
    Digest(DigestScheme),
}

type Block = [u8; HANDSHAKE_SIZE];

fn digest_offset(block: &Block, scheme: DigestScheme) -> usize {
    let base = match scheme {
        DigestScheme::First => 8,
        DigestScheme::Second => 772,
    };
    let sum: usize = block
        .iter()
        .skip(base)
        .take(4)
        .map(|&b| usize::from(b))
        .sum();
    // 728 = 764-byte half block minus the 4 offset bytes minus the 32-byte digest.
    sum % 728 + base + 4
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; DIGEST_LEN] {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0; DIGEST_LEN];
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// The digest of `block` with the 32 bytes at `offset` left out; `None` if they do not
/// fit, which an offset from [`digest_offset`] (at most 1503) rules out.
fn block_digest(block: &Block, offset: usize, key: &[u8]) -> Option<[u8; DIGEST_LEN]> {
    let (head, rest) = block.split_at_checked(offset)?;
    Some(hmac_sha256(key, &[head, rest.get(DIGEST_LEN..)?]))
}

/// Finds a valid digest in `block` with either scheme.
fn find_digest(block: &Block, key: &[u8]) -> Option<(DigestScheme, [u8; DIGEST_LEN])> {
    [DigestScheme::First, DigestScheme::Second]
        .into_iter()
        .find_map(|scheme| {
            let offset = digest_offset(block, scheme);
            let expected = block_digest(block, offset, key)?;
            (block.get(offset..offset + DIGEST_LEN)? == expected).then_some((scheme, expected))
        })
}

/// Writes the digest into `block` at the scheme's offset and returns it (`None`, block
/// unchanged, only where [`block_digest`] is).
fn sign_block(block: &mut Block, scheme: DigestScheme, key: &[u8]) -> Option<[u8; DIGEST_LEN]> {
    let offset = digest_offset(block, scheme);
    let digest = block_digest(block, offset, key)?;
    block
        .get_mut(offset..offset + DIGEST_LEN)?
        .copy_from_slice(&digest);
    Some(digest)
}

/// A block whose last 32 bytes are HMAC(HMAC(`long_key`, `peer_digest`), first 1504 bytes).
fn response_block(random: &[u8; RANDOM_LEN], long_key: &[u8], peer_digest: &[u8]) -> Block {
    let mut block = [0u8; HANDSHAKE_SIZE];
    block[8..].copy_from_slice(random);
    let key = hmac_sha256(long_key, &[peer_digest]);
    let digest = hmac_sha256(&key, &[&block[..HANDSHAKE_SIZE - DIGEST_LEN]]);
    block[HANDSHAKE_SIZE - DIGEST_LEN..].copy_from_slice(&digest);
    block
}

fn response_block_valid(block: &Block, long_key: &[u8], peer_digest: &[u8]) -> bool {
    let key = hmac_sha256(long_key, &[peer_digest]);
    let digest = hmac_sha256(&key, &[&block[..HANDSHAKE_SIZE - DIGEST_LEN]]);
    block[HANDSHAKE_SIZE - DIGEST_LEN..] == digest
}

#[derive(Debug)]
enum ServerState {
    ExpectC0C1,
    ExpectC2,
    Done,
}

/// The server side: reads C0C1, writes S0S1S2, reads C2.
#[derive(Debug)]
pub struct ServerHandshake {
    state: ServerState,
    random: Box<[u8; RANDOM_LEN]>,
    kind: Option<HandshakeKind>,
}

impl ServerHandshake {
    /// A handshake whose S1 (and digest-form S2) carry `random`. Randomness is an input
    /// so that tests are reproducible; the session fills it from the OS generator.
    pub fn new(random: &[u8; RANDOM_LEN]) -> Self {
        ServerHandshake {
            state: ServerState::ExpectC0C1,
            random: Box::new(*random),
            kind: None,
        }
    }

    /// The form chosen once C1 was read.
    pub fn kind(&self) -> Option<HandshakeKind> {
        self.kind
    }

    /// Consumes handshake bytes from the front of `buf`, appending our answers to `out`.
    /// Returns `Ok(true)` once C2 is consumed; bytes after it (the first chunks) stay in `buf`.
    pub fn read(&mut self, buf: &mut BytesMut, out: &mut BytesMut) -> Result<bool, RtmpError> {
        loop {
            match self.state {
                ServerState::ExpectC0C1 => {
                    match buf.first() {
                        None => return Ok(false),
                        Some(&RTMP_VERSION) => {}
                        Some(_) => {
                            return Err(RtmpError::Handshake {
                                what: "C0 version is not 3",
                            })
                        }
                    }
                    let Some(c1) = buf.get(1..).and_then(<[u8]>::first_chunk) else {
                        return Ok(false);
                    };
                    self.answer_c1(c1, out);
                    buf.advance(1 + HANDSHAKE_SIZE);
                    self.state = ServerState::ExpectC2;
                }
                ServerState::ExpectC2 => {
                    if buf.len() < HANDSHAKE_SIZE {
                        return Ok(false);
                    }
                    let _c2 = buf.split_to(HANDSHAKE_SIZE);
                    self.state = ServerState::Done;
                }
                ServerState::Done => return Ok(true),
            }
        }
    }

    fn answer_c1(&mut self, c1: &Block, out: &mut BytesMut) {
        out.reserve(1 + 2 * HANDSHAKE_SIZE);
        out.put_u8(RTMP_VERSION);
        // A C1 with a zero version field is the plain form by definition.
        let found = if c1[4..8] == [0, 0, 0, 0] {
            None
        } else {
            find_digest(c1, &PLAYER_KEY[..PLAYER_KEY_TEXT_LEN])
        };
        match found {
            Some((scheme, c1_digest)) => {
                let mut s1 = [0u8; HANDSHAKE_SIZE];
                s1[4..8].copy_from_slice(&SERVER_VERSION);
                s1[8..].copy_from_slice(&self.random[..]);
                sign_block(&mut s1, scheme, &SERVER_KEY[..SERVER_KEY_TEXT_LEN]);
                out.put_slice(&s1);
                let mut s2_random = *self.random;
                s2_random.reverse();
                out.put_slice(&response_block(&s2_random, &SERVER_KEY, &c1_digest));
                self.kind = Some(HandshakeKind::Digest(scheme));
            }
            None => {
                out.put_bytes(0, 8); // time 0, version 0
                out.put_slice(&self.random[..]);
                out.put_slice(c1); // S2 echoes C1
                self.kind = Some(HandshakeKind::Plain);
            }
        }
    }
}

#[derive(Debug)]
enum ClientState {
    ExpectS0S1S2,
    Done,
}

/// The client side: writes C0C1, reads S0S1S2, writes C2.
#[derive(Debug)]
pub struct ClientHandshake {
    state: ClientState,
    c1: Box<Block>,
    scheme: Option<DigestScheme>,
    c1_digest: [u8; DIGEST_LEN],
}

impl ClientHandshake {
    /// Starts a handshake; writes C0C1 to `out`. `scheme: None` is the plain form.
    pub fn new(
        random: &[u8; RANDOM_LEN],
        scheme: Option<DigestScheme>,
        out: &mut BytesMut,
    ) -> Self {
        let mut c1 = [0u8; HANDSHAKE_SIZE];
        c1[8..].copy_from_slice(random);
        let mut c1_digest = [0u8; DIGEST_LEN];
        if let Some(scheme) = scheme {
            c1[4..8].copy_from_slice(&CLIENT_VERSION);
            c1_digest =
                sign_block(&mut c1, scheme, &PLAYER_KEY[..PLAYER_KEY_TEXT_LEN]).unwrap_or_default();
        }
        out.reserve(1 + HANDSHAKE_SIZE);
        out.put_u8(RTMP_VERSION);
        out.put_slice(&c1);
        ClientHandshake {
            state: ClientState::ExpectS0S1S2,
            c1: Box::new(c1),
            scheme,
            c1_digest,
        }
    }

    /// Consumes S0S1S2 from `buf` and writes C2 to `out`. In the digest form, S1 and
    /// S2 must carry valid digests. Returns `Ok(true)` when done.
    pub fn read(&mut self, buf: &mut BytesMut, out: &mut BytesMut) -> Result<bool, RtmpError> {
        if let ClientState::Done = self.state {
            return Ok(true);
        }
        match buf.first() {
            None => return Ok(false),
            Some(&RTMP_VERSION) => {}
            Some(_) => {
                return Err(RtmpError::Handshake {
                    what: "S0 version is not 3",
                })
            }
        }
        // S1 and S2 follow S0; copied out, so the step leaves `buf` before any check.
        let Some((s1, s2)) = buf.get(1..).and_then(|s| {
            let (s1, rest) = s.split_first_chunk::<HANDSHAKE_SIZE>()?;
            Some((*s1, *rest.first_chunk::<HANDSHAKE_SIZE>()?))
        }) else {
            return Ok(false);
        };
        buf.advance(1 + 2 * HANDSHAKE_SIZE);
        match self.scheme {
            None => {
                out.put_slice(&s1); // C2 echoes S1
            }
            Some(_) => {
                let Some((_, s1_digest)) = find_digest(&s1, &SERVER_KEY[..SERVER_KEY_TEXT_LEN])
                else {
                    return Err(RtmpError::Handshake {
                        what: "S1 digest does not verify",
                    });
                };
                if !response_block_valid(&s2, &SERVER_KEY, &self.c1_digest) {
                    return Err(RtmpError::Handshake {
                        what: "S2 digest does not verify",
                    });
                }
                let mut random = [0u8; RANDOM_LEN];
                let c1: &Block = &self.c1;
                random.copy_from_slice(&c1[8..]);
                random.reverse();
                out.put_slice(&response_block(&random, &PLAYER_KEY, &s1_digest));
            }
        }
        self.state = ClientState::Done;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(seed: u8) -> [u8; RANDOM_LEN] {
        let mut r = [0u8; RANDOM_LEN];
        for (i, b) in r.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        r
    }

    fn run(scheme: Option<DigestScheme>) -> HandshakeKind {
        let mut to_server = BytesMut::new();
        let mut to_client = BytesMut::new();
        let mut client = ClientHandshake::new(&random(1), scheme, &mut to_server);
        let mut server = ServerHandshake::new(&random(2));
        assert!(!server
            .read(&mut to_server, &mut to_client)
            .expect("C0C1 ok"));
        assert_eq!(to_client.len(), 1 + 2 * HANDSHAKE_SIZE);
        assert!(client
            .read(&mut to_client, &mut to_server)
            .expect("S0S1S2 ok"));
        to_server.extend_from_slice(b"rest");
        assert!(server.read(&mut to_server, &mut to_client).expect("C2 ok"));
        assert_eq!(&to_server[..], b"rest");
        server.kind().expect("kind known")
    }

    #[test]
    fn plain_handshake_completes() {
        assert_eq!(run(None), HandshakeKind::Plain);
    }

    #[test]
    fn digest_handshake_completes_with_both_schemes() {
        assert_eq!(
            run(Some(DigestScheme::First)),
            HandshakeKind::Digest(DigestScheme::First)
        );
        assert_eq!(
            run(Some(DigestScheme::Second)),
            HandshakeKind::Digest(DigestScheme::Second)
        );
    }

    #[test]
    fn plain_s2_echoes_c1() {
        let mut to_server = BytesMut::new();
        let mut to_client = BytesMut::new();
        let _client = ClientHandshake::new(&random(7), None, &mut to_server);
        let c1 = to_server[1..].to_vec();
        ServerHandshake::new(&random(2))
            .read(&mut to_server, &mut to_client)
            .expect("ok");
        assert_eq!(&to_client[1 + HANDSHAKE_SIZE..], &c1[..]);
    }

    #[test]
    fn bad_digest_in_c1_falls_back_to_plain() {
        let mut to_server = BytesMut::new();
        let _client = ClientHandshake::new(&random(1), Some(DigestScheme::First), &mut to_server);
        // Corrupt a byte that is in every digest's input.
        to_server[1 + 1535] ^= 0xff;
        to_server[1 + 13] ^= 0xff;
        let mut server = ServerHandshake::new(&random(2));
        server
            .read(&mut to_server, &mut BytesMut::new())
            .expect("ok");
        assert_eq!(server.kind(), Some(HandshakeKind::Plain));
    }

    #[test]
    fn wrong_version_is_an_error_at_once() {
        let mut server = ServerHandshake::new(&random(2));
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]);
        assert!(matches!(
            server.read(&mut buf, &mut BytesMut::new()),
            Err(RtmpError::Handshake { .. })
        ));
    }

    #[test]
    fn client_refuses_plain_answer_to_digest() {
        let mut to_server = BytesMut::new();
        let mut client =
            ClientHandshake::new(&random(1), Some(DigestScheme::First), &mut to_server);
        let mut reply = BytesMut::new();
        reply.put_u8(3);
        reply.put_bytes(0, 2 * HANDSHAKE_SIZE);
        assert!(matches!(
            client.read(&mut reply, &mut BytesMut::new()),
            Err(RtmpError::Handshake { .. })
        ));
    }
}
