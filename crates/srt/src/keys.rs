//! A connection's stream encrypting keys: the one agreed in the handshake, and the
//! ones a sender announces later (key refresh, `KMREQ`), each unwrapped with the
//! passphrase. Payloads are AES-CTR: the same call encrypts and decrypts.

use crate::wire::KeyParity;
use srt_runtime::crypto::{self, SALT_LEN};
use srt_runtime::packet::{KeyMaterial, KmKeyFlag};

/// Why keys could not be used or taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("encrypted with a key this connection does not hold")]
    NoKey,
    #[error("key material not understood: {0}")]
    Material(String),
    #[error("key material does not unwrap with the passphrase")]
    Unwrap,
}

/// The keys of one connection.
pub struct Keys {
    passphrase: Vec<u8>,
    salt: [u8; SALT_LEN],
    even: Option<Vec<u8>>,
    odd: Option<Vec<u8>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("len", &self.key_len())
            .field("even", &self.even.is_some())
            .field("odd", &self.odd.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        for k in [&mut self.even, &mut self.odd].into_iter().flatten() {
            k.fill(0);
        }
        self.passphrase.fill(0);
    }
}

impl Keys {
    /// The key agreed in the handshake (libsrt's first key is the even one).
    pub fn agreed(passphrase: &[u8], sek: &[u8], salt: [u8; SALT_LEN]) -> Keys {
        Keys {
            passphrase: passphrase.to_vec(),
            salt,
            even: Some(sek.to_vec()),
            odd: None,
        }
    }

    /// Key length in bytes (16, 24 or 32).
    pub fn key_len(&self) -> usize {
        self.even.as_ref().or(self.odd.as_ref()).map_or(0, Vec::len)
    }

    /// The key this side encrypts with. We never refresh keys ourselves (libsrt's
    /// sender does after 2^24 packets; a player's side never does), so the key agreed
    /// in the handshake stays in use.
    pub fn sending(&self) -> KeyParity {
        match (&self.even, &self.odd) {
            (Some(_), _) => KeyParity::Even,
            (None, Some(_)) => KeyParity::Odd,
            (None, None) => KeyParity::None,
        }
    }

    /// Encrypts or decrypts `data` in place for packet `seq`.
    pub fn apply(&self, parity: KeyParity, seq: u32, data: &mut [u8]) -> Result<(), KeyError> {
        let key = match parity {
            KeyParity::Even => self.even.as_deref(),
            KeyParity::Odd => self.odd.as_deref(),
            KeyParity::None => None,
        }
        .ok_or(KeyError::NoKey)?;
        crypto::aes_ctr_apply(key, &self.salt, seq, data).map_err(|_| KeyError::NoKey)
    }

    /// A key refresh from the peer (`KMREQ`'s key material): takes the keys it
    /// carries and returns the bytes to echo in the `KMRSP`.
    pub fn refresh(&mut self, cif: &[u8]) -> Result<Vec<u8>, KeyError> {
        let km = KeyMaterial::parse(cif).map_err(|e| KeyError::Material(e.to_string()))?;
        let salt: [u8; SALT_LEN] = km
            .salt
            .try_into()
            .map_err(|_| KeyError::Material("salt is not 16 bytes".into()))?;
        let klen = km.x_sek.len();
        // Both keys are wrapped together, as one run of bytes.
        let mut wrapped = km.x_sek.to_vec();
        if let Some(o) = km.o_sek {
            wrapped.extend_from_slice(o);
        }
        let kek = crypto::derive_kek(&self.passphrase, &salt, klen)
            .map_err(|e| KeyError::Material(e.to_string()))?;
        let keys = crypto::unwrap_sek(&kek, &km.icv, &wrapped).map_err(|_| KeyError::Unwrap)?;
        let first = keys.get(..klen).map(<[u8]>::to_vec);
        let second = keys
            .get(klen..)
            .filter(|k| k.len() == klen)
            .map(<[u8]>::to_vec);
        match km.kk {
            KmKeyFlag::Even => self.even = first,
            KmKeyFlag::Odd => self.odd = first,
            KmKeyFlag::Both => {
                self.even = first;
                self.odd = second;
            }
            _ => return Err(KeyError::Material("no key".into())),
        }
        self.salt = salt;
        Ok(cif.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_a_missing_key_is_an_error() {
        let keys = Keys::agreed(b"0123456789", &[7; 16], [3; SALT_LEN]);
        let mut data = b"a transport stream packet".to_vec();
        keys.apply(KeyParity::Even, 42, &mut data).unwrap();
        assert_ne!(&data[..], b"a transport stream packet");
        keys.apply(KeyParity::Even, 42, &mut data).unwrap();
        assert_eq!(&data[..], b"a transport stream packet");
        assert_eq!(
            keys.apply(KeyParity::Odd, 42, &mut data),
            Err(KeyError::NoKey)
        );
        assert_eq!(keys.sending(), KeyParity::Even);
        assert_eq!(keys.key_len(), 16);
    }

    #[test]
    fn a_refresh_that_does_not_unwrap_is_refused() {
        let mut keys = Keys::agreed(b"0123456789", &[7; 16], [3; SALT_LEN]);
        assert!(keys.refresh(&[0; 8]).is_err());
        // Well-formed material wrapped with another passphrase.
        let salt = [9u8; SALT_LEN];
        let kek = crypto::derive_kek(b"another passphrase", &salt, 16).unwrap();
        let (icv, wrapped) = crypto::wrap_sek(&kek, &[1; 16]).unwrap();
        let km = KeyMaterial {
            kk: KmKeyFlag::Odd,
            keki: 0,
            cipher: srt_runtime::packet::Cipher::AesCtr,
            auth: srt_runtime::packet::KmAuth::None,
            se: srt_runtime::packet::StreamEncapsulation::MpegTsSrt,
            salt: &salt,
            icv,
            x_sek: &wrapped,
            o_sek: None,
        };
        let mut cif = vec![0; km.serialized_len()];
        km.serialize_into(&mut cif).unwrap();
        assert_eq!(keys.refresh(&cif), Err(KeyError::Unwrap));
        // The right passphrase takes it.
        let mut right = Keys::agreed(b"another passphrase", &[7; 16], [3; SALT_LEN]);
        assert_eq!(right.refresh(&cif).unwrap(), cif);
        let mut data = vec![5u8; 32];
        right.apply(KeyParity::Odd, 1, &mut data).unwrap();
    }
}
