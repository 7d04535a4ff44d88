//! Arbitrary segment bytes, msn and rotation through AES-128 segment encryption: must
//! never panic, the ciphertext is whole blocks, and it decrypts back to the input with
//! the period's key and the msn as IV.
#![no_main]

use aws_lc_rs::cipher::{DecryptionContext, PaddedBlockDecryptingKey, UnboundCipherKey, AES_128};
use aws_lc_rs::iv::FixedLength;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_hls::{iv, KeySecret, SegmentKeys, SECRET_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_at_checked(10) else {
        return;
    };
    let msn = u64::from_le_bytes(head[..8].try_into().unwrap());
    let rotation = u32::from(u16::from_le_bytes([head[8], head[9]]));
    let Ok(keys) = SegmentKeys::new(&KeySecret::new([head[0]; SECRET_LEN]), rotation) else {
        return;
    };
    // The body in up to three pieces, as a segment's fragments come.
    let cut = |n: usize| body.len().min(n);
    let pieces = [
        Bytes::copy_from_slice(&body[..cut(7)]),
        Bytes::copy_from_slice(&body[cut(7)..cut(300)]),
        Bytes::copy_from_slice(&body[cut(300)..]),
    ];
    let sealed = keys.encrypt(msn, &pieces).expect("encrypts any bytes");
    assert_eq!(sealed.len() % 16, 0);
    assert!(sealed.len() > body.len());
    let key = UnboundCipherKey::new(&AES_128, &keys.key(keys.period(msn))).unwrap();
    let key = PaddedBlockDecryptingKey::cbc_pkcs7(key).unwrap();
    let mut buf = sealed.to_vec();
    let plain = key
        .decrypt(
            &mut buf,
            DecryptionContext::Iv128(FixedLength::from(iv(msn))),
        )
        .unwrap();
    assert_eq!(plain, body);
});
