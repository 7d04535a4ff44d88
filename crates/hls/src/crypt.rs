//! AES-128 encryption of whole segments (RFC 8216 section 5.2, `METHOD=AES-128`).
//!
//! Why here: which key a segment gets, its IV and the playlist's `EXT-X-KEY` tags are
//! the timeline's business. The server supplies the secret (randomness is an input,
//! as the clock is) and serves each key to the viewers its authorization admits.
//!
//! # Keys
//! Segment `msn` is encrypted with the key of *period* `msn / rotation`: a new key
//! every `rotation` segments. A period's key is the first 16 bytes of
//! HMAC-SHA256(secret, [`KEY_LABEL`] || period as 8 big-endian bytes), so:
//! - nothing is stored per key, and a key exists to be served only while a kept
//!   segment uses it (the caller checks the kept range): the set is bounded by it;
//! - a segment made again (segmenting stopped while idle, then restarted) gets the
//!   same key and IV under the same URI: the same clear bytes give the same
//!   ciphertext, which caches keep as immutable;
//! - another stream instance has another secret, so another key for the same period.
//!
//! The secret is 32 random bytes per stream instance. Neither it nor any key shows in
//! `Debug` output, so no log line can carry one.
//!
//! # IV
//! The segment's msn as a 128-bit big-endian number: RFC 8216's rule when `IV` is
//! absent, and written explicitly in the playlist anyway (`render`), so players need
//! not count sequence numbers to decrypt.
//!
//! # Init segments
//! Not encrypted: the playlist writes `EXT-X-MAP` before the first `EXT-X-KEY`, and an
//! `EXT-X-KEY` applies only to the init segments declared after it (RFC 8216 section
//! 4.3.2.4). The init segment holds codec parameters, no media.

use aws_lc_rs::cipher::{EncryptionContext, PaddedBlockEncryptingKey, UnboundCipherKey, AES_128};
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;
use bytes::Bytes;

use crate::config::MAX_KEY_ROTATION;
use crate::HlsError;

/// Bytes of an AES-128 key, as the key URI answers it.
pub const KEY_LEN: usize = 16;

/// Bytes of a stream's key secret.
pub const SECRET_LEN: usize = 32;

/// What the HMAC of a key is over, before the period: a domain separator, so the
/// secret can never yield a key for another use.
pub const KEY_LABEL: &[u8] = b"sluice hls aes-128 key\0";

/// The key secret of one stream instance. `Debug` shows nothing of it.
#[derive(Clone)]
pub struct KeySecret([u8; SECRET_LEN]);

impl KeySecret {
    /// A secret from `bytes`, which the caller draws from a secure random source.
    pub fn new(bytes: [u8; SECRET_LEN]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(..)")
    }
}

/// The keys of one stream's segments: which period a segment is in, a period's key,
/// and a segment's encryption. Cheap to clone (an HMAC key). `Debug` shows only the
/// rotation.
#[derive(Clone)]
pub struct SegmentKeys {
    hmac: hmac::Key,
    rotation: u32,
}

impl std::fmt::Debug for SegmentKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentKeys")
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

impl SegmentKeys {
    /// Keys from `secret`, a new one every `rotation` segments (1..=[`MAX_KEY_ROTATION`]).
    pub fn new(secret: &KeySecret, rotation: u32) -> Result<Self, HlsError> {
        if rotation == 0 || rotation > MAX_KEY_ROTATION {
            return Err(HlsError::Config {
                what: "key rotation must be 1..=1000 segments",
            });
        }
        Ok(Self {
            hmac: hmac::Key::new(hmac::HMAC_SHA256, &secret.0),
            rotation,
        })
    }

    /// Segments per key.
    pub fn rotation(&self) -> u32 {
        self.rotation
    }

    /// The period (key id) of segment `msn`.
    pub fn period(&self, msn: u64) -> u64 {
        msn / u64::from(self.rotation)
    }

    /// The msn encrypted with the key of `period`.
    pub fn segments_of(&self, period: u64) -> std::ops::Range<u64> {
        let rotation = u64::from(self.rotation);
        let start = period.saturating_mul(rotation);
        start..start.saturating_add(rotation)
    }

    /// The key of `period`.
    pub fn key(&self, period: u64) -> [u8; KEY_LEN] {
        let mut ctx = hmac::Context::with_key(&self.hmac);
        ctx.update(KEY_LABEL);
        ctx.update(&period.to_be_bytes());
        let tag = ctx.sign();
        let mut key = [0u8; KEY_LEN];
        for (k, t) in key.iter_mut().zip(tag.as_ref()) {
            *k = *t;
        }
        key
    }

