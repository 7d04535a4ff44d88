//! Test helpers shared by the container tests that cross-check with ffprobe.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// Whether ffmpeg and ffprobe are here; their absence fails the test under
/// `SLUICE_REQUIRE_TOOLS=1`.
pub fn ffmpeg_present() -> bool {
    if Command::new("ffmpeg").arg("-version").output().is_ok() {
        return ffprobe_present();
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "ffmpeg missing but SLUICE_REQUIRE_TOOLS=1"
    );
    eprintln!("ffmpeg not found; skipped");
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

/// The folder of the standard test clips: `SLUICE_TEST_MEDIA` if set, else one per
/// target directory. Clips missing there are made with the repository's
/// `scripts/make-test-media.sh` (8 s each; needs ffmpeg). `clips` are the ones the
/// caller reads.
pub fn test_media(clips: &[&str]) -> PathBuf {
    let dir = std::env::var_os("SLUICE_TEST_MEDIA").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-media"),
        PathBuf::from,
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-media.sh");
    let lock =
        std::fs::File::create(std::env::temp_dir().join("sluice-media.lock")).expect("lock file");
    // Test binaries (of this crate and others) run in parallel; one makes the clips,
    // the others wait for it.
    lock.lock().expect("lock");
    if !clips.iter().all(|c| dir.join(c).exists()) {
        let status = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .arg("8")
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/make-test-media.sh");
        assert!(status.success(), "scripts/make-test-media.sh failed");
    }
    dir
}
