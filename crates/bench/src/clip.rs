//! A clip: the tags of an FLV file in memory, to publish in a loop.

use crate::Tag;
use bytes::BytesMut;
use sluice_media::flv::{TagReader, TAG_SCRIPT};
use std::path::Path;

/// The tags of one FLV file.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Script tags (onMetaData) first, then media in file order.
    pub tags: Vec<Tag>,
    /// Time from the first to the last tag plus one frame, in ms.
    pub duration_ms: i64,
}

impl Clip {
    /// Reads an FLV file.
    pub fn load(path: &Path) -> Result<Clip, crate::ClientError> {
        let data = std::fs::read(path)?;
        let mut buf = BytesMut::from(&data[..]);
        let mut reader = TagReader::new();
        let mut tags = Vec::new();
        while let Some(tag) = reader.read(&mut buf)? {
            tags.push(Tag {
                tag_type: tag.tag_type,
                ts_ms: i64::from(tag.timestamp_ms),
                body: tag.body,
            });
        }
        let first = tags
            .iter()
            .filter(|t| t.tag_type != TAG_SCRIPT)
            .map(|t| t.ts_ms)
            .min()
            .unwrap_or(0);
        let last = tags.iter().map(|t| t.ts_ms).max().unwrap_or(0);
        Ok(Clip {
            tags,
            duration_ms: last - first + 40,
        })
    }
}
