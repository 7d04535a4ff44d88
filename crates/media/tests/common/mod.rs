//! Test helpers shared by the container tests that cross-check with ffprobe.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether ffprobe is here. Where `SLUICE_REQUIRE_TOOLS=1` (CI), its absence fails
/// the test instead of skipping it.
pub fn ffprobe_present() -> bool {
    if Command::new("ffprobe").arg("-version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "ffprobe missing but SLUICE_REQUIRE_TOOLS=1"
    );
    eprintln!("ffprobe not found; skipped");
    false
}

/// Writes `bytes` to a file in the temp dir, named per test process.
pub fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sluice-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).expect("write temp file");
    path
}

/// ffprobe's CSV output for `path` with `args` (e.g. `-show_entries ...`).
pub fn ffprobe(path: &Path, args: &[&str]) -> String {
    let out = Command::new("ffprobe")
        .args(["-v", "error"])
        .args(args)
        .args(["-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
