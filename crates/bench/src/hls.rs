//! Sans-IO pieces of the HLS players: an HTTP/1.1 response scanner (Content-Length
//! and chunked bodies) and a media playlist parser (TS, fMP4, Low-Latency HLS).
//!
//! Why here and not a crate: a player needs from a playlist only the media sequence,
//! the target duration, each segment's and part's duration and URI, the map and the
//! preload hint. The parser keeps URIs as byte ranges into the playlist text and
//! reuses its vectors from one reload to the next, so a reload allocates nothing once
//! the vectors have grown; the response scanner hands body bytes through and keeps
//! only the response head (bounded).
//!
//! # Invariants
//! - `Response::feed` accepts any split of the bytes and yields the same body.
//! - Memory is bounded: the head and a chunk-size line up to [`MAX_HEAD`].

use std::ops::Range;

/// Largest response head (or chunk-size/trailer line) accepted.
pub(crate) const MAX_HEAD: usize = 16 << 10;

/// Why a response or playlist was refused.
pub(crate) type Malformed = &'static str;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespState {
    Head,
    /// Content-Length bytes left.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Bytes left of a chunk's data.
    ChunkData(u64),
    /// The CRLF after a chunk's data: bytes of it left.
    ChunkEnd(u8),
    /// Trailer lines after the last chunk, up to an empty line.
    Trailer,
    Done,
}

/// One HTTP/1.1 response, scanned as its bytes arrive; reset for the next one.
#[derive(Debug)]
pub(crate) struct Response {
    state: RespState,
    /// The head, then the current chunk-size or trailer line.
    line: Vec<u8>,
    /// Status code, once the head is in.
    pub status: u16,
    /// Whether the connection stays open after this response.
    pub keep_alive: bool,
    /// Cookies the response set (name, value), for the player to send back.
    pub set_cookies: Vec<(String, String)>,
}

impl Response {
    pub(crate) fn new() -> Self {
        Response {
            state: RespState::Done,
            line: Vec::with_capacity(512),
            status: 0,
            keep_alive: false,
            set_cookies: Vec::new(),
        }
    }

    /// Expects a new response.
    pub(crate) fn reset(&mut self) {
        self.state = RespState::Head;
        self.line.clear();
        self.status = 0;
        self.keep_alive = false;
        self.set_cookies.clear();
    }

    /// Whether the head has been read.
    pub(crate) fn has_head(&self) -> bool {
        !matches!(self.state, RespState::Head)
    }

    /// Whether the whole response has been read.
    pub(crate) fn done(&self) -> bool {
        self.state == RespState::Done
    }

