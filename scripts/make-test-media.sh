#!/usr/bin/env bash
# Makes the clips the tests and benchmarks play, with ffmpeg, from a synthetic
# picture (testsrc2) and a 440 Hz tone: no media files are stored in the repository.
#
# Usage: scripts/make-test-media.sh OUTDIR [SECONDS]   (SECONDS: length, default 20)
#
# Every clip is 25 fps with a closed GOP of 2 s (a keyframe every 50 frames, none
# added at scene cuts), and 48 kHz stereo audio:
#
#   h264_aac_720p.mp4      1280x720 H.264 High, no B-frames, ~2 Mbit/s; AAC-LC 128 kbit/s
#   h264_aac_720p.flv      the same streams in FLV (remuxed, not re-encoded)
#   h264_bframes_720p.mp4  1280x720 H.264 High with B-frames (pts != dts); AAC-LC
#   h264_bframes_720p.flv  the same streams in FLV (composition times in the tags)
#   h265_aac_1080p.mp4     1920x1080 HEVC, no B-frames, ~3 Mbit/s, tagged hvc1; AAC-LC
#   h264_opus_720p.mkv     1280x720 H.264 High, no B-frames, ~2 Mbit/s; Opus 96 kbit/s
#   h264_aac_4k.mp4        3840x2160 H.264 ~8 Mbit/s; AAC-LC. Only with WITH_4K=1 (slow)
#
# A clip that is already there is kept, whatever its length. Each clip is written to
# a temporary name and renamed when complete, so an interrupted run leaves no
# partial clip behind and several runs into the same folder do not clash.
set -euo pipefail

usage() {
  echo "usage: $0 OUTDIR [SECONDS]  (WITH_4K=1 adds a 4K clip)" >&2
  exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
out=$1
secs=${2:-20}
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || usage
command -v ffmpeg >/dev/null || {
  echo "$0: ffmpeg is needed (Debian/Ubuntu: apt-get install ffmpeg)" >&2
  exit 2
}
mkdir -p "$out"

# clip NAME ARGS...: runs ffmpeg with ARGS and NAME (in OUTDIR) as its output,
# unless NAME exists.
clip() {
  local name=$1 dest=$out/$1 part=$out/.partial-$$-$1
  shift
  [ -s "$dest" ] && return 0
  echo "making $name"
  if ffmpeg -nostdin -hide_banner -loglevel error -y "$@" "$part"; then
    mv -f "$part" "$dest"
  else
    rm -f "$part"
    echo "$0: ffmpeg could not make $name" >&2
    return 1
  fi
}

# synthetic SIZE: the two inputs (test picture of SIZE at 25 fps, tone) as $inputs.
synthetic() {
  inputs=(-f lavfi -i "testsrc2=size=$1:rate=25"
    -f lavfi -i "sine=frequency=440:sample_rate=48000" -t "$secs")
}

gop=(-g 50 -keyint_min 50 -sc_threshold 0 -flags +cgop)
h264=(-c:v libx264 -preset veryfast -profile:v high -pix_fmt yuv420p "${gop[@]}")
cbr2m=(-b:v 2M -maxrate 2M -bufsize 4M)
aac=(-c:a aac -b:a 128k -ar 48000 -ac 2)

synthetic 1280x720
clip h264_aac_720p.mp4 "${inputs[@]}" "${h264[@]}" -bf 0 "${cbr2m[@]}" "${aac[@]}"
clip h264_bframes_720p.mp4 "${inputs[@]}" "${h264[@]}" -bf 2 "${cbr2m[@]}" "${aac[@]}"
clip h264_opus_720p.mkv "${inputs[@]}" "${h264[@]}" -bf 0 "${cbr2m[@]}" \
  -c:a libopus -b:a 96k -ar 48000 -ac 2
clip h264_aac_720p.flv -i "$out/h264_aac_720p.mp4" -c copy
clip h264_bframes_720p.flv -i "$out/h264_bframes_720p.mp4" -c copy

synthetic 1920x1080
clip h265_aac_1080p.mp4 "${inputs[@]}" -c:v libx265 -preset ultrafast -pix_fmt yuv420p \
  -x265-params "keyint=50:min-keyint=50:scenecut=0:open-gop=0:bframes=0:log-level=error" \
  -b:v 3M -maxrate 3M -bufsize 6M -tag:v hvc1 "${aac[@]}"

if [ "${WITH_4K:-0}" = 1 ]; then
  synthetic 3840x2160
  clip h264_aac_4k.mp4 "${inputs[@]}" -c:v libx264 -preset ultrafast -pix_fmt yuv420p \
    "${gop[@]}" -bf 0 -b:v 8M -maxrate 8M -bufsize 16M "${aac[@]}"
fi
