#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = sluice_http::ws::read_client_frame(&mut buf) {
        assert!(frame.payload.len() <= sluice_http::ws::MAX_CLIENT_PAYLOAD);
    }
});
