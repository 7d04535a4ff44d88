//! UDP output URLs (`[[apps]]` push, the API): any text never panics; what parses holds
//! the parser's promises and prints back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::ts::{TsOutUrl, MAX_BITRATE, MAX_PACKETS_PER_DATAGRAM, MIN_BITRATE};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = TsOutUrl::parse(text) else {
        return;
    };
    assert_ne!(url.addr.port(), 0);
    assert!((1..=MAX_PACKETS_PER_DATAGRAM).contains(&url.packets));
    assert!(url.bitrate.is_none_or(|b| (MIN_BITRATE..=MAX_BITRATE).contains(&b)));
    if !url.is_multicast() {
        assert!(url.ttl.is_none() && url.iface.is_none());
    }
    let again = TsOutUrl::parse(&url.to_string()).expect("a printed URL parses");
    assert_eq!(again, url);
});
