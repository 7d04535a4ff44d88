//! Arbitrary C0C1C2 bytes to the server handshake, and arbitrary S0S1S2 bytes to the
//! client handshake (plain and digest).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_rtmp::handshake::{ClientHandshake, DigestScheme, ServerHandshake};

fuzz_target!(|data: &[u8]| {
    let mut server = ServerHandshake::new(&[1; 1528]);
    let mut buf = BytesMut::from(data);
    let _ = server.read(&mut buf, &mut BytesMut::new());

    for scheme in [None, Some(DigestScheme::First), Some(DigestScheme::Second)] {
        let mut out = BytesMut::new();
        let mut client = ClientHandshake::new(&[2; 1528], scheme, &mut out);
        let mut buf = BytesMut::from(data);
        let _ = client.read(&mut buf, &mut out);
    }
});
