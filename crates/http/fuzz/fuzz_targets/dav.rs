#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_http::dav;

// The Depth header and listings of arbitrary names: never a panic, and every name
// comes out escaped (no raw markup in the XML).
fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = dav::depth(Some(text));
    let entry = dav::Entry {
        path: text.trim_matches('/').to_string(),
        is_dir: data.first().is_some_and(|b| b & 1 == 1),
        len: data.len() as u64,
        modified: u64::from(data.len() as u32) * 1_000_003,
        etag: Some(format!("\"{text}\"")),
    };
    let xml = dav::multistatus("/files/", &[entry]);
    let inner = xml.trim_start_matches(|c| c != '\n');
    assert_eq!(inner.matches('<').count(), inner.matches('>').count());
});
