//! Arbitrary tokens against a verifier with an HMAC key and one with an Ed25519 public
//! key: never a panic, and nothing but a well-signed token is granted (the fuzzer
//! cannot sign, so any grant is a bug).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_access::jwt::{check, Key};
use sluice_access::Action;
use std::sync::OnceLock;

const PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";

/// Each verifier's keys and permissions claim.
fn verifiers() -> &'static [([Key; 1], &'static str); 2] {
    static V: OnceLock<[([Key; 1], &'static str); 2]> = OnceLock::new();
    V.get_or_init(|| {
        [
            (
                [Key::configured("a secret of sixteen bytes or more").unwrap()],
                "",
            ),
            ([Key::configured(PEM).unwrap()], "perms"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    for (keys, claim) in verifiers() {
        for action in [Action::Publish, Action::Read, Action::Api] {
            assert!(check(keys, claim, token, action, "live/cam").is_err());
        }
    }
});
