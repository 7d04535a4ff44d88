//! Datagrams into an established connection (plain and encrypted): never a panic, and
//! what it holds stays bounded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_srt::keys::Keys;
use sluice_srt::{Conclusion, Connection};
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    for encrypted in [false, true] {
        let start = Instant::now();
        let c = Conclusion {
            peer_socket_id: 5,
            socket_id: 6,
            peer_isn: 100,
            isn: 100,
            stream_id: None,
            latency: Duration::from_millis(120),
            flow_window: 256,
            keys: encrypted.then(|| Keys::agreed(b"0123456789", &[1; 16], [2; 16])),
            response: Vec::new(),
        };
        let mut conn = Connection::accepted(c, Duration::from_secs(5), start);
        conn.send(start, &[0x47; 188]);
        // The input is a run of datagrams, each behind a one-byte length.
        let mut rest = data;
        let mut now = start;
        while let Some((&len, tail)) = rest.split_first() {
            let len = usize::from(len).min(tail.len());
            let (datagram, tail) = tail.split_at(len);
            rest = tail;
            let _ = conn.handle_datagram(now, datagram);
            now += Duration::from_millis(3);
            conn.handle_timeout(now);
            while conn.poll_data().is_some() {}
            let (mut control, mut out) = (Vec::new(), Vec::new());
            conn.take_transmits(&mut control, &mut out);
        }
    }
});