    /// Scans `data`, passing body bytes to `body`; returns the bytes used (less than
    /// `data.len()` only once the response is done).
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        body: &mut impl FnMut(&[u8]),
    ) -> Result<usize, Malformed> {
        let total = data.len();
        while !data.is_empty() {
            match self.state {
                RespState::Done => break,
                RespState::Head => {
                    let from = self.line.len().saturating_sub(3);
                    let take = data.len().min(MAX_HEAD + 4 - self.line.len().min(MAX_HEAD));
                    self.line.extend_from_slice(&data[..take]);
                    match self.line[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                        Some(i) => {
                            let end = from + i + 4;
                            let used = take - (self.line.len() - end);
                            data = &data[used..];
                            self.line.truncate(end);
                            self.parse_head()?;
                            self.line.clear();
                        }
                        None if self.line.len() > MAX_HEAD => {
                            return Err("response head too large")
                        }
                        None => data = &data[take..],
                    }
                }
                RespState::Body(left) => {
                    let n = (data.len() as u64).min(left) as usize;
                    body(&data[..n]);
                    data = &data[n..];
                    self.state = if left == n as u64 {
                        RespState::Done
                    } else {
                        RespState::Body(left - n as u64)
                    };
                }
                RespState::ChunkData(left) => {
                    let n = (data.len() as u64).min(left) as usize;
                    body(&data[..n]);
                    data = &data[n..];
                    self.state = if left == n as u64 {
                        RespState::ChunkEnd(2)
                    } else {
                        RespState::ChunkData(left - n as u64)
                    };
                }
                RespState::ChunkEnd(left) => {
                    let want = if left == 2 { b'\r' } else { b'\n' };
                    if data[0] != want {
                        return Err("chunk not followed by CRLF");
                    }
                    data = &data[1..];
                    self.state = if left == 2 {
                        RespState::ChunkEnd(1)
                    } else {
                        RespState::ChunkSize
                    };
                }
                RespState::ChunkSize | RespState::Trailer => {
                    let Some(line) = self.take_line(&mut data)? else {
                        continue;
                    };
                    if self.state == RespState::Trailer {
                        if line == 0 {
                            self.state = RespState::Done;
                        }
                        self.line.clear();
                        continue;
                    }
                    let text = &self.line[..line];
                    let hex = text.split(|&b| b == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(hex)
                        .ok()
                        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                        .ok_or("bad chunk size")?;
                    self.line.clear();
                    self.state = if size == 0 {
                        RespState::Trailer
                    } else {
                        RespState::ChunkData(size)
                    };
                }
            }
        }
        Ok(total - data.len())
    }

    /// Moves bytes up to a LF into `line`; the line's length without CRLF once complete.
    fn take_line(&mut self, data: &mut &[u8]) -> Result<Option<usize>, Malformed> {
        match data.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.line.extend_from_slice(&data[..i]);
                *data = &data[i + 1..];
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                Ok(Some(self.line.len()))
            }
            None => {
                self.line.extend_from_slice(data);
                *data = &[];
                if self.line.len() > MAX_HEAD {
                    return Err("chunk line too long");
                }
                Ok(None)
            }
        }
    }

    fn parse_head(&mut self) -> Result<(), Malformed> {
        let text = std::str::from_utf8(&self.line).map_err(|_| "response head not UTF-8")?;
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap_or_default();
        let mut words = status.split(' ');
        let version = words.next().unwrap_or_default();
        let http11 = match version {
            "HTTP/1.1" => true,
            "HTTP/1.0" => false,
            _ => return Err("not an HTTP/1.x response"),
        };
        self.status = words
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or("bad status line")?;
        let mut length = None;
        let mut chunked = false;
        self.keep_alive = http11;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<u64>().map_err(|_| "bad Content-Length")?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
            } else if name.eq_ignore_ascii_case("set-cookie") {
                let pair = value.split(';').next().unwrap_or_default();
                if let Some((n, v)) = pair.split_once('=') {
                    self.set_cookies
                        .push((n.trim().to_owned(), v.trim().to_owned()));
                }
            } else if name.eq_ignore_ascii_case("connection") {
                for token in value.split(',') {
                    let token = token.trim();
                    if token.eq_ignore_ascii_case("close") {
                        self.keep_alive = false;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        self.keep_alive = true;
                    }
                }
            }
        }
        self.state = if chunked {
            RespState::ChunkSize
        } else if matches!(self.status, 100..=199 | 204 | 304) {
            RespState::Done
        } else {
            match length {
                Some(0) => RespState::Done,
                Some(n) => RespState::Body(n),
                // A body up to the close: not worth supporting for a player.
                None => return Err("response without Content-Length or chunked encoding"),
            }
        };
        Ok(())
    }
}

/// A segment or part position: (media sequence number, part index).
pub(crate) type Pos = (u64, u32);

/// A complete segment of a playlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub msn: u64,
    pub duration_ms: u64,
    /// The URI, as a range of the playlist text.
    pub uri: Range<usize>,
}

/// A partial segment of a Low-Latency playlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    pub pos: Pos,
    pub duration_ms: u64,
    pub independent: bool,
    pub uri: Range<usize>,
}

