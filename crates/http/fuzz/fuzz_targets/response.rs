#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_http::response::{read_response_head, BodyFraming, ChunkedDecoder};

// A response as an origin might send it, in two reads: the head, then a body read
// in the framing it announced.
fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (first, second) = data.split_at(split);
    let mut buf = BytesMut::from(first);
    let Ok(Some(head)) = read_response_head(&mut buf) else {
        return;
    };
    buf.extend_from_slice(second);
    if head.framing == BodyFraming::Chunked {
        let mut d = ChunkedDecoder::new();
        let mut out = BytesMut::new();
        let before = buf.len();
        if d.decode(&mut buf, &mut out).is_ok() {
            assert!(out.len() <= before);
        }
    }
});
