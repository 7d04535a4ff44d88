//! Arbitrary bytes to the message reader, fed in pieces whose size the first byte
//! picks; every request read must survive encode → parse unchanged.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_rtsp::{Incoming, MessageReader};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut reader = MessageReader::default();
    let mut buf = BytesMut::new();
    for part in rest.chunks(usize::from(mode).max(1)) {
        buf.extend_from_slice(part);
        loop {
            match reader.read(&mut buf) {
                Ok(Some(Incoming::Request(req))) => {
                    let mut again = BytesMut::new();
                    req.encode(&mut again);
                    let back = MessageReader::default().read(&mut again);
                    assert_eq!(back, Ok(Some(Incoming::Request(req))));
                }
                Ok(Some(Incoming::Interleaved { .. })) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let mut whole = BytesMut::from(rest);
    let _ = MessageReader::default().read_response(&mut whole);
});
