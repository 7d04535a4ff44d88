#!/usr/bin/env bash
# The test command: sets up everything the whole suite needs, then runs it the way CI
# does. Usage: bash scripts/test.sh [ARGS for cargo test...]
#
# 1. The real clients the end-to-end tests drive: ffmpeg and ffprobe, headless
#    Chromium (mpegts.js, hls.js), GStreamer's RTSP elements, curl and wget. Run as
#    root, it installs the missing ones with apt-get; otherwise it lists the missing
#    packages with the command that installs them, and stops.
# 2. The test clips (8 s each), made by scripts/make-test-media.sh into
#    target/test-media (SLUICE_TEST_MEDIA points the tests at them).
# 3. The Helm chart: helm lint and helm template checked (scripts/check-helm.sh, which
#    builds helm with Go once, into target/tools).
# 4. With SLUICE_REQUIRE_TOOLS=1, so a test that lacks a tool fails instead of being
#    skipped: cargo fmt --check, cargo clippy -D warnings, cargo test --workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# GStreamer elements the RTSP interoperability test, the VP8/VP9 RTP decode test and the
# HTTP-TS test use
# (gst-launch-1.0 pipelines).
gst_elements=(rtspsrc rtspclientsink rtph264depay avdec_h264 openh264enc
  udpsrc rtpvp8depay rtpvp9depay vp8dec vp9dec souphttpsrc tsdemux)
gst_packages=(gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-libav gstreamer1.0-rtsp)

# missing_packages: the Debian packages of the clients not found here, one per line,
# each followed by a tab and what is missing.
missing_packages() {
  local p e lost=()
  for p in ffmpeg ffprobe; do command -v "$p" >/dev/null || lost+=("$p"); done
  [ ${#lost[@]} = 0 ] || printf 'ffmpeg\t%s\n' "${lost[*]}"
  command -v chromium >/dev/null || printf 'chromium\tchromium\n'
  command -v curl >/dev/null || printf 'curl\tcurl\n'
  command -v wget >/dev/null || printf 'wget\twget\n'
  command -v rclone >/dev/null || printf 'rclone\trclone\n'
  command -v cadaver >/dev/null || printf 'cadaver\tcadaver\n'
  command -v srt-live-transmit >/dev/null || printf 'srt-tools\tsrt-live-transmit\n'
  # The cluster's directory (crates/server/tests/e2e/cluster.rs).
  command -v redis-server >/dev/null || printf 'redis-server\tredis-server\n'
  PATH=$PATH:/usr/sbin command -v nginx >/dev/null || printf 'nginx\tnginx\n'
  [ -e /usr/lib/nginx/modules/ngx_rtmp_module.so ] || printf 'libnginx-mod-rtmp\tnginx RTMP module\n'
  # scripts/check-helm.sh: Go builds helm; Python with PyYAML checks its renderings.
  command -v go >/dev/null || printf 'golang-go\tgo\n'
  python3 -c 'import tomllib, yaml' 2>/dev/null || /usr/bin/python3 -c 'import tomllib, yaml' 2>/dev/null \
    || printf 'python3-yaml\tPython 3.11+ with PyYAML\n'
  # The opus crate links Debian's libopus (WebRTC's AAC-to-Opus transcoding).
  command -v pkg-config >/dev/null || printf 'pkg-config\tpkg-config\n'
  pkg-config --exists opus 2>/dev/null || printf 'libopus-dev\tlibopus-dev\n'
  lost=()
  if command -v gst-inspect-1.0 >/dev/null && command -v gst-launch-1.0 >/dev/null; then
    for e in "${gst_elements[@]}"; do gst-inspect-1.0 "$e" >/dev/null 2>&1 || lost+=("$e"); done
  else
    lost=(gst-inspect-1.0 gst-launch-1.0)
  fi
  if [ ${#lost[@]} -gt 0 ]; then
    for p in "${gst_packages[@]}"; do printf '%s\tGStreamer: %s\n' "$p" "${lost[*]}"; done
  fi
}

step "checking the clients the end-to-end tests drive"
missing=$(missing_packages)
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  mapfile -t packages < <(cut -f1 <<<"$missing")
  echo "installing: ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${packages[@]}" >/dev/null
  missing=$(missing_packages)
fi
if [ -n "$missing" ]; then
  {
    echo "scripts/test.sh: the end-to-end tests need programs that are not installed:"
    cut -f2 <<<"$missing" | sort -u | sed 's/^/  missing: /'
    echo "Install them (Debian, Ubuntu) with:"
    echo "  sudo apt-get install $(cut -f1 <<<"$missing" | paste -sd ' ')"
    [ "$(id -u)" != 0 ] || echo "(apt-get did not provide them all here)"
    echo "then run 'bash scripts/test.sh' again. ('cargo test --workspace' alone runs the"
    echo "rest and reports those tests as ignored.)"
  } >&2
  exit 1
fi
echo "ffmpeg, ffprobe, chromium, curl, wget, go, PyYAML, GStreamer (${gst_elements[*]}): all here"
command -v cargo >/dev/null || { echo "scripts/test.sh: cargo is needed (install Rust with rustup)" >&2; exit 2; }

step "making the test clips"
export SLUICE_TEST_MEDIA=${SLUICE_TEST_MEDIA:-$PWD/target/test-media}
bash scripts/make-test-media.sh "$SLUICE_TEST_MEDIA" 8
echo "in $SLUICE_TEST_MEDIA"

# From here on a test that cannot find a tool or a clip fails rather than skips.
export SLUICE_REQUIRE_TOOLS=1

step "the Helm chart and the plain Kubernetes manifests (scripts/check-helm.sh)"
bash scripts/check-helm.sh

step "cargo fmt --all -- --check"
cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo test --workspace $*"
cargo test --workspace "$@"
