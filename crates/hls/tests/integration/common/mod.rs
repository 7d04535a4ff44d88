//! Helpers shared by the integration tests: segment names, a playlist as a String,
//! and parsing it back with the independent `m3u8-rs` parser.
#![allow(dead_code)]

use sluice_hls::{SegmentNames, Timeline};

/// 90 kHz ticks in `ms` milliseconds.
pub const fn ms(ms: i64) -> i64 {
    ms * 90
}

/// 2024-01-01T00:00:00Z in Unix ms.
pub const T0: i64 = 1_704_067_200_000;

/// `seg<msn>.<ext>`, `part<msn>.<i>.m4s`, `init.mp4`.
pub struct Names(pub &'static str);

impl SegmentNames for Names {
    fn segment(&self, msn: u64, out: &mut String) {
        out.push_str(&format!("seg{msn}.{}", self.0));
    }
    fn part(&self, msn: u64, part: u32, out: &mut String) {
        out.push_str(&format!("part{msn}.{part}.m4s"));
    }
    fn init(&self, out: &mut String) {
        out.push_str("init.mp4");
    }
}

/// The rendered playlist.
pub fn render(timeline: &Timeline, ext: &'static str) -> String {
    let mut out = String::new();
    timeline.render(&Names(ext), &mut out);
    out
}

/// The rendered playlist, parsed back by `m3u8-rs`.
pub fn parse(playlist: &str) -> m3u8_rs::MediaPlaylist {
    match m3u8_rs::parse_media_playlist_res(playlist.as_bytes()) {
        Ok(parsed) => parsed,
        Err(err) => panic!("m3u8-rs rejects our playlist: {err:?}\n{playlist}"),
    }
}

/// Lines that start with `prefix`.
pub fn lines_with<'a>(playlist: &'a str, prefix: &str) -> Vec<&'a str> {
    playlist
        .lines()
        .filter(|line| line.starts_with(prefix))
        .collect()
}
