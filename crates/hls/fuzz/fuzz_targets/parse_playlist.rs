#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_hls::parse::{parse_playlist, resolve_uri, Playlist};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_playlist(text) {
        Ok(Playlist::Master(variants)) => {
            for v in variants {
                let _ = resolve_uri("http://h:1/a/b.m3u8?q", &v.uri);
            }
        }
        Ok(Playlist::Media { segments, .. }) => {
            for s in segments {
                assert!(s.duration.is_finite());
                let _ = resolve_uri("https://h/x.m3u8", &s.uri);
            }
        }
        Err(_) => {}
    }
});
