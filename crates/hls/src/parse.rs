//! Reading other servers' playlists (an edge pulling HLS): the few tags a live client
//! needs, from a master or a media playlist, bounded and without panics.
//!
//! Why not a playlist crate: what a pull needs is small (variants and their bandwidth;
//! target duration, media sequence, segments with their durations, the end tag, an
//! init section), and input from another server must be read with bounded memory.

/// Lines read at most; a longer playlist is an error.
pub const MAX_LINES: usize = 20_000;

/// A variant of a master playlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantRef {
    /// `BANDWIDTH`, bits per second (0 when missing).
    pub bandwidth: u64,
    /// The media playlist's URI, as written (relative or absolute).
    pub uri: String,
}

/// A segment of a media playlist.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRef {
    /// Its media sequence number.
    pub msn: u64,
    /// `EXTINF`, seconds.
    pub duration: f64,
    /// Its URI, as written.
    pub uri: String,
    /// A discontinuity comes before it.
    pub discontinuity: bool,
}

/// What a playlist says.
#[derive(Debug, Clone, PartialEq)]
pub enum Playlist {
    /// A master playlist: its variants.
    Master(Vec<VariantRef>),
    /// A media playlist.
    Media {
        /// `EXT-X-TARGETDURATION`, seconds.
        target_duration: f64,
        /// Its segments, oldest first.
        segments: Vec<SegmentRef>,
        /// `EXT-X-ENDLIST`: nothing more will come.
        ended: bool,
        /// `EXT-X-MAP`'s URI (fMP4 segments), if any.
        init: Option<String>,
    },
}

/// Why a playlist could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The first line is not `#EXTM3U`.
    #[error("not an HLS playlist (no #EXTM3U)")]
    NotM3u,
    /// More than [`MAX_LINES`] lines.
    #[error("playlist over {MAX_LINES} lines")]
    TooLong,
    /// A tag whose value does not read.
    #[error("bad {0}")]
    Bad(&'static str),
}

/// Reads a master or media playlist.
pub fn parse_playlist(text: &str) -> Result<Playlist, ParseError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next() != Some("#EXTM3U") {
        return Err(ParseError::NotM3u);
    }
    let (mut variants, mut segments) = (Vec::new(), Vec::new());
    let (mut target, mut msn, mut ended, mut init) = (0.0f64, 0u64, false, None);
    let mut pending_variant: Option<u64> = None;
    let mut pending_duration: Option<f64> = None;
    let mut discontinuity = false;
    for (n, line) in lines.enumerate() {
        if n >= MAX_LINES {
            return Err(ParseError::TooLong);
        }
        if let Some(attrs) = line.strip_prefix("#EXT-X-STREAM-INF:") {
            pending_variant = Some(
                attribute(attrs, "BANDWIDTH")
                    .and_then(|b| b.parse().ok())
                    .unwrap_or(0),
            );
        } else if let Some(v) = line.strip_prefix("#EXT-X-TARGETDURATION:") {
            target = v
                .parse()
                .map_err(|_| ParseError::Bad("EXT-X-TARGETDURATION"))?;
        } else if let Some(v) = line.strip_prefix("#EXT-X-MEDIA-SEQUENCE:") {
            msn = v
                .parse()
                .map_err(|_| ParseError::Bad("EXT-X-MEDIA-SEQUENCE"))?;
        } else if let Some(v) = line.strip_prefix("#EXTINF:") {
            let d: f64 = v
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .parse()
                .map_err(|_| ParseError::Bad("EXTINF"))?;
            if !d.is_finite() || d < 0.0 {
                return Err(ParseError::Bad("EXTINF"));
            }
            pending_duration = Some(d);
        } else if line == "#EXT-X-DISCONTINUITY" {
            discontinuity = true;
        } else if line == "#EXT-X-ENDLIST" {
            ended = true;
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-MAP:") {
            init = Some(
                attribute(attrs, "URI")
                    .ok_or(ParseError::Bad("EXT-X-MAP"))?
                    .to_string(),
            );
        } else if line.starts_with('#') {
            // Tags a pull does without (parts, hints, dates ...).
        } else if let Some(bandwidth) = pending_variant.take() {
            variants.push(VariantRef {
                bandwidth,
                uri: line.to_string(),
            });
        } else if let Some(duration) = pending_duration.take() {
            segments.push(SegmentRef {
                msn,
                duration,
                uri: line.to_string(),
                discontinuity: std::mem::take(&mut discontinuity),
            });
            msn = msn.saturating_add(1);
        }
    }
    if !variants.is_empty() {
        return Ok(Playlist::Master(variants));
    }
    if !target.is_finite() || target <= 0.0 {
        return Err(ParseError::Bad("EXT-X-TARGETDURATION"));
    }
    Ok(Playlist::Media {
        target_duration: target,
        segments,
        ended,
        init,
    })
}

