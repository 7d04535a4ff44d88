//! SRTP and SRTCP (RFC 3711, AES-GCM from RFC 7714) for the server's own media path:
//! session keys derived from the keying material DTLS exported (RFC 5764 §4.2), RTP
//! protected in place in the caller's buffer, SRTCP protected and unprotected. The
//! ciphers are aws-lc-rs's, the crypto rustls and str0m already use here.
//!
//! Why our own: str0m's SRTP sits behind its per-viewer packet queues and
//! retransmission cache; a viewer that only rewrites a shared packet's header and
//! encrypts it needs nothing but the keys and these transforms.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128, AES_256};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;
use thiserror::Error;

/// The protection profiles DTLS may negotiate (RFC 5764 §4.1.2, RFC 7714 §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Aes128CmSha1_80,
    AeadAes128Gcm,
    AeadAes256Gcm,
}

impl Profile {
    /// Master key and master salt lengths.
    fn lengths(self) -> (usize, usize) {
        match self {
            Profile::Aes128CmSha1_80 => (16, 14),
            Profile::AeadAes128Gcm => (16, 12),
            Profile::AeadAes256Gcm => (32, 12),
        }
    }

    /// How many bytes of keying material DTLS exports for this profile.
    pub fn material_len(self) -> usize {
        let (key, salt) = self.lengths();
        2 * (key + salt)
    }

    /// What protection adds to an RTP packet.
    pub fn rtp_overhead(self) -> usize {
        match self {
            Profile::Aes128CmSha1_80 => CM_TAG,
            _ => GCM_TAG,
        }
    }
}

/// HMAC-SHA1 tags are cut to 80 bits; GCM's are 128.
const CM_TAG: usize = 10;
const GCM_TAG: usize = 16;
/// SRTCP's trailer: the E flag and the 31-bit index.
const SRTCP_INDEX: usize = 4;
/// RTCP's fixed part, left in the clear: header and sender SSRC.
const RTCP_CLEAR: usize = 8;

/// KDF labels (RFC 3711 §4.3.2).
const LABEL_RTP_KEY: u8 = 0;
const LABEL_RTP_AUTH: u8 = 1;
const LABEL_RTP_SALT: u8 = 2;
const LABEL_RTCP_KEY: u8 = 3;
const LABEL_RTCP_AUTH: u8 = 4;
const LABEL_RTCP_SALT: u8 = 5;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SrtpError {
    #[error("keying material of {0} bytes, not {1}")]
    Material(usize, usize),
    #[error("packet too short")]
    Short,
    #[error("authentication failed")]
    Auth,
    #[error("replayed packet")]
    Replay,
    #[error("cipher error")]
    Cipher,
}

/// One direction's cipher: AES-CM with HMAC-SHA1, or AES-GCM.
enum Cipher {
    /// The HMAC key is 1.2 KB of state: boxed, as GCM is the common case.
    Cm {
        key: EncryptingKeyBytes,
        auth: Box<hmac::Key>,
    },
    Gcm(LessSafeKey),
}

/// An AES-CTR key, kept as bytes: aws-lc-rs's CTR keys are built per call.
struct EncryptingKeyBytes(Vec<u8>);

impl EncryptingKeyBytes {
    /// XORs `data` with the AES-CTR keystream from `iv`.
    fn apply(&self, iv: [u8; 16], data: &mut [u8]) -> Result<(), SrtpError> {
        ctr(&self.0, iv, data)
    }
}

fn ctr(key: &[u8], iv: [u8; 16], data: &mut [u8]) -> Result<(), SrtpError> {
    let algorithm = if key.len() == 32 { &AES_256 } else { &AES_128 };
    let key = UnboundCipherKey::new(algorithm, key).map_err(|_| SrtpError::Cipher)?;
    let key = EncryptingKey::ctr(key).map_err(|_| SrtpError::Cipher)?;
    key.less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(iv)))
        .map_err(|_| SrtpError::Cipher)?;
    Ok(())
}

/// Session keys of one kind of packet (RTP or RTCP) in one direction.
struct Keys {
    cipher: Cipher,
    salt: [u8; 14],
}

