//! Any stream id parses or is refused, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(id) = sluice_srt::StreamId::parse(s) {
            assert!(!id.resource.is_empty());
        }
    }
});
