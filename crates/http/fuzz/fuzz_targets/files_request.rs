#![no_main]
//! A request head for a file: the path and the Range/If-* answer never panic, the
//! path never leaves the root, and the range is always within the file.
use libfuzzer_sys::fuzz_target;
use sluice_http::files::{relative_path, respond, FileEntity, FileStatus};

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes are the file's length, the rest a request head.
    let (len, head) = match data.split_first_chunk::<8>() {
        Some((len, head)) => (u64::from_le_bytes(*len), head),
        None => return,
    };
    let Ok(Some(req)) = sluice_http::parse_request(head) else {
        return;
    };
    if let Ok(path) = relative_path(req.path.trim_start_matches('/')) {
        assert!(path.split('/').all(|s| s != ".." && s != "."));
        assert!(!path.starts_with('/') && !path.contains(['\\', '\0']));
    }
    let file = FileEntity::new(&req.path, len, 1, 1_700_000_000, 0);
    let out = respond(&req, &file);
    assert!(out.range.start <= out.range.end && out.range.end <= len);
    if !matches!(out.status, FileStatus::Ok | FileStatus::PartialContent) {
        assert!(out.range.is_empty() && !out.body);
    }
});