impl Keys {
    /// Derives the session keys of `labels` (key, auth, salt) from a master key and salt.
    fn derive(
        profile: Profile,
        master: &[u8],
        master_salt: &[u8],
        labels: [u8; 3],
    ) -> Result<Keys, SrtpError> {
        let (key_len, salt_len) = profile.lengths();
        let prf = |label: u8, out: &mut [u8]| -> Result<(), SrtpError> {
            // x = master salt XOR (label at byte 7), as the IV of an AES-CM keystream
            // over zeros (RFC 3711 §4.3.3; a 96-bit salt is padded, RFC 7714 §11).
            let mut iv = [0u8; 16];
            iv.get_mut(..master_salt.len())
                .ok_or(SrtpError::Cipher)?
                .copy_from_slice(master_salt);
            iv[7] ^= label;
            out.fill(0);
            ctr(master, iv, out)
        };
        let mut key = vec![0u8; key_len];
        prf(labels[0], &mut key)?;
        let mut salt = [0u8; 14];
        prf(
            labels[2],
            salt.get_mut(..salt_len).ok_or(SrtpError::Cipher)?,
        )?;
        let cipher = match profile {
            Profile::Aes128CmSha1_80 => {
                let mut auth = [0u8; 20];
                prf(labels[1], &mut auth)?;
                Cipher::Cm {
                    key: EncryptingKeyBytes(key),
                    auth: Box::new(hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &auth)),
                }
            }
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => {
                let algorithm = if key_len == 32 {
                    &AES_256_GCM
                } else {
                    &AES_128_GCM
                };
                let key = UnboundKey::new(algorithm, &key).map_err(|_| SrtpError::Cipher)?;
                Cipher::Gcm(LessSafeKey::new(key))
            }
        };
        Ok(Keys { cipher, salt })
    }

    /// GCM's 12-byte IV: `00 00 | SSRC | a | b` XOR the salt (RFC 7714 §8.1, §9.1).
    fn gcm_nonce(&self, ssrc: u32, a: u32, b: u16) -> Nonce {
        let mut iv = [0u8; 12];
        iv[2..6].copy_from_slice(&ssrc.to_be_bytes());
        iv[6..10].copy_from_slice(&a.to_be_bytes());
        iv[10..12].copy_from_slice(&b.to_be_bytes());
        for (v, s) in iv.iter_mut().zip(self.salt) {
            *v ^= s;
        }
        Nonce::assume_unique_for_key(iv)
    }

    /// AES-CM's 16-byte IV: salt XOR SSRC at bytes 4..8 XOR the 48-bit index at 8..14.
    fn cm_iv(&self, ssrc: u32, index: u64) -> [u8; 16] {
        let mut iv = [0u8; 16];
        iv[..14].copy_from_slice(&self.salt);
        for (v, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
            *v ^= s;
        }
        for (v, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
            *v ^= s;
        }
        iv
    }
}

/// The SSRC of an RTP or RTCP packet: bytes 8..12 and 4..8.
fn be32(packet: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(packet.get(at..at + 4)?.try_into().ok()?))
}

