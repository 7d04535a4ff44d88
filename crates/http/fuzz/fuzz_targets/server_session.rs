//! Arbitrary input, cut anywhere, into an HTTP/1.1 server session that answers every
//! request (upgrading WebSocket requests): never a panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_http::{Event, HttpEvent, Output, ServerConfig, ServerSession};
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let step = usize::from(cut).max(1);
    for (i, chunk) in data.chunks(step).enumerate() {
        let at = now + Duration::from_millis(i as u64);
        if s.handle_input(at, chunk).is_err() {
            break;
        }
        while let Some(o) = s.poll_output() {
            if let Output::Event(Event::Other(HttpEvent::Request(r))) = o {
                if r.is_websocket_upgrade() {
                    s.accept_websocket(&r, &[]);
                } else if i % 2 == 0 {
                    s.respond(200, &[], vec![Bytes::from_static(b"ok")]);
                } else {
                    s.respond_head(200, &[], Some(10));
                    s.body_sent();
                }
            }
        }
    }
    s.handle_timeout(now + Duration::from_secs(3600));
    while s.poll_output().is_some() {}
});