/// What a player needs of a media playlist; URIs are ranges of the parsed text.
#[derive(Debug, Default)]
pub(crate) struct Playlist {
    pub target_duration_ms: u64,
    pub media_sequence: u64,
    /// `EXT-X-PART-INF:PART-TARGET`.
    pub part_target_ms: Option<u64>,
    pub can_block_reload: bool,
    /// `EXT-X-MAP` URI.
    pub map: Option<Range<usize>>,
    pub segments: Vec<Segment>,
    /// Parts in playlist order, with the segment (msn) they belong to.
    pub parts: Vec<Part>,
    /// `EXT-X-PRELOAD-HINT` of TYPE=PART: where it is and its URI.
    pub hint: Option<(Pos, Range<usize>)>,
    pub ended: bool,
}

impl Playlist {
    /// Parses `text` (a media playlist), reusing this value's vectors.
    pub(crate) fn parse(&mut self, text: &[u8]) -> Result<(), Malformed> {
        self.target_duration_ms = 0;
        self.media_sequence = 0;
        self.part_target_ms = None;
        self.can_block_reload = false;
        self.map = None;
        self.segments.clear();
        self.parts.clear();
        self.hint = None;
        self.ended = false;
        let mut lines = Lines { text, at: 0 };
        match lines.next() {
            Some((r, _)) if text[r.clone()].starts_with(b"#EXTM3U") => {}
            _ => return Err("playlist does not start with #EXTM3U"),
        }
        let mut pending: Option<u64> = None;
        let mut part_index = 0u32;
        let mut hint_uri = None;
        for (r, start) in lines {
            let line = &text[r.clone()];
            if line.is_empty() {
                continue;
            }
            if line[0] != b'#' {
                let duration_ms = pending.take().ok_or("URI without EXTINF")?;
                let msn = self.media_sequence + self.segments.len() as u64;
                self.segments.push(Segment {
                    msn,
                    duration_ms,
                    uri: r,
                });
                part_index = 0;
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                if line == b"#EXT-X-ENDLIST" {
                    self.ended = true;
                }
                continue;
            };
            let (tag, value) = (&line[..colon], start + colon + 1..r.end);
            let v = &text[value.clone()];
            match tag {
                b"#EXTINF" => {
                    let d = v.split(|&b| b == b',').next().unwrap_or_default();
                    pending = Some(seconds_ms(d).ok_or("bad EXTINF")?);
                }
                b"#EXT-X-TARGETDURATION" => {
                    self.target_duration_ms = seconds_ms(v).ok_or("bad TARGETDURATION")?;
                }
                b"#EXT-X-MEDIA-SEQUENCE" => {
                    self.media_sequence = std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .ok_or("bad MEDIA-SEQUENCE")?;
                }
                b"#EXT-X-PART-INF" => {
                    for (name, a) in Attrs::new(text, value) {
                        if name == b"PART-TARGET" {
                            self.part_target_ms = seconds_ms(&text[a]);
                        }
                    }
                }
                b"#EXT-X-SERVER-CONTROL" => {
                    for (name, a) in Attrs::new(text, value) {
                        if name == b"CAN-BLOCK-RELOAD" && &text[a] == b"YES" {
                            self.can_block_reload = true;
                        }
                    }
                }
                b"#EXT-X-MAP" => {
                    self.map = Attrs::new(text, value)
                        .find(|(n, _)| *n == b"URI")
                        .map(|a| a.1);
                }
                b"#EXT-X-PART" => {
                    let (mut duration, mut uri, mut independent) = (None, None, false);
                    for (name, a) in Attrs::new(text, value) {
                        match name {
                            b"DURATION" => duration = seconds_ms(&text[a]),
                            b"URI" => uri = Some(a),
                            b"INDEPENDENT" => independent = &text[a] == b"YES",
                            _ => {}
                        }
                    }
                    let msn = self.media_sequence + self.segments.len() as u64;
                    self.parts.push(Part {
                        pos: (msn, part_index),
                        duration_ms: duration.ok_or("EXT-X-PART without DURATION")?,
                        independent,
                        uri: uri.ok_or("EXT-X-PART without URI")?,
                    });
                    part_index += 1;
                }
                b"#EXT-X-PRELOAD-HINT" => {
                    let mut part = false;
                    for (name, a) in Attrs::new(text, value) {
                        match name {
                            b"TYPE" => part = &text[a] == b"PART",
                            b"URI" => hint_uri = Some(a),
                            _ => {}
                        }
                    }
                    if !part {
                        hint_uri = None;
                    }
                }
                _ => {}
            }
        }
        if let Some(uri) = hint_uri {
            let msn = self.media_sequence + self.segments.len() as u64;
            self.hint = Some(((msn, part_index), uri));
        }
        Ok(())
    }

