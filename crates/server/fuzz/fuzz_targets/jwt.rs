//! Arbitrary tokens against a verifier with an HMAC key and one with an Ed25519 public
//! key: never a panic, and nothing but a well-signed token is granted (the fuzzer
//! cannot sign, so any grant is a bug).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_server::fuzzing::{Action, Jwt};
use std::sync::OnceLock;

const PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";

fn verifiers() -> &'static [Jwt; 2] {
    static V: OnceLock<[Jwt; 2]> = OnceLock::new();
    V.get_or_init(|| {
        [
            Jwt::new("a secret of sixteen bytes or more", "", "")
                .unwrap()
                .unwrap(),
            Jwt::new(PEM, "", "perms").unwrap().unwrap(),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    for jwt in verifiers() {
        for action in [Action::Publish, Action::Read, Action::Api] {
            assert!(jwt.check(token, action, "live/cam").is_err());
        }
    }
});
