//! Tells the end-to-end tests which real clients are installed (`cfg(have_ffmpeg)`,
//! `have_chromium`, `have_gstreamer`, `have_curl`, `have_wget`, `have_webdav`,
//! `have_srt_tools`, `have_nginx`), and warns how many
//! tests are skipped for those that are not. See `scripts/e2e_tools.rs`.

#[path = "../../scripts/e2e_tools.rs"]
mod e2e_tools;

fn main() {
    use e2e_tools::{CHROMIUM, CURL, FFMPEG, GSTREAMER, NGINX, SRT_TOOLS, WEBDAV, WGET};
    e2e_tools::probe(&[
        FFMPEG, CHROMIUM, GSTREAMER, CURL, WGET, WEBDAV, SRT_TOOLS, NGINX,
    ]);
}
