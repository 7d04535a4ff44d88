//! Any datagram to the listener: a reply, a conclusion or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_srt::{Acceptor, ListenConfig};
use std::net::SocketAddr;

fuzz_target!(|data: &[u8]| {
    let peer: SocketAddr = "127.0.0.1:9000".parse().unwrap();
    for passphrase in [None, Some(b"0123456789".to_vec())] {
        let acceptor = Acceptor::new(
            7,
            ListenConfig {
                passphrase,
                ..ListenConfig::default()
            },
        );
        let _ = acceptor.handle(data, peer, 0, 1, 1);
        let _ = sluice_srt::accept::conclusion_from(data);
    }
});
