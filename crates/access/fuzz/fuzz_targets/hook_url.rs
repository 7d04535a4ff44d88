//! Hook and JWKS URLs: what parses prints back to the same URL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_access::Target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = Target::parse(text) {
        let again = Target::parse(&t.to_string()).expect("a printed URL parses");
        assert_eq!(again, t);
    }
});