/// The value of `name` in an attribute list (`A=1,B="x,y"`), unquoted.
fn attribute<'a>(attrs: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = attrs;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], q[end + 1..].trim_start_matches(','))
        } else {
            match after.split_once(',') {
                Some((v, t)) => (v, t),
                None => (after, ""),
            }
        };
        if key.trim() == name {
            return Some(value);
        }
        rest = tail;
    }
    None
}

/// `uri` resolved against the playlist URL `base` (`http(s)://host[:port]/path`).
pub fn resolve_uri(base: &str, uri: &str) -> String {
    if uri.contains("://") {
        return uri.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    if let Some(abs) = uri.strip_prefix('/') {
        let host_end = base[scheme_end..]
            .find('/')
            .map_or(base.len(), |i| scheme_end + i);
        return format!("{}/{abs}", &base[..host_end]);
    }
    let path = base.split(['?', '#']).next().unwrap_or(base);
    match path[scheme_end..].rfind('/') {
        Some(i) => format!("{}/{uri}", &path[..scheme_end + i]),
        None => format!("{path}/{uri}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_and_media_playlists() {
        let master = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=800000,CODECS=\"avc1.64001f,mp4a.40.2\"\nlow/index.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=3000000\nhigh/index.m3u8\n";
        assert_eq!(
            parse_playlist(master).unwrap(),
            Playlist::Master(vec![
                VariantRef {
                    bandwidth: 800_000,
                    uri: "low/index.m3u8".into()
                },
                VariantRef {
                    bandwidth: 3_000_000,
                    uri: "high/index.m3u8".into()
                },
            ])
        );
        let media = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:41\n#EXTINF:2.000,\ns41.ts\n#EXT-X-DISCONTINUITY\n#EXTINF:1.5,\ns42.ts\n";
        let Playlist::Media {
            target_duration,
            segments,
            ended,
            init,
        } = parse_playlist(media).unwrap()
        else {
            panic!()
        };
        assert_eq!((target_duration, ended, init), (2.0, false, None));
        assert_eq!(segments.len(), 2);
        assert_eq!((segments[1].msn, segments[1].duration), (42, 1.5));
        assert!(segments[1].discontinuity && !segments[0].discontinuity);
        let ended = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:4,\na.m4s\n#EXT-X-ENDLIST\n";
        let Playlist::Media { ended, init, .. } = parse_playlist(ended).unwrap() else {
            panic!()
        };
        assert!(ended);
        assert_eq!(init.as_deref(), Some("init.mp4"));
        for bad in [
            "",
            "#EXTM3X\n",
            "#EXTM3U\n#EXTINF:x,\na.ts\n",
            "#EXTM3U\n#EXTINF:2,\na.ts\n",
            "#EXTM3U\n#EXT-X-TARGETDURATION:NaN\n",
            "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:-1,\na.ts\n",
        ] {
            assert!(parse_playlist(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uris_resolve_against_the_playlist() {
        let base = "http://h:8080/live/cam.m3u8?token=1";
        assert_eq!(resolve_uri(base, "seg1.ts"), "http://h:8080/live/seg1.ts");
        assert_eq!(
            resolve_uri(base, "/other/seg.ts"),
            "http://h:8080/other/seg.ts"
        );
        assert_eq!(resolve_uri(base, "https://cdn/x.ts"), "https://cdn/x.ts");
        assert_eq!(resolve_uri("http://h", "a.ts"), "http://h/a.ts");
    }
}
