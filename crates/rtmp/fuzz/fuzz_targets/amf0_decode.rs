//! Arbitrary bytes through the AMF0 decoder; what decodes must re-encode and decode equal,
//! and read as an `onCuePoint` gives a cue point within its bounds or an error.
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
    if let Ok(cue) = sluice_rtmp::read_cue_point(&values) {
        assert!(cue.pre_roll_ms <= sluice_rtmp::cue_point::MAX_PRE_ROLL_MS);
        assert!(cue.break_ms.is_none_or(|b| b <= sluice_rtmp::cue_point::MAX_BREAK_MS));
    }
});
