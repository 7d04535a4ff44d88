//! Sluice, the live streaming media server: configuration, workers, the stream hub and
//! its fan-out, and one folder per protocol.
//!
//! The top-level modules form floors, each importing only those below it ([`FLOORS`],
//! checked by a test; the picture is in `docs/architecture.md`).
//!
//! The map (see `docs/architecture.md` for the path of one frame):
//! - `core`: the data path — `hub` (streams) → `ring` (recent packets) → `packet`
//!   (shared output bytes) → `fanout` (per-worker players); `ingest` (publishers).
//! - `io`: sockets and files — the player transport seam (`sock`), TLS, `sendmmsg`,
//!   memfds, shared file mappings.
//! - protocols: `rtmp`, `rtsp`, `srt`, `udp_ingest` (MPEG-TS over UDP and RTP), `webrtc`,
//!   `http` (HTTP/1.1, WebSocket, HTTP/2, HLS routes).
//! - features: `hls` (live segmenting), `vod` (files on demand), `record`, `snapshot`
//!   (JPEGs of streams' keyframes, by ffmpeg), `auth`,
//!   `relay` (edge pulls and pushes), `hooks` (notifications); below `config`, which
//!   assembles their settings.
//! - `driver`: the one connection driver every protocol's session runs in.
//! - `server` starts the workers; `ctx` is what a connection of a worker can reach;
//!   `delay` measures how late each worker runs its tasks.
#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod auth;
pub mod cluster;
pub mod config;
mod core;
mod ctx;
mod delay;
mod driver;
mod hls;
mod hooks;
mod http;
mod io;
mod keys;
mod ops;
mod record;
mod relay;
mod rtmp;
mod rtsp;
mod server;
mod snapshot;
mod srt;
#[cfg(test)]
mod test_alloc;
#[cfg(test)]
mod testing;
mod transcode;
mod udp_ingest;
mod vod;
mod webrtc;

/// The top-level modules, lowest first: each may import only those before it. A new
/// module takes its place here (the test `floors::every_import_goes_down` says where
/// an import goes up).
pub const FLOORS: &[&[&str]] = &[
    &["io", "keys", "delay"],
    &["core"],
    &[
        "hooks",
        "hls",
        "record",
        "snapshot",
        "vod",
        "auth",
        "cluster",
        "relay",
        "transcode",
    ],
    &["config"],
    &["ops"],
    &["ctx", "driver"],
    &["rtmp", "rtsp", "srt", "udp_ingest", "webrtc", "http"],
    &["server"],
];

pub use config::{Cli, Config};
pub use core::hub;
pub use ops::count_panics;
pub use server::Server;

#[cfg(test)]
mod floors {
    //! The rule of [`super::FLOORS`], read from the sources: every `crate::NAME` a
    //! top-level module names (outside its tests) is a module before it.
    use std::path::Path;

    /// The modules in order: within a floor, the order given (a feature may use the
    /// ones listed before it, `ctx` comes before `driver`, `webrtc` before `http`).
    fn order() -> Vec<&'static str> {
        super::FLOORS
            .iter()
            .flat_map(|f| f.iter().copied())
            .collect()
    }

    /// Every `crate::NAME` in `text`, its tests cut off, comments dropped.
    fn imports(text: &str) -> Vec<String> {
        let code = text.split("#[cfg(test)]\nmod ").next().unwrap_or(text);
        let mut names = Vec::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or("");
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    // `use crate::{a::X, b}`: the first name of each part.
                    for part in group.split(',') {
                        let name: String = part
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        names.push(name);
                    }
                } else {
                    names.push(
                        rest.chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect(),
                    );
                }
            }
        }
        names
    }

    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }

    #[test]
    fn every_import_goes_down() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let order = order();
        let mut files = Vec::new();
        walk(&src, &mut files);
        let mut wrong = Vec::new();
        for file in files {
            let rel = file.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_str()
                .unwrap();
            let top = top.trim_end_matches(".rs");
            let name = rel.file_name().unwrap().to_str().unwrap();
            if ["lib", "main", "test_alloc", "testing"].contains(&top) || name == "tests.rs" {
                continue;
            }
            let at = order.iter().position(|m| *m == top);
            let at = at.unwrap_or_else(|| panic!("module `{top}` has no place in FLOORS"));
            let text = std::fs::read_to_string(&file).unwrap();
            for import in imports(&text) {
                let Some(to) = order.iter().position(|m| *m == import) else {
                    continue;
                };
                if to >= at && import != top {
                    wrong.push(format!("{} imports `{import}`", rel.display()));
                }
            }
        }
        wrong.sort();
        wrong.dedup();
        assert!(
            wrong.is_empty(),
            "imports that go up or sideways:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn an_import_upwards_is_found() {
        let text = "use crate::{core::hub::Hub, http};\nfn f() { crate::server::x(); }\n\
                    // crate::ops in a comment\n#[cfg(test)]\nmod tests { use crate::ctx; }";
        assert_eq!(imports(text), ["core", "http", "server"]);
    }
}
