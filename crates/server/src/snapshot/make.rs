//! One snapshot: a keyframe muxed as a one-frame MPEG-TS (parameter sets in band, so
//! ffmpeg needs nothing else), decoded, scaled and encoded as JPEG by an ffmpeg
//! process.

use super::{SnapshotError, MAKE_TIMEOUT, MAX_JPEG_BYTES};
use bytes::{Bytes, BytesMut};
use sluice_media::ts::TsMuxer;
use sluice_media::{Frame, Track, TrackConfig};
use std::process::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why ffmpeg made no JPEG.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    /// It could not be started (not installed, say).
    #[error("cannot run {ffmpeg}: {source}")]
    Spawn {
        ffmpeg: String,
        source: std::io::Error,
    },
    /// It ran past [`MAKE_TIMEOUT`] and was killed.
    #[error("ffmpeg took longer than {}s", MAKE_TIMEOUT.as_secs())]
    Timeout,
    /// It wrote more than [`MAX_JPEG_BYTES`].
    #[error("ffmpeg's JPEG is over {MAX_JPEG_BYTES} bytes")]
    TooLarge,
    /// It exited without a JPEG.
    #[error("ffmpeg made no JPEG")]
    Failed,
}

/// `frame` (a keyframe of `track`) as an MPEG-TS of its own.
pub(super) fn one_frame_ts(frame: &Frame, track: &Track) -> Result<Bytes, SnapshotError> {
    let name = match track.config {
        TrackConfig::H264(_) | TrackConfig::H265(_) => None,
        TrackConfig::Av1 { .. } => Some("AV1"),
        TrackConfig::Vp8 { .. } => Some("VP8"),
        TrackConfig::Vp9 { .. } => Some("VP9"),
        _ => Some("this"),
    };
    let codec_error = || SnapshotError::Codec(name.unwrap_or("this"));
    if name.is_some() {
        return Err(codec_error());
    }
    let mut muxer = TsMuxer::new(Some(track), None).map_err(|_| codec_error())?;
    let mut out = BytesMut::new();
    muxer.write_tables(&mut out);
    muxer
        .write_frame(frame, &mut out)
        .map_err(|_| codec_error())?;
    Ok(out.freeze())
}

/// Runs `ffmpeg` on `ts`: its first frame, scaled to `width` (the height keeping the
/// picture's shape, even), as one JPEG.
pub(super) async fn jpeg(ffmpeg: &str, ts: Bytes, width: Option<u32>) -> Result<Bytes, MakeError> {
    let mut command = tokio::process::Command::new(ffmpeg);
    command
        .args(["-hide_banner", "-loglevel", "error", "-nostdin"])
        .args(["-f", "mpegts", "-i", "pipe:0", "-frames:v", "1"]);
    if let Some(w) = width {
        command.args(["-vf", &format!("scale={w}:-2")]);
    }
    command
        .args(["-q:v", "4", "-f", "image2pipe", "-c:v", "mjpeg", "pipe:1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| MakeError::Spawn {
        ffmpeg: ffmpeg.to_string(),
        source,
    })?;
    let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(MakeError::Failed);
    };
    let run = async move {
        // A frame is small: written whole before reading, then closed so ffmpeg ends.
        let write = async move {
            let _ = stdin.write_all(&ts).await;
        };
        let mut jpeg = Vec::new();
        let read = async {
            let mut chunk = [0u8; 64 << 10];
            loop {
                let n = stdout
                    .read(&mut chunk)
                    .await
                    .map_err(|_| MakeError::Failed)?;
                if n == 0 {
                    return Ok(());
                }
                if jpeg.len() + n > MAX_JPEG_BYTES {
                    return Err(MakeError::TooLarge);
                }
                jpeg.extend_from_slice(&chunk[..n]);
            }
        };
        let ((), read) = tokio::join!(write, read);
        read?;
        let status = child.wait().await.map_err(|_| MakeError::Failed)?;
        // A JPEG starts with SOI and ends with EOI.
        if !status.success() || !jpeg.starts_with(&[0xff, 0xd8]) || !jpeg.ends_with(&[0xff, 0xd9]) {
            return Err(MakeError::Failed);
        }
        Ok(Bytes::from(jpeg))
    };
    tokio::time::timeout(MAKE_TIMEOUT, run)
        .await
        .unwrap_or(Err(MakeError::Timeout))
}
