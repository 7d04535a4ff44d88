//! Arbitrary bytes to a server session, after a valid plain handshake when the first
//! byte is odd (so the fuzzer reaches the chunk and command layers quickly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_rtmp::{ServerConfig, ServerSession};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let config = ServerConfig {
        max_message_len: 1 << 16,
        ..ServerConfig::default()
    };
    let mut session = ServerSession::with_random(config, &[7; 1528]);
    if mode & 1 == 1 {
        let mut handshake = vec![3u8];
        handshake.extend_from_slice(&[0u8; 2 * 1536]);
        if session.handle_input(&handshake).is_err() {
            return;
        }
    }
    for part in rest.chunks(usize::from(mode >> 1).max(1)) {
        if session.handle_input(part).is_err() {
            return;
        }
        while session.poll_output().is_some() {}
        if mode & 2 == 2 {
            session.accept_publish();
            session.accept_play();
        }
    }
});
