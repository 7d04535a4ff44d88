//! Test helpers shared by the container tests that cross-check with ffprobe.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether ffprobe is here. Its absence fails the test instead of skipping it where
/// `SLUICE_REQUIRE_TOOLS=1` (CI), and where the build script found it (`have_ffmpeg`):
/// a test that skips is then one cargo did not list as ignored.
pub fn ffprobe_present() -> bool {
    present("ffprobe")
}

/// Whether ffmpeg and ffprobe are here; see [`ffprobe_present`].
pub fn ffmpeg_present() -> bool {
    present("ffmpeg") && present("ffprobe")
}

fn present(tool: &str) -> bool {
    if Command::new(tool).arg("-version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{tool} missing but SLUICE_REQUIRE_TOOLS=1"
    );
    if cfg!(have_ffmpeg) {
        panic!(
            "{tool} was there when the tests were built but is not now: rebuild them \
             (touch crates/media/build.rs) to have the tests that need it ignored"
        );
    }
    eprintln!("{tool} not found; skipped");
    false
}

/// Fails where `SLUICE_REQUIRE_TOOLS=1` if the build script found ffmpeg or ffprobe
/// missing: the tests that need them were then compiled as ignored, and would not fail
/// on their own (see `scripts/e2e_tools.rs`).
pub fn require_ffmpeg_found_at_build() {
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1") || cfg!(have_ffmpeg),
        "SLUICE_REQUIRE_TOOLS=1, but the build found no ffmpeg/ffprobe: the tests that \
         need them were ignored (install them, or run bash scripts/test.sh)"
    );
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