    /// Segment `msn`, given as its pieces in order, encrypted whole: AES-128-CBC with
    /// PKCS#7 padding, its period's key and its IV ([`iv`]). One copy, made once per
    /// segment and shared by every viewer.
    pub fn encrypt(&self, msn: u64, pieces: &[Bytes]) -> Result<Bytes, HlsError> {
        let len: usize = pieces.iter().map(Bytes::len).sum();
        // PKCS#7 adds 1..=16 bytes: room for them, so padding does not reallocate.
        let mut buf = Vec::with_capacity(len.saturating_add(KEY_LEN));
        for piece in pieces {
            buf.extend_from_slice(piece);
        }
        let key = UnboundCipherKey::new(&AES_128, &self.key(self.period(msn)))
            .and_then(PaddedBlockEncryptingKey::cbc_pkcs7)
            .map_err(|_| HlsError::Encrypt)?;
        key.less_safe_encrypt(
            &mut buf,
            EncryptionContext::Iv128(FixedLength::from(iv(msn))),
        )
        .map_err(|_| HlsError::Encrypt)?;
        Ok(Bytes::from(buf))
    }
}

/// The IV of segment `msn`: its msn as a 128-bit big-endian number.
pub fn iv(msn: u64) -> [u8; 16] {
    u128::from(msn).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::cipher::{DecryptionContext, PaddedBlockDecryptingKey};

    fn keys(rotation: u32) -> SegmentKeys {
        SegmentKeys::new(&KeySecret::new([7; SECRET_LEN]), rotation).unwrap()
    }

    fn decrypt(key: [u8; KEY_LEN], iv: [u8; 16], data: &[u8]) -> Vec<u8> {
        let key =
            PaddedBlockDecryptingKey::cbc_pkcs7(UnboundCipherKey::new(&AES_128, &key).unwrap())
                .unwrap();
        let mut buf = data.to_vec();
        let plain = key
            .decrypt(&mut buf, DecryptionContext::Iv128(FixedLength::from(iv)))
            .unwrap();
        plain.to_vec()
    }

    #[test]
    fn a_segment_decrypts_with_its_periods_key_and_its_msn_as_iv() {
        let keys = keys(3);
        let pieces = [
            Bytes::from_static(b"moof..."),
            Bytes::from(vec![0x47; 1000]),
        ];
        let sealed = keys.encrypt(7, &pieces).unwrap();
        assert_eq!(
            sealed.len(),
            1008,
            "padded to a whole block, a block more when even"
        );
        assert_ne!(sealed.get(..7), Some(&b"moof..."[..]));
        let plain = decrypt(keys.key(2), iv(7), &sealed);
        assert_eq!(plain.len(), 1007);
        assert_eq!(&plain[..7], b"moof...");
        assert!(plain[7..].iter().all(|&b| b == 0x47));
        // A block-aligned segment gets a whole block of padding.
        assert_eq!(
            keys.encrypt(0, &[Bytes::from(vec![0; 32])]).unwrap().len(),
            48
        );
    }

    #[test]
    fn keys_change_every_rotation_and_depend_on_the_secret() {
        let keys = keys(4);
        assert_eq!((keys.period(0), keys.period(3), keys.period(4)), (0, 0, 1));
        assert_eq!(keys.segments_of(2), 8..12);
        assert_ne!(keys.key(0), keys.key(1));
        assert_eq!(keys.key(5), keys.key(5), "derived, not drawn");
        let other = SegmentKeys::new(&KeySecret::new([8; SECRET_LEN]), 4).unwrap();
        assert_ne!(keys.key(0), other.key(0));
        assert_eq!(iv(0x0102)[14..], [1, 2]);
        assert_eq!(iv(u64::MAX)[..8], [0; 8]);
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let secret = KeySecret::new([0xab; SECRET_LEN]);
        let keys = SegmentKeys::new(&secret, 5).unwrap();
        let shown = format!("{secret:?} {keys:?}");
        assert!(!shown.contains("171") && !shown.contains("ab"), "{shown}");
        assert!(SegmentKeys::new(&secret, 0).is_err());
        assert!(SegmentKeys::new(&secret, MAX_KEY_ROTATION + 1).is_err());
    }

    /// What encrypting costs: MB/s of AES-128-CBC over 2 s segments of a 2.1 Mbit/s
    /// stream (525 KiB), key derivation and the copy included. A figure for
    /// docs/hls.md, not a timed test:
    /// `cargo test -p sluice-hls --release --lib -- --ignored encryption_throughput --nocapture`.
    #[test]
    #[ignore = "a figure: run it explicitly, in release"]
    fn encryption_throughput() {
        let keys = keys(10);
        let segment = [Bytes::from(vec![0x47u8; 525 << 10])];
        let rounds = 400u64;
        let started = std::time::Instant::now();
        let mut total = 0usize;
        for msn in 0..rounds {
            total += keys.encrypt(msn, &segment).unwrap().len();
        }
        let secs = started.elapsed().as_secs_f64();
        let mb_s = total as f64 / secs / 1e6;
        eprintln!(
            "AES-128-CBC segments: {mb_s:.0} MB/s ({:.2} ms per 525 KiB segment)",
            secs * 1000.0 / rounds as f64
        );
    }
}