    /// The msn after the last complete segment.
    pub(crate) fn next_msn(&self) -> u64 {
        self.media_sequence + self.segments.len() as u64
    }

    /// The listed part at `pos`.
    pub(crate) fn part(&self, pos: Pos) -> Option<&Part> {
        self.parts.iter().rev().find(|p| p.pos == pos)
    }

    /// The first listed part after `pos`, or the preload hint's position.
    pub(crate) fn after(&self, pos: Pos) -> Option<Pos> {
        self.parts
            .iter()
            .map(|p| p.pos)
            .find(|&p| p > pos)
            .or(self.hint.as_ref().map(|h| h.0))
    }

    /// Where a low-latency player starts: the last independent part (a keyframe),
    /// or the hint when no part is listed.
    pub(crate) fn live_edge_part(&self) -> Option<Pos> {
        self.parts
            .iter()
            .rev()
            .find(|p| p.independent)
            .or(self.parts.first())
            .map(|p| p.pos)
            .or(self.hint.as_ref().map(|h| h.0))
    }
}

/// Lines of a text, without their CR LF: (range, start).
struct Lines<'a> {
    text: &'a [u8],
    at: usize,
}

impl Iterator for Lines<'_> {
    type Item = (Range<usize>, usize);
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.text.len() {
            return None;
        }
        let start = self.at;
        let end = self.text[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.text.len(), |i| start + i);
        self.at = end + 1;
        let mut e = end;
        while e > start && matches!(self.text[e - 1], b'\r' | b' ' | b'\t') {
            e -= 1;
        }
        Some((start..e, start))
    }
}

/// An attribute list: `NAME=value,NAME="quoted, value"`; yields names and the value
/// ranges (without quotes).
struct Attrs<'a> {
    text: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Attrs<'a> {
    fn new(text: &'a [u8], r: Range<usize>) -> Self {
        Attrs {
            text,
            at: r.start,
            end: r.end,
        }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (&'a [u8], Range<usize>);
    fn next(&mut self) -> Option<Self::Item> {
        let t = self.text;
        while self.at < self.end && matches!(t[self.at], b',' | b' ') {
            self.at += 1;
        }
        if self.at >= self.end {
            return None;
        }
        let eq = t[self.at..self.end].iter().position(|&b| b == b'=')? + self.at;
        let name = &t[self.at..eq];
        let mut v = eq + 1;
        let value = if t.get(v) == Some(&b'"') {
            v += 1;
            let close = t[v..self.end]
                .iter()
                .position(|&b| b == b'"')
                .map_or(self.end, |i| v + i);
            self.at = close + 1;
            v..close
        } else {
            let comma = t[v..self.end]
                .iter()
                .position(|&b| b == b',')
                .map_or(self.end, |i| v + i);
            self.at = comma;
            v..comma
        };
        Some((name, value))
    }
}

/// Decimal seconds (`2`, `2.002`, `0.33366`) as whole milliseconds, rounded.
fn seconds_ms(v: &[u8]) -> Option<u64> {
    let s: f64 = std::str::from_utf8(v).ok()?.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| (s * 1000.0).round() as u64)
}

