//! FLV byte stream, fed in chunks whose size comes from the first input byte.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_media::flv::{TagReader, MAX_TAG_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let mut reader = TagReader::new();
    let mut buf = BytesMut::new();
    for chunk in stream.chunks(usize::from(cut) + 1) {
        buf.extend_from_slice(chunk);
        while let Ok(Some(tag)) = reader.read(&mut buf) {
            assert!(tag.body.len() <= MAX_TAG_LEN);
        }
    }
});
