//! Build-script half of the end-to-end tests' tool checks, shared by the build scripts
//! of the packages whose tests drive real programs (`crates/media/build.rs`,
//! `crates/server/build.rs`, which include this file).
//!
//! For each [`Tool`] it sets `cfg(have_<tool>)` when the programs (and GStreamer
//! elements) are installed. A test that needs a tool carries
//! `#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]`, so without it cargo lists
//! the test as ignored and counts it in its result line; a check inside a test that
//! otherwise runs is guarded by `if cfg!(have_ffmpeg) && ...`. When anything is missing the
//! build script warns, every build, how many tests of the package that skips
//! (counted from those attributes and guards in its `tests/`).
//!
//! Rebuilds: the build script runs again when a program it found changes or goes,
//! and, while something is missing, when `PATH` or one of its directories (or
//! GStreamer's plugin directory) changes, as installing a package does. With every
//! tool found it does not watch `PATH` itself, nor ever `SLUICE_REQUIRE_TOOLS`: each
//! change of those would rebuild this crate and every crate above it. A test whose
//! tool was found at build time but is gone when it runs fails (it does not skip), and
//! `SLUICE_REQUIRE_TOOLS=1` is enforced by a test (`required_tools_were_found`);
//! `scripts/test.sh` also checks the tools before it builds anything.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A tool some end-to-end tests need.
pub struct Tool {
    /// The cfg set when it is here, `have_...`.
    pub cfg: &'static str,
    /// What to call it in the warning.
    pub what: &'static str,
    /// Programs that must all be on `PATH`.
    pub programs: &'static [&'static str],
    /// GStreamer elements that `gst-inspect-1.0` must know.
    pub gst_elements: &'static [&'static str],
}

pub const FFMPEG: Tool = Tool {
    cfg: "have_ffmpeg",
    what: "ffmpeg/ffprobe",
    programs: &["ffmpeg", "ffprobe"],
    gst_elements: &[],
};

pub const CHROMIUM: Tool = Tool {
    cfg: "have_chromium",
    what: "chromium",
    programs: &["chromium"],
    gst_elements: &[],
};

pub const GSTREAMER: Tool = Tool {
    cfg: "have_gstreamer",
    what: "GStreamer RTSP elements",
    programs: &["gst-inspect-1.0", "gst-launch-1.0"],
    gst_elements: &[
        "rtspsrc",
        "rtspclientsink",
        "rtph264depay",
        "avdec_h264",
        "openh264enc",
    ],
};

/// GStreamer's VP8 and VP9 RTP depayloaders and decoders (the RTP payload format tests
/// of `sluice-media`).
pub const GST_VPX: Tool = Tool {
    cfg: "have_gst_vpx",
    what: "GStreamer VP8/VP9 RTP elements",
    programs: &["gst-inspect-1.0", "gst-launch-1.0"],
    gst_elements: &["udpsrc", "rtpvp8depay", "rtpvp9depay", "vp8dec", "vp9dec"],
};

pub const CURL: Tool = Tool {
    cfg: "have_curl",
    what: "curl",
    programs: &["curl"],
    gst_elements: &[],
};

pub const WEBDAV: Tool = Tool {
    cfg: "have_webdav",
    what: "WebDAV clients (rclone, cadaver)",
    programs: &["rclone", "cadaver"],
    gst_elements: &[],
};

pub const SRT_TOOLS: Tool = Tool {
    cfg: "have_srt_tools",
    what: "srt-live-transmit (srt-tools)",
    programs: &["srt-live-transmit"],
    gst_elements: &[],
};

/// nginx, with the RTMP module (push relays) and `proxy_cache` (HLS behind a cache).
pub const NGINX: Tool = Tool {
    cfg: "have_nginx",
    what: "nginx (with libnginx-mod-rtmp)",
    programs: &["nginx"],
    gst_elements: &[],
};

pub const WGET: Tool = Tool {
    cfg: "have_wget",
    what: "wget",
    programs: &["wget"],
    gst_elements: &[],
};