/// Appends the request target of `uri`, relative to the playlist at `playlist_path`
/// (an origin-form path, maybe with a query), to `out`. An absolute `http://` URI is
/// reduced to its path (the players stay on the playlist's server).
pub(crate) fn push_target(out: &mut String, playlist_path: &str, uri: &str) {
    if let Some(rest) = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"))
    {
        out.push_str(rest.find('/').map_or("/", |i| &rest[i..]));
    } else if uri.starts_with('/') {
        out.push_str(uri);
    } else {
        let path = playlist_path.split('?').next().unwrap_or_default();
        out.push_str(path.rfind('/').map_or("/", |i| &path[..=i]));
        out.push_str(uri);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(r: &mut Response, parts: &[&[u8]]) -> (Vec<u8>, usize) {
        let mut body = Vec::new();
        let mut used = 0;
        for p in parts {
            used += r.feed(p, &mut |b| body.extend_from_slice(b)).unwrap();
        }
        (body, used)
    }

    #[test]
    fn content_length_any_split() {
        let msg =
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhelloEXTRA";
        for cut in 0..msg.len() {
            let mut r = Response::new();
            r.reset();
            let (body, used) = body_of(&mut r, &[&msg[..cut], &msg[cut..]]);
            assert_eq!(body, b"hello", "cut {cut}");
            assert!(r.done() && r.keep_alive && r.status == 200);
            assert_eq!(used, msg.len() - 5);
        }
    }

    #[test]
    fn chunked_any_split() {
        let msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nabcd\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
        for cut in 0..msg.len() {
            let mut r = Response::new();
            r.reset();
            let (body, used) = body_of(&mut r, &[&msg[..cut], &msg[cut..]]);
            assert_eq!(body, b"abcd0123456789", "cut {cut}");
            assert!(r.done());
            assert_eq!(used, msg.len());
        }
        let mut r = Response::new();
        r.reset();
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(r.feed(bad, &mut |_| {}).is_err());
    }

    #[test]
    fn heads() {
        let mut r = Response::new();
        r.reset();
        r.feed(
            b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            &mut |_| {},
        )
        .unwrap();
        assert!(r.done() && !r.keep_alive && r.status == 404);
        r.reset();
        r.feed(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 1\r\n\r\n",
            &mut |_| {},
        )
        .unwrap();
        assert!(!r.done() && !r.keep_alive && r.has_head());
        r.reset();
        assert!(r.feed(b"HTTP/1.1 200 OK\r\n\r\n", &mut |_| {}).is_err());
        r.reset();
        assert!(r.feed(b"RTSP/1.0 200 OK\r\n\r\n", &mut |_| {}).is_err());
        r.reset();
        let huge = vec![b'a'; MAX_HEAD + 10];
        assert!(r.feed(&huge, &mut |_| {}).is_err());
    }

    const TS: &str = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n\
#EXT-X-MEDIA-SEQUENCE:7\n#EXT-X-PROGRAM-DATE-TIME:2026-01-01T00:00:00.000Z\n\
#EXTINF:2.000,\nx/a-7.ts\n#EXTINF:1.960,\r\nx/a-8.ts\r\n#EXTINF:2.04,title\nhttp://h:1/abs/a-9.ts\n";

    #[test]
    fn ts_playlist() {
        let mut p = Playlist::default();
        p.parse(TS.as_bytes()).unwrap();
        assert_eq!((p.target_duration_ms, p.media_sequence), (2000, 7));
        let t = TS.as_bytes();
        let got: Vec<(u64, u64, &[u8])> = p
            .segments
            .iter()
            .map(|s| (s.msn, s.duration_ms, &t[s.uri.clone()]))
            .collect();
        assert_eq!(
            got,
            vec![
                (7, 2000, &b"x/a-7.ts"[..]),
                (8, 1960, b"x/a-8.ts"),
                (9, 2040, b"http://h:1/abs/a-9.ts")
            ]
        );
        assert!(p.map.is_none() && p.hint.is_none() && p.parts.is_empty() && !p.ended);
        assert_eq!(p.next_msn(), 10);
        // Reparse reuses the vectors and resets state.
        p.parse(b"#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXT-X-ENDLIST\n")
            .unwrap();
        assert!(p.segments.is_empty() && p.ended && p.media_sequence == 0);
        assert!(p.parse(b"nope\n").is_err());
        assert!(p.parse(b"#EXTM3U\nseg.ts\n").is_err());
    }

    const LL: &str = "#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:2\n\
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.002,HOLD-BACK=6.000\n\
#EXT-X-PART-INF:PART-TARGET=0.334\n#EXT-X-MEDIA-SEQUENCE:41\n\
#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP:URI=\"t-init.mp4\"\n\
#EXTINF:2.000,\nt-41.m4s\n\
#EXT-X-PROGRAM-DATE-TIME:2026-01-01T00:00:02.000Z\n\
#EXT-X-PART:DURATION=1.000,URI=\"t-42.0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=1.000,URI=\"t-42.1.m4s\"\n#EXTINF:2.000,\nt-42.m4s\n\
#EXT-X-PART:DURATION=0.334,URI=\"t-43.0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=0.333,URI=\"t-43.1.m4s\"\n\
#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"t-43.2.m4s\"\n";

    #[test]
    fn ll_hls_playlist() {
        let mut p = Playlist::default();
        let t = LL.as_bytes();
        p.parse(t).unwrap();
        assert_eq!(p.part_target_ms, Some(334));
        assert!(p.can_block_reload);
        assert_eq!(&t[p.map.clone().unwrap()], b"t-init.mp4");
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.next_msn(), 43);
        let parts: Vec<(Pos, u64, bool, &[u8])> = p
            .parts
            .iter()
            .map(|x| (x.pos, x.duration_ms, x.independent, &t[x.uri.clone()]))
            .collect();
        assert_eq!(
            parts,
            vec![
                ((42, 0), 1000, true, &b"t-42.0.m4s"[..]),
                ((42, 1), 1000, false, b"t-42.1.m4s"),
                ((43, 0), 334, true, b"t-43.0.m4s"),
                ((43, 1), 333, false, b"t-43.1.m4s"),
            ]
        );
        let (pos, uri) = p.hint.clone().unwrap();
        assert_eq!((pos, &t[uri]), ((43, 2), &b"t-43.2.m4s"[..]));
        assert_eq!(p.live_edge_part(), Some((43, 0)));
        assert_eq!(p.after((42, 1)), Some((43, 0)));
        assert_eq!(p.after((43, 1)), Some((43, 2)));
        assert_eq!(p.after((40, 0)), Some((42, 0)));
        assert_eq!(p.part((43, 1)).map(|x| x.duration_ms), Some(333));
        // A hint right after a complete segment is part 0 of the next one.
        let closed = LL.replace(
            "#EXT-X-PART:DURATION=0.334,URI=\"t-43.0.m4s\",INDEPENDENT=YES\n\
#EXT-X-PART:DURATION=0.333,URI=\"t-43.1.m4s\"\n",
            "",
        );
        p.parse(closed.as_bytes()).unwrap();
        assert_eq!(p.hint.as_ref().map(|h| h.0), Some((43, 0)));
        assert_eq!(p.live_edge_part(), Some((42, 0)));
    }

    #[test]
    fn targets() {
        let mut s = String::new();
        push_target(&mut s, "/live/x.m3u8?token=1", "x/a-7.ts");
        assert_eq!(s, "/live/x/a-7.ts");
        s.clear();
        push_target(&mut s, "/live/x/index.m3u8", "t-1.2.m4s");
        assert_eq!(s, "/live/x/t-1.2.m4s");
        s.clear();
        push_target(&mut s, "/a/b.m3u8", "/hls/c.ts");
        assert_eq!(s, "/hls/c.ts");
        s.clear();
        push_target(&mut s, "/a/b.m3u8", "http://h:1/abs/a-9.ts");
        assert_eq!(s, "/abs/a-9.ts");
    }
}