/// One direction of an SRTP session: RTP and RTCP keys, and for sending, SRTCP's index.
pub struct Context {
    profile: Profile,
    rtp: Keys,
    rtcp: Keys,
    /// The next SRTCP index sent.
    srtcp_index: u32,
    /// Received SRTCP: the highest index and a window of the 64 below it.
    replay: Option<(u32, u64)>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

/// The two directions of a session: what we send, what we receive.
#[derive(Debug)]
pub struct Session {
    pub tx: Context,
    pub rx: Context,
}

impl Session {
    /// The contexts from DTLS-SRTP keying material (RFC 5764 §4.2: client key, server
    /// key, client salt, server salt). `client` is whether we were DTLS's client.
    pub fn new(profile: Profile, material: &[u8], client: bool) -> Result<Session, SrtpError> {
        if material.len() != profile.material_len() {
            return Err(SrtpError::Material(material.len(), profile.material_len()));
        }
        let (k, s) = profile.lengths();
        let part = |at: usize, len: usize| material.get(at..at + len).ok_or(SrtpError::Short);
        let client_side = (part(0, k)?, part(2 * k, s)?);
        let server_side = (part(k, k)?, part(2 * k + s, s)?);
        let (ours, theirs) = if client {
            (client_side, server_side)
        } else {
            (server_side, client_side)
        };
        Ok(Session {
            tx: Context::new(profile, ours.0, ours.1)?,
            rx: Context::new(profile, theirs.0, theirs.1)?,
        })
    }
}

impl Context {
    fn new(profile: Profile, key: &[u8], salt: &[u8]) -> Result<Context, SrtpError> {
        let rtp_labels = [LABEL_RTP_KEY, LABEL_RTP_AUTH, LABEL_RTP_SALT];
        let rtcp_labels = [LABEL_RTCP_KEY, LABEL_RTCP_AUTH, LABEL_RTCP_SALT];
        Ok(Context {
            profile,
            rtp: Keys::derive(profile, key, salt, rtp_labels)?,
            rtcp: Keys::derive(profile, key, salt, rtcp_labels)?,
            srtcp_index: 0,
            replay: None,
        })
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Protects the RTP packet that ends `buf`, from `start`, whose header is
    /// `header_len` bytes: the payload is encrypted in place and the tag appended.
    /// `index` is the packet's 48-bit SRTP index (rollover count and sequence number).
    pub fn protect_rtp(
        &self,
        buf: &mut Vec<u8>,
        start: usize,
        header_len: usize,
        index: u64,
    ) -> Result<(), SrtpError> {
        let packet = buf.get_mut(start..).ok_or(SrtpError::Short)?;
        let ssrc = be32(packet, 8).ok_or(SrtpError::Short)?;
        if packet.len() < header_len {
            return Err(SrtpError::Short);
        }
        let (header, payload) = packet.split_at_mut(header_len);
        match &self.rtp.cipher {
            Cipher::Gcm(key) => {
                let nonce = self.rtp.gcm_nonce(ssrc, (index >> 16) as u32, index as u16);
                let tag = key
                    .seal_in_place_separate_tag(nonce, Aad::from(&*header), payload)
                    .map_err(|_| SrtpError::Cipher)?;
                buf.extend_from_slice(tag.as_ref());
            }
            Cipher::Cm { key, auth } => {
                key.apply(self.rtp.cm_iv(ssrc, index), payload)?;
                let mut mac = hmac::Context::with_key(auth);
                mac.update(buf.get(start..).unwrap_or_default());
                mac.update(&((index >> 16) as u32).to_be_bytes());
                let tag = mac.sign();
                buf.extend_from_slice(tag.as_ref().get(..CM_TAG).unwrap_or_default());
            }
        }
        Ok(())
    }

    /// Protects the (compound) RTCP packet that ends `buf`, from `start`.
    pub fn protect_rtcp(&mut self, buf: &mut Vec<u8>, start: usize) -> Result<(), SrtpError> {
        let index = self.srtcp_index;
        self.srtcp_index = (index + 1) & 0x7fff_ffff;
        let trailer = (0x8000_0000 | index).to_be_bytes();
        let packet = buf.get_mut(start..).ok_or(SrtpError::Short)?;
        let ssrc = be32(packet, 4).ok_or(SrtpError::Short)?;
        let (clear, body) = packet.split_at_mut(RTCP_CLEAR);
        match &self.rtcp.cipher {
            Cipher::Gcm(key) => {
                let nonce = self.rtcp.gcm_nonce(ssrc, index >> 16, index as u16);
                let mut aad = [0u8; RTCP_CLEAR + SRTCP_INDEX];
                aad[..RTCP_CLEAR].copy_from_slice(clear);
                aad[RTCP_CLEAR..].copy_from_slice(&trailer);
                let tag = key
                    .seal_in_place_separate_tag(nonce, Aad::from(aad), body)
                    .map_err(|_| SrtpError::Cipher)?;
                buf.extend_from_slice(tag.as_ref());
                buf.extend_from_slice(&trailer);
            }
            Cipher::Cm { key, auth } => {
                key.apply(self.rtcp.cm_iv(ssrc, u64::from(index)), body)?;
                buf.extend_from_slice(&trailer);
                let tag = hmac::sign(auth, buf.get(start..).unwrap_or_default());
                buf.extend_from_slice(tag.as_ref().get(..CM_TAG).unwrap_or_default());
            }
        }
        Ok(())
    }

    /// The plain RTCP of an SRTCP packet, into `out`. A packet that fails its check, is
    /// not encrypted, or was seen already is refused.
    pub fn unprotect_rtcp(&mut self, packet: &[u8], out: &mut Vec<u8>) -> Result<(), SrtpError> {
        let tag_len = match self.rtcp.cipher {
            Cipher::Gcm(_) => GCM_TAG,
            Cipher::Cm { .. } => CM_TAG,
        };
        if packet.len() < RTCP_CLEAR + SRTCP_INDEX + tag_len {
            return Err(SrtpError::Short);
        }
        let ssrc = be32(packet, 4).ok_or(SrtpError::Short)?;
        out.clear();
        let index = match &self.rtcp.cipher {
            Cipher::Gcm(key) => {
                let (sealed, trailer) = packet.split_at(packet.len() - SRTCP_INDEX);
                let e_index = be32(trailer, 0).ok_or(SrtpError::Short)?;
                if e_index & 0x8000_0000 == 0 {
                    return Err(SrtpError::Auth);
                }
                let index = e_index & 0x7fff_ffff;
                self.check_replay(index)?;
                let (clear, body) = sealed.split_at(RTCP_CLEAR);
                let mut aad = [0u8; RTCP_CLEAR + SRTCP_INDEX];
                aad[..RTCP_CLEAR].copy_from_slice(clear);
                aad[RTCP_CLEAR..].copy_from_slice(trailer);
                out.extend_from_slice(sealed);
                let nonce = self.rtcp.gcm_nonce(ssrc, index >> 16, index as u16);
                let body_len = body.len() - GCM_TAG;
                let opened = key
                    .open_in_place(
                        nonce,
                        Aad::from(aad),
                        out.get_mut(RTCP_CLEAR..).unwrap_or_default(),
                    )
                    .map_err(|_| SrtpError::Auth)?;
                debug_assert_eq!(opened.len(), body_len);
                out.truncate(RTCP_CLEAR + body_len);
                index
            }
            Cipher::Cm { key, auth } => {
                let (signed, tag) = packet.split_at(packet.len() - CM_TAG);
                let expected = hmac::sign(auth, signed);
                let expected = expected.as_ref().get(..CM_TAG).unwrap_or_default();
                // Constant time is not needed against a forger who cannot learn from
                // our silence, but costs nothing.
                let same = expected.iter().zip(tag).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0;
                if !same {
                    return Err(SrtpError::Auth);
                }
                let (body, trailer) = signed.split_at(signed.len() - SRTCP_INDEX);
                let e_index = be32(trailer, 0).ok_or(SrtpError::Short)?;
                if e_index & 0x8000_0000 == 0 {
                    return Err(SrtpError::Auth);
                }
                let index = e_index & 0x7fff_ffff;
                self.check_replay(index)?;
                out.extend_from_slice(body);
                let data = out.get_mut(RTCP_CLEAR..).unwrap_or_default();
                key.apply(self.rtcp.cm_iv(ssrc, u64::from(index)), data)?;
                index
            }
        };
        self.mark_seen(index);
        Ok(())
    }

    fn check_replay(&self, index: u32) -> Result<(), SrtpError> {
        let Some((highest, window)) = self.replay else {
            return Ok(());
        };
        if index > highest {
            return Ok(());
        }
        let behind = highest - index;
        if behind >= 64 || window & (1 << behind) != 0 {
            return Err(SrtpError::Replay);
        }
        Ok(())
    }

    fn mark_seen(&mut self, index: u32) {
        self.replay = Some(match self.replay {
            None => (index, 1),
            Some((highest, window)) if index > highest => {
                let ahead = index - highest;
                let shifted = if ahead >= 64 { 0 } else { window << ahead };
                (index, shifted | 1)
            }
            Some((highest, window)) => (highest, window | 1 << (highest - index)),
        });
    }

    /// Unprotects an SRTP packet into `out` (for tests and the bench's clients): the
    /// header and the plain payload. `index` is its 48-bit SRTP index.
    pub fn unprotect_rtp(
        &self,
        packet: &[u8],
        header_len: usize,
        index: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), SrtpError> {
        let ssrc = be32(packet, 8).ok_or(SrtpError::Short)?;
        out.clear();
        match &self.rtp.cipher {
            Cipher::Gcm(key) => {
                if packet.len() < header_len + GCM_TAG {
                    return Err(SrtpError::Short);
                }
                out.extend_from_slice(packet);
                let (header, body) = out.split_at_mut(header_len);
                let nonce = self.rtp.gcm_nonce(ssrc, (index >> 16) as u32, index as u16);
                key.open_in_place(nonce, Aad::from(&*header), body)
                    .map_err(|_| SrtpError::Auth)?;
                out.truncate(packet.len() - GCM_TAG);
            }
            Cipher::Cm { key, auth } => {
                if packet.len() < header_len + CM_TAG {
                    return Err(SrtpError::Short);
                }
                let (signed, tag) = packet.split_at(packet.len() - CM_TAG);
                let mut mac = hmac::Context::with_key(auth);
                mac.update(signed);
                mac.update(&((index >> 16) as u32).to_be_bytes());
                if mac.sign().as_ref().get(..CM_TAG) != Some(tag) {
                    return Err(SrtpError::Auth);
                }
                out.extend_from_slice(signed);
                let body = out.get_mut(header_len..).unwrap_or_default();
                key.apply(self.rtp.cm_iv(ssrc, index), body)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_kdf_gives_rfc_3711s_session_key_and_salt() {
        // RFC 3711 Appendix B.3.
        let master = hex("E1F97A0D3E018BE0D64FA32C06DE4139");
        let salt = hex("0EC675AD498AFEEBB6960B3AABE6");
        let keys = Keys::derive(Profile::Aes128CmSha1_80, &master, &salt, [0, 1, 2]).unwrap();
        assert_eq!(keys.salt.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
        let Cipher::Cm { key, .. } = keys.cipher else {
            panic!()
        };
        assert_eq!(key.0, hex("C61E7A93744F39EE10734AFE3FF7A087"));
    }

    fn pair(profile: Profile) -> (Session, Session) {
        let material: Vec<u8> = (0..profile.material_len() as u8).collect();
        (
            Session::new(profile, &material, false).unwrap(),
            Session::new(profile, &material, true).unwrap(),
        )
    }

    const PROFILES: [Profile; 3] = [
        Profile::Aes128CmSha1_80,
        Profile::AeadAes128Gcm,
        Profile::AeadAes256Gcm,
    ];

    #[test]
    fn rtp_goes_through_every_profile_and_a_flipped_bit_is_refused() {
        for profile in PROFILES {
            let (server, client) = pair(profile);
            let mut buf = vec![9, 9, 9];
            let header = [0x80, 96, 0, 7, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef];
            buf.extend_from_slice(&header);
            buf.extend_from_slice(b"payload bytes");
            server.tx.protect_rtp(&mut buf, 3, 12, 7).unwrap();
            let sent = &buf[3..];
            assert_eq!(sent.len(), 12 + 13 + profile.rtp_overhead());
            assert_ne!(&sent[12..25], b"payload bytes");
            let mut out = Vec::new();
            client.rx.unprotect_rtp(sent, 12, 7, &mut out).unwrap();
            assert_eq!(&out[12..], b"payload bytes");
            assert_eq!(&out[..12], &header);
            // Our own receive side does not share the sender's keys.
            assert!(server.rx.unprotect_rtp(sent, 12, 7, &mut out).is_err());
            let mut bad = sent.to_vec();
            bad[14] ^= 1;
            assert_eq!(
                client.rx.unprotect_rtp(&bad, 12, 7, &mut out),
                Err(SrtpError::Auth)
            );
        }
    }

    #[test]
    fn rtcp_goes_both_ways_and_replays_are_refused() {
        for profile in PROFILES {
            let (mut server, mut client) = pair(profile);
            let sr = [0x80, 201, 0, 1, 1, 2, 3, 4];
            let mut first = Vec::new();
            for _ in 0..3 {
                let mut buf = sr.to_vec();
                client.tx.protect_rtcp(&mut buf, 0).unwrap();
                let mut out = Vec::new();
                server.rx.unprotect_rtcp(&buf, &mut out).unwrap();
                assert_eq!(out, sr);
                if first.is_empty() {
                    first = buf;
                }
            }
            let mut out = Vec::new();
            assert_eq!(
                server.rx.unprotect_rtcp(&first, &mut out),
                Err(SrtpError::Replay)
            );
            let mut buf = b"\x80\xc9\x00\x01\x01\x02\x03\x04report".to_vec();
            server.tx.protect_rtcp(&mut buf, 0).unwrap();
            client.rx.unprotect_rtcp(&buf, &mut out).unwrap();
            assert_eq!(&out[8..], b"report");
            assert_eq!(
                client.rx.unprotect_rtcp(&buf[..10], &mut out),
                Err(SrtpError::Short)
            );
        }
    }

    #[test]
    fn material_of_the_wrong_length_is_refused() {
        assert_eq!(
            Session::new(Profile::AeadAes128Gcm, &[0; 10], false).err(),
            Some(SrtpError::Material(10, 56))
        );
    }
}
