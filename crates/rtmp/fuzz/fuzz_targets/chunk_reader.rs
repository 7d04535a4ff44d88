//! Arbitrary bytes through the chunk reader, split at a fuzzer-chosen point.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_rtmp::ChunkReader;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(rest.len());
    let mut reader = ChunkReader::new(1 << 16);
    let mut buf = BytesMut::new();
    for part in [&rest[..split], &rest[split..]] {
        buf.extend_from_slice(part);
        loop {
            match reader.read(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
