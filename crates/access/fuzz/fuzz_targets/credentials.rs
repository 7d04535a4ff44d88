//! Credentials as any protocol carries them: a query string and an HTTP
//! `Authorization` header (Basic or Bearer), split where the first byte says. Never a
//! panic, and nothing longer than the bound is taken.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_access::Credentials;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let cut = (usize::from(cut) * text.len() / 255).min(text.len());
    let Some((header, query)) = text.split_at_checked(cut) else {
        return;
    };
    for c in [
        Credentials::from_query(query),
        Credentials::from_http(Some(header), query),
    ] {
        for v in [&c.user, &c.password, &c.token, &c.viewer].into_iter().flatten() {
            assert!(v.len() <= 4096);
        }
    }
});
