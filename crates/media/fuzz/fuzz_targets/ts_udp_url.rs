//! UDP ingest URLs (`[[ingest]]` url, the API): any text never panics; what parses
//! holds the parser's promises and prints back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_media::ts::{UdpUrl, MAX_SOURCES};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = UdpUrl::parse(text) else {
        return;
    };
    assert!(url.sources.len() <= MAX_SOURCES);
    if url.is_multicast() {
        assert_ne!(url.addr.port(), 0);
    } else {
        assert!(url.sources.is_empty() && url.interface.is_none());
    }
    assert!(url
        .sources
        .iter()
        .all(|s| s.is_ipv4() == url.addr.is_ipv4()));
    let again = UdpUrl::parse(&url.to_string()).expect("a printed URL parses");
    assert_eq!(again, url);
});