/// Probes `tools` for the package being built and tells cargo what it found.
pub fn probe(tools: &[Tool]) {
    let mut watch: Vec<PathBuf> = Vec::new();
    let mut missing: Vec<&Tool> = Vec::new();
    for tool in tools {
        println!("cargo::rustc-check-cfg=cfg({})", tool.cfg);
        if found(tool, &mut watch) {
            println!("cargo::rustc-cfg={}", tool.cfg);
        } else {
            missing.push(tool);
        }
    }
    for var in ["GST_PLUGIN_PATH", "GST_PLUGIN_SYSTEM_PATH"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if !missing.is_empty() {
        // Installing a package adds a file to one of these.
        println!("cargo::rerun-if-env-changed=PATH");
        watch.extend(path_dirs());
        let tests =
            Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("tests");
        watch.push(tests.clone());
        warn(&missing, &tests);
    }
    watch.sort();
    watch.dedup();
    for path in watch {
        println!("cargo::rerun-if-changed={}", path.display());
    }
}

/// Whether all of `tool` is here; adds what to watch for it to `watch`.
fn found(tool: &Tool, watch: &mut Vec<PathBuf>) -> bool {
    let mut all = true;
    for program in tool.programs {
        match which(program) {
            Some(path) => watch.push(path),
            None => all = false,
        }
    }
    if all && !tool.gst_elements.is_empty() {
        // The plugin directory gains a file when a plugin package is installed.
        if let Some(file) = gst_plugin_file("coreelements") {
            watch.extend(file.parent().map(Path::to_path_buf));
        }
        for element in tool.gst_elements {
            match gst_plugin_file(element) {
                Some(file) => watch.push(file),
                None => all = false,
            }
        }
    }
    all
}

/// The executable `name` on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path_dirs().into_iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The absolute directories of `PATH` that exist.
fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.is_absolute() && d.is_dir())
        .collect()
}

/// The plugin file that provides GStreamer element (or plugin) `name`, if installed.
fn gst_plugin_file(name: &str) -> Option<PathBuf> {
    let out = Command::new("gst-inspect-1.0")
        .arg(name)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let file = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Filename"))?;
    Some(PathBuf::from(file.trim()))
}

/// Prints the warning: which tools are missing and how many tests that skips.
fn warn(missing: &[&Tool], tests: &Path) {
    let mut sources = Vec::new();
    rust_files(tests, &mut sources);
    // Per missing tool: tests ignored, and tests that run without some checks.
    let mut skipped = vec![(0, 0); missing.len()];
    let (mut ignored, mut partly) = (0, 0);
    let mut count = |cfgs: Vec<&str>, whole: bool| {
        let hit: Vec<usize> = (0..missing.len())
            .filter(|&i| cfgs.contains(&missing[i].cfg))
            .collect();
        if hit.is_empty() {
            return;
        }
        if whole {
            ignored += 1;
        } else {
            partly += 1;
        }
        for i in hit {
            if whole {
                skipped[i].0 += 1;
            } else {
                skipped[i].1 += 1;
            }
        }
    };
    for text in &sources {
        // `#[cfg_attr(not(...have_x...), ignore = "...")]`: a test ignored without them.
        for attr in text.split("cfg_attr(").skip(1) {
            let attr = &attr[..attr.find(']').unwrap_or(attr.len())];
            if attr.contains("ignore") {
                count(cfg_names(attr), true);
            }
        }
        // `if cfg!(have_x) && ...`: a check left out of a test that still runs.
        for rest in text.split("if cfg!(").skip(1) {
            count(cfg_names(&rest[..rest.find(')').unwrap_or(0)]), false);
        }
    }
    let tests = |n: usize| {
        if n == 1 {
            "1 test".to_string()
        } else {
            format!("{n} tests")
        }
    };
    let tools: Vec<String> = missing
        .iter()
        .zip(&skipped)
        .map(|(t, &(whole, part))| match (whole, part) {
            (w, 0) => format!("{} ({} skipped)", t.what, tests(w)),
            (0, p) => format!("{} ({} without some checks)", t.what, tests(p)),
            (w, p) => format!(
                "{} ({} skipped, {} without some checks)",
                t.what,
                tests(w),
                tests(p)
            ),
        })
        .collect();
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let bar = "=".repeat(78);
    println!("cargo::warning={bar}");
    println!(
        "cargo::warning={} end-to-end {} of {package} will be SKIPPED (reported as ignored){}",
        ignored,
        if ignored == 1 { "test" } else { "tests" },
        if partly > 0 {
            format!(
                ", and {} will run without some of {} checks",
                tests(partly),
                if partly == 1 { "its" } else { "their" }
            )
        } else {
            String::new()
        }
    );
    println!("cargo::warning=missing: {}", tools.join(", "));
    println!("cargo::warning=run `bash scripts/test.sh` to install them and run every test");
    println!("cargo::warning={bar}");
}

/// The `have_...` names in `text`.
fn cfg_names(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("have_"))
        .collect()
}

/// The contents of the `.rs` files under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.extend(std::fs::read_to_string(&path).ok());
        }
    }
}
