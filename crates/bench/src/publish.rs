//! Publishing a clip in a loop, paced by its timestamps, with a continuous timeline.

use crate::clip::Clip;
use crate::rtmp::RtmpConn;
use crate::ClientError;
use sluice_media::flv::TAG_SCRIPT;
use tokio::time::{Duration, Instant};

/// Sends `clip` over `conn` until `until`, looping, or after `rounds` passes if given.
/// With `realtime`, each tag leaves when its timestamp is due; without, as fast as the
/// socket takes them. Returns the number of media tags sent.
pub async fn publish_clip(
    conn: &mut RtmpConn,
    clip: &Clip,
    until: Instant,
    realtime: bool,
    rounds: Option<i64>,
) -> Result<u64, ClientError> {
    let start = Instant::now();
    let mut sent = 0u64;
    if let Some(meta) = clip.tags.iter().find(|t| t.tag_type == TAG_SCRIPT) {
        conn.send(TAG_SCRIPT, 0, &meta.body);
    }
    for round in 0..rounds.unwrap_or(i64::MAX) {
        for tag in clip.tags.iter().filter(|t| t.tag_type != TAG_SCRIPT) {
            let ts = tag.ts_ms + round * clip.duration_ms;
            if realtime {
                let due = start + Duration::from_millis(u64::try_from(ts).unwrap_or(0));
                if due > Instant::now() {
                    conn.flush().await?;
                    tokio::time::sleep_until(due.min(until)).await;
                }
            }
            if Instant::now() >= until {
                conn.flush().await?;
                return Ok(sent);
            }
            conn.send(tag.tag_type, ts as u32, &tag.body);
            sent += 1;
            if !realtime && sent.is_multiple_of(64) {
                conn.flush().await?;
            }
        }
    }
    conn.flush().await?;
    Ok(sent)
}
