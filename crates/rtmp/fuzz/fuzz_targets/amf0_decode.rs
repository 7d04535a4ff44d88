//! Arbitrary bytes through the AMF0 decoder; what decodes must re-encode and decode equal.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_media::amf0;

fuzz_target!(|data: &[u8]| {
    let Ok(values) = amf0::decode_all(data) else {
        return;
    };
    let mut out = BytesMut::new();
    for v in &values {
        v.encode(&mut out);
    }
    let again = amf0::decode_all(&out).expect("our own encoding decodes");
    // NaN != NaN, so compare encodings rather than values.
    let mut out2 = BytesMut::new();
    for v in &again {
        v.encode(&mut out2);
    }
    assert_eq!(out, out2);
});
