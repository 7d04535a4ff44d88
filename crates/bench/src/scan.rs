//! Sans-IO scanners for the players' data path: FLV tags, WebSocket frames and RTMP
//! chunks are recognised in the bytes as they arrive, without copying media.
//!
//! Why: the load generator shares the machine with the server it measures. A player
//! needs, per media message, only its type, timestamp, length and first two body bytes
//! (to tell a keyframe), so the scanners keep a few bytes of state and skip bodies.
//! The bytes themselves are read into one buffer per thread and never kept.
//!
//! # Invariants
//! - `feed` accepts any split of the stream and yields the same events.
//! - Memory does not grow with what the peer sends: only RTMP control and command
//!   messages are reassembled, each up to [`MAX_CONTROL_LEN`].

use crate::stamp::HEAD_LEN;
use std::fmt;

/// Largest RTMP non-media message we reassemble (commands, control, `onMetaData`): a
/// metadata object with an embedded thumbnail is tens of KiB; more is a peer making us buffer.
pub(crate) const MAX_CONTROL_LEN: usize = 1 << 20;
/// Chunk streams a server may open towards one player (as `sluice_rtmp`'s reader).
const MAX_CHUNK_STREAMS: usize = 64;

/// Why a scanner gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanError {
    /// The bytes are not what the protocol allows.
    Malformed(&'static str),
    /// The peer closed the stream in-band (WebSocket close frame).
    Closed,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::Malformed(what) => write!(f, "malformed {what}"),
            ScanError::Closed => f.write_str("closed by the server"),
        }
    }
}

/// One media (or script) message: what a figure needs of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Media {
    /// FLV tag type: 8 audio, 9 video, 18 script.
    pub tag_type: u8,
    /// Timestamp in ms.
    pub ts_ms: u32,
    /// Body length in bytes.
    pub len: u32,
    /// The first body bytes (zero where the body is shorter): the FLV audio/video
    /// header, and for video the first NAL unit, where the bench publisher's wall-clock
    /// stamp is (`crate::stamp`).
    pub head: [u8; HEAD_LEN],
}

impl Media {
    /// A coded video frame, not a sequence header (legacy or Enhanced RTMP header);
    /// the same rule as `sluice_bench::Tag::is_video_frame`.
    pub(crate) fn is_video_frame(&self) -> bool {
        if self.tag_type != 9 || self.len == 0 {
            return false;
        }
        let (b0, b1) = (self.head[0], self.head[1]);
        if b0 & 0x80 != 0 {
            matches!(b0 & 0x0f, 1 | 3)
        } else {
            self.len >= 2 && b1 == 1
        }
    }

    /// A video keyframe (not a sequence header).
    pub(crate) fn is_keyframe(&self) -> bool {
        let b0 = self.head[0];
        let key = if b0 & 0x80 != 0 {
            (b0 >> 4) & 0x07 == 1
        } else {
            b0 >> 4 == 1
        };
        key && self.is_video_frame()
    }

    /// A coded audio frame (not an AAC sequence header).
    pub(crate) fn is_audio_frame(&self) -> bool {
        self.tag_type == 8 && self.len > 0 && !(self.head[0] >> 4 == 10 && self.head[1] == 0)
    }
}

fn u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Moves up to `want - have` bytes from the front of `data` into `acc[have..want]`.
fn fill(acc: &mut [u8], have: &mut usize, want: usize, data: &mut &[u8]) -> bool {
    let take = want.saturating_sub(*have).min(data.len());
    acc[*have..*have + take].copy_from_slice(&data[..take]);
    *have += take;
    *data = &data[take..];
    *have >= want
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlvState {
    ExpectFileHeader,
    /// Padding after the file header, or a `PreviousTagSize`.
    Skip(u32),
    ExpectTagHeader,
    Body(u32),
}

/// Finds FLV tags in a byte stream (a file, or the tags of an RTMP aggregate).
#[derive(Debug, Clone)]
pub(crate) struct FlvScanner {
    state: FlvState,
    acc: [u8; 11],
    have: usize,
    cur: Media,
}

impl FlvScanner {
    /// A scanner expecting the FLV file header.
    pub(crate) fn new() -> Self {
        Self::starting(FlvState::ExpectFileHeader)
    }

    /// A scanner expecting tags at once (an RTMP aggregate message's body).
    pub(crate) fn tags_only() -> Self {
        Self::starting(FlvState::ExpectTagHeader)
    }

    fn starting(state: FlvState) -> Self {
        FlvScanner {
            state,
            acc: [0; 11],
            have: 0,
            cur: Media {
                tag_type: 0,
                ts_ms: 0,
                len: 0,
                head: [0; HEAD_LEN],
            },
        }
    }

    /// Scans `data`, calling `on` for each complete tag.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        on: &mut impl FnMut(Media),
    ) -> Result<(), ScanError> {
        while !data.is_empty() {
            match self.state {
                FlvState::ExpectFileHeader => {
                    if !fill(&mut self.acc, &mut self.have, 9, &mut data) {
                        return Ok(());
                    }
                    self.have = 0;
                    if &self.acc[..3] != b"FLV" {
                        return Err(ScanError::Malformed("FLV signature"));
                    }
                    let offset =
                        u32::from_be_bytes([self.acc[5], self.acc[6], self.acc[7], self.acc[8]]);
                    if !(9..=1 << 16).contains(&offset) {
                        return Err(ScanError::Malformed("FLV DataOffset"));
                    }
                    // Padding, then PreviousTagSize0.
                    self.state = FlvState::Skip(offset - 9 + 4);
                }
                FlvState::Skip(n) => {
                    let take = (n as usize).min(data.len());
                    data = &data[take..];
                    let left = n - take as u32;
                    self.state = if left == 0 {
                        FlvState::ExpectTagHeader
                    } else {
                        FlvState::Skip(left)
                    };
                }
                FlvState::ExpectTagHeader => {
                    if !fill(&mut self.acc, &mut self.have, 11, &mut data) {
                        return Ok(());
                    }
                    self.have = 0;
                    let a = &self.acc;
                    let tag_type = a[0] & 0x1f;
                    if !matches!(tag_type, 8 | 9 | 18) {
                        return Err(ScanError::Malformed("FLV tag type"));
                    }
                    self.cur = Media {
                        tag_type,
                        ts_ms: u24(&a[4..7]) | (u32::from(a[7]) << 24),
                        len: u24(&a[1..4]),
                        head: [0; HEAD_LEN],
                    };
                    self.state = FlvState::Body(self.cur.len);
                    if self.cur.len == 0 {
                        on(self.cur);
                        self.state = FlvState::Skip(4);
                    }
                }
                FlvState::Body(left) => {
                    let take = (left as usize).min(data.len());
                    let offset = (self.cur.len - left) as usize;
                    for (i, &b) in data.iter().take(take).enumerate() {
                        match self.cur.head.get_mut(offset + i) {
                            Some(h) => *h = b,
                            None => break,
                        }
                    }
                    data = &data[take..];
                    let left = left - take as u32;
                    if left == 0 {
                        on(self.cur);
                        self.state = FlvState::Skip(4);
                    } else {
                        self.state = FlvState::Body(left);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Takes the payloads of a server's WebSocket frames out of the byte stream.
#[derive(Debug, Clone)]
pub(crate) struct WsDeframer {
    acc: [u8; 10],
    have: usize,
    /// Payload bytes left in the current frame; `None` while reading a header.
    left: Option<u64>,
    data_frame: bool,
}

impl WsDeframer {
    pub(crate) fn new() -> Self {
        WsDeframer {
            acc: [0; 10],
            have: 0,
            left: None,
            data_frame: false,
        }
    }

    /// Scans `data`, calling `on` with each piece of binary (or continuation) payload.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        on: &mut impl FnMut(&[u8]) -> Result<(), ScanError>,
    ) -> Result<(), ScanError> {
        while !data.is_empty() {
            match self.left {
                None => {
                    if !fill(&mut self.acc, &mut self.have, 2, &mut data) {
                        return Ok(());
                    }
                    let (b0, b1) = (self.acc[0], self.acc[1]);
                    if b1 & 0x80 != 0 {
                        return Err(ScanError::Malformed("masked server frame"));
                    }
                    let want = match b1 & 0x7f {
                        126 => 4,
                        127 => 10,
                        _ => 2,
                    };
                    if !fill(&mut self.acc, &mut self.have, want, &mut data) {
                        return Ok(());
                    }
                    self.have = 0;
                    let len = match want {
                        4 => u64::from(u16::from_be_bytes([self.acc[2], self.acc[3]])),
                        10 => u64::from_be_bytes([
                            self.acc[2],
                            self.acc[3],
                            self.acc[4],
                            self.acc[5],
                            self.acc[6],
                            self.acc[7],
                            self.acc[8],
                            self.acc[9],
                        ]),
                        _ => u64::from(b1 & 0x7f),
                    };
                    match b0 & 0x0f {
                        8 => return Err(ScanError::Closed),
                        op => self.data_frame = matches!(op, 0 | 2),
                    }
                    self.left = Some(len);
                    if len == 0 {
                        self.left = None;
                    }
                }
                Some(left) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(data.len());
                    if self.data_frame {
                        on(&data[..take])?;
                    }
                    data = &data[take..];
                    let left = left - take as u64;
                    self.left = (left > 0).then_some(left);
                }
            }
        }
        Ok(())
    }
}

/// What the RTMP chunk scanner found.
#[derive(Debug)]
pub(crate) enum ChunkEvent<'a> {
    /// An audio or video message, or a tag of an aggregate.
    Media(Media),
    /// Any other message, reassembled.
    Message { msg_type: u8, body: &'a [u8] },
}

#[derive(Debug)]
struct ChunkStream {
    csid: u32,
    ts: u32,
    delta: u32,
    len: u32,
    msg_type: u8,
    extended: bool,
    /// Bytes of the current message still to come; 0 when none is in progress.
    left: u32,
    head: [u8; HEAD_LEN],
    got: u32,
    /// A command or control message being reassembled (capacity reused).
    body: Vec<u8>,
}

impl Default for ChunkStream {
    fn default() -> Self {
        ChunkStream {
            csid: 0,
            ts: 0,
            delta: 0,
            len: 0,
            msg_type: 0,
            extended: false,
            left: 0,
            head: [0; HEAD_LEN],
            got: 0,
            body: Vec::new(),
        }
    }
}

/// Finds RTMP messages in the chunk stream that follows the handshake, reassembling
/// only non-media messages; Set Chunk Size and Abort are applied here.
#[derive(Debug)]
pub(crate) struct ChunkScanner {
    chunk_size: u32,
    streams: Vec<ChunkStream>,
    acc: [u8; 18],
    have: usize,
    /// (stream index, bytes left in this chunk) while in a chunk body.
    body: Option<(usize, u32)>,
    aggregate: FlvScanner,
}

fn is_media(msg_type: u8) -> bool {
    matches!(msg_type, 8 | 9 | 22)
}

impl ChunkScanner {
    pub(crate) fn new() -> Self {
        ChunkScanner {
            chunk_size: 128,
            streams: Vec::new(),
            acc: [0; 18],
            have: 0,
            body: None,
            aggregate: FlvScanner::tags_only(),
        }
    }

    /// Header bytes needed given the bytes gathered so far.
    fn header_len(&self) -> usize {
        if self.have == 0 {
            return 1;
        }
        let b0 = self.acc[0];
        let basic = match b0 & 0x3f {
            0 => 2,
            1 => 3,
            _ => 1,
        };
        if self.have < basic {
            return basic;
        }
        let fmt = usize::from(b0 >> 6);
        let fixed = basic + [11, 7, 3, 0][fmt];
        if self.have < fixed {
            return fixed;
        }
        let extended = if fmt <= 2 {
            u24(&self.acc[basic..basic + 3]) == 0xff_ffff
        } else {
            let csid = self.csid(basic);
            self.streams.iter().any(|s| s.csid == csid && s.extended)
        };
        fixed + if extended { 4 } else { 0 }
    }

    fn csid(&self, basic: usize) -> u32 {
        match basic {
            2 => 64 + u32::from(self.acc[1]),
            3 => 64 + u32::from(self.acc[1]) + (u32::from(self.acc[2]) << 8),
            _ => u32::from(self.acc[0] & 0x3f),
        }
    }

    /// Scans `data`, calling `on` for each message.
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        on: &mut impl FnMut(ChunkEvent<'_>),
    ) -> Result<(), ScanError> {
        while !data.is_empty() {
            let Some((idx, chunk_left)) = self.body else {
                loop {
                    let want = self.header_len();
                    if !fill(&mut self.acc, &mut self.have, want, &mut data) {
                        return Ok(());
                    }
                    if self.header_len() == want {
                        break;
                    }
                }
                self.start_chunk()?;
                if let Some((idx, _)) = self.body {
                    if self.streams[idx].len == 0 {
                        self.finish(idx, on)?;
                    }
                }
                continue;
            };
            let s = &mut self.streams[idx];
            let take = (chunk_left.min(s.left) as usize).min(data.len());
            let (part, rest) = data.split_at(take);
            data = rest;
            if is_media(s.msg_type) {
                if s.msg_type == 22 {
                    self.aggregate
                        .feed(part, &mut |m| on(ChunkEvent::Media(m)))?;
                } else {
                    for &b in part.iter().take(HEAD_LEN.saturating_sub(s.got as usize)) {
                        s.head[s.got as usize] = b;
                        s.got += 1;
                    }
                }
            } else {
                if s.body.len() + take > MAX_CONTROL_LEN {
                    return Err(ScanError::Malformed("oversized RTMP control message"));
                }
                s.body.extend_from_slice(part);
            }
            let s = &mut self.streams[idx];
            s.left -= take as u32;
            let chunk_left = chunk_left - take as u32;
            self.body = (chunk_left > 0 && s.left > 0).then_some((idx, chunk_left));
            if s.left == 0 {
                self.body = None;
                self.finish(idx, on)?;
            }
        }
        Ok(())
    }

    /// Applies the chunk header gathered in `acc`.
    fn start_chunk(&mut self) -> Result<(), ScanError> {
        let len = self.have;
        self.have = 0;
        let a = self.acc;
        let basic = match a[0] & 0x3f {
            0 => 2,
            1 => 3,
            _ => 1,
        };
        let fmt = a[0] >> 6;
        let csid = self.csid(basic);
        let idx = match self.streams.iter().position(|s| s.csid == csid) {
            Some(i) => i,
            None if fmt == 0 => {
                if self.streams.len() >= MAX_CHUNK_STREAMS {
                    return Err(ScanError::Malformed("too many RTMP chunk streams"));
                }
                self.streams.push(ChunkStream {
                    csid,
                    ..ChunkStream::default()
                });
                self.streams.len() - 1
            }
            None => return Err(ScanError::Malformed("RTMP chunk without a type-0 header")),
        };
        let s = &mut self.streams[idx];
        let m = &a[basic..];
        let extended_at = len
            .checked_sub(4)
            .filter(|_| len > basic + [11, 7, 3, 0][usize::from(fmt)]);
        let time = match (fmt <= 2, extended_at) {
            (true, Some(at)) => u32::from_be_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]),
            (true, None) => u24(&m[0..3]),
            _ => 0,
        };
        if fmt != 3 && s.left > 0 {
            return Err(ScanError::Malformed("RTMP header inside a message"));
        }
        if s.left == 0 {
            match fmt {
                0 => {
                    s.ts = time;
                    s.delta = 0;
                }
                1 | 2 => {
                    s.delta = time;
                    s.ts = s.ts.wrapping_add(time);
                }
                _ => s.ts = s.ts.wrapping_add(s.delta),
            }
            if fmt <= 1 {
                s.len = u24(&m[3..6]);
                s.msg_type = m[6];
            }
            if fmt <= 2 {
                s.extended = extended_at.is_some();
            }
            s.left = s.len;
            s.got = 0;
            s.head = [0; HEAD_LEN];
            s.body.clear();
            if s.msg_type == 22 {
                self.aggregate = FlvScanner::tags_only();
            }
        }
        self.body = Some((idx, self.chunk_size));
        Ok(())
    }

    /// Delivers the complete message on stream `idx`.
    fn finish(&mut self, idx: usize, on: &mut impl FnMut(ChunkEvent<'_>)) -> Result<(), ScanError> {
        self.body = None;
        let s = &mut self.streams[idx];
        s.left = 0;
        match s.msg_type {
            8 | 9 => on(ChunkEvent::Media(Media {
                tag_type: s.msg_type,
                ts_ms: s.ts,
                len: s.len,
                head: s.head,
            })),
            22 => {}
            msg_type => {
                let word = s
                    .body
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                match (msg_type, word) {
                    (1, Some(size)) => {
                        let size = size & 0x7fff_ffff;
                        if size == 0 {
                            return Err(ScanError::Malformed("RTMP chunk size 0"));
                        }
                        self.chunk_size = size;
                    }
                    (2, Some(csid)) => {
                        if let Some(o) = self.streams.iter_mut().find(|o| o.csid == csid) {
                            o.left = 0;
                        }
                    }
                    _ => {}
                }
                on(ChunkEvent::Message {
                    msg_type,
                    body: &self.streams[idx].body,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn flv_stream() -> Vec<u8> {
        let mut out = BytesMut::new();
        sluice_media::flv::write_file_header(&mut out, true, true);
        sluice_media::flv::write_tag(&mut out, 18, 0, b"meta").unwrap();
        sluice_media::flv::write_tag(&mut out, 9, 0, &[0x17, 0, 0, 0, 0]).unwrap();
        sluice_media::flv::write_tag(&mut out, 9, 40, &[0x17, 1, 0, 0, 0, 9]).unwrap();
        sluice_media::flv::write_tag(&mut out, 8, 41, &[0xaf, 1, 7]).unwrap();
        sluice_media::flv::write_tag(&mut out, 9, 0x0100_0050, &[0x27, 1, 0, 0, 0, 9]).unwrap();
        out.to_vec()
    }

    fn scan_flv(bytes: &[u8], step: usize) -> Vec<Media> {
        let mut s = FlvScanner::new();
        let mut got = Vec::new();
        for piece in bytes.chunks(step) {
            s.feed(piece, &mut |m| got.push(m)).unwrap();
        }
        got
    }

    #[test]
    fn flv_tags_are_found_whatever_the_split() {
        let bytes = flv_stream();
        let whole = scan_flv(&bytes, bytes.len());
        assert_eq!(whole.len(), 5);
        assert_eq!(whole[1].head[..2], [0x17, 0]);
        assert!(!whole[1].is_video_frame());
        assert!(whole[2].is_keyframe());
        assert_eq!(whole[2].ts_ms, 40);
        assert!(whole[3].is_audio_frame());
        assert!(whole[4].is_video_frame() && !whole[4].is_keyframe());
        assert_eq!(whole[4].ts_ms, 0x0100_0050);
        for step in 1..8 {
            assert_eq!(scan_flv(&bytes, step), whole, "split every {step}");
        }
    }

    #[test]
    fn flv_garbage_is_an_error() {
        let mut s = FlvScanner::new();
        assert!(s.feed(b"HTTP/1.1 200 OK\r\n", &mut |_| {}).is_err());
    }

    #[test]
    fn websocket_payloads_reach_the_flv_scanner() {
        let flv = flv_stream();
        let mut framed = Vec::new();
        // One small frame, one with a 16-bit length, a ping in between, one 64-bit.
        let (a, rest) = flv.split_at(10);
        let (b, c) = rest.split_at(30);
        framed.extend_from_slice(&[0x82, a.len() as u8]);
        framed.extend_from_slice(a);
        framed.extend_from_slice(&[0x89, 2, b'h', b'i']);
        framed.extend_from_slice(&[0x02, 126, 0, b.len() as u8]);
        framed.extend_from_slice(b);
        framed.extend_from_slice(&[0x80, 127, 0, 0, 0, 0, 0, 0, 0, c.len() as u8]);
        framed.extend_from_slice(c);
        for step in [1, 3, framed.len()] {
            let mut ws = WsDeframer::new();
            let mut flv = FlvScanner::new();
            let mut got = Vec::new();
            for piece in framed.chunks(step) {
                ws.feed(piece, &mut |p| flv.feed(p, &mut |m| got.push(m)))
                    .unwrap();
            }
            assert_eq!(got, scan_flv(&flv_stream(), 1000), "split every {step}");
        }
        let mut ws = WsDeframer::new();
        assert_eq!(ws.feed(&[0x88, 0], &mut |_| Ok(())), Err(ScanError::Closed));
    }

    fn chunked() -> Vec<u8> {
        let mut out = BytesMut::new();
        let w = sluice_rtmp::write_message_chunks;
        // Command on csid 3 with chunk size 128, then Set Chunk Size 4096.
        w(&mut out, 3, 0, 20, 0, &[7u8; 200], 128);
        w(&mut out, 2, 0, 1, 0, &4096u32.to_be_bytes(), 128);
        w(&mut out, 6, 1000, 9, 1, &[0x17, 1, 2, 3], 4096);
        w(&mut out, 4, 1010, 8, 1, &[0xaf, 1, 5], 4096);
        // Header compression: type 1 (new length), type 2 (delta), type 3 (same delta).
        out.extend_from_slice(&[0x46, 0, 0, 40, 0, 0, 5, 9, 0x27, 1, 0, 0, 0]);
        out.extend_from_slice(&[0x86, 0, 0, 40, 0x27, 1, 0, 0, 0]);
        out.extend_from_slice(&[0xc6, 0x27, 1, 0, 0, 0]);
        // A large video message over 2 chunks, with an extended timestamp.
        w(&mut out, 6, 0x0100_0000, 9, 1, &vec![0x17; 5000], 4096);
        out.to_vec()
    }

    #[derive(Debug, PartialEq)]
    enum Seen {
        Media(u8, u32, u32),
        Msg(u8, usize),
    }

    fn scan_chunks(bytes: &[u8], step: usize) -> Vec<Seen> {
        let mut s = ChunkScanner::new();
        let mut got = Vec::new();
        for piece in bytes.chunks(step) {
            s.feed(piece, &mut |e| {
                got.push(match e {
                    ChunkEvent::Media(m) => Seen::Media(m.tag_type, m.ts_ms, m.len),
                    ChunkEvent::Message { msg_type, body, .. } => Seen::Msg(msg_type, body.len()),
                })
            })
            .unwrap();
        }
        got
    }

    #[test]
    fn rtmp_messages_are_found_whatever_the_split() {
        let bytes = chunked();
        let whole = scan_chunks(&bytes, bytes.len());
        assert_eq!(
            whole,
            vec![
                Seen::Msg(20, 200),
                Seen::Msg(1, 4),
                Seen::Media(9, 1000, 4),
                Seen::Media(8, 1010, 3),
                Seen::Media(9, 1040, 5),
                Seen::Media(9, 1080, 5),
                Seen::Media(9, 1120, 5),
                Seen::Media(9, 0x0100_0000, 5000),
            ]
        );
        for step in [1, 2, 5, 13, 100] {
            assert_eq!(scan_chunks(&bytes, step), whole, "split every {step}");
        }
    }

    #[test]
    fn rtmp_aggregate_tags_are_media() {
        let mut body = BytesMut::new();
        sluice_media::flv::write_tag(&mut body, 9, 80, &[0x17, 1, 0]).unwrap();
        sluice_media::flv::write_tag(&mut body, 8, 90, &[0xaf, 1]).unwrap();
        let mut out = BytesMut::new();
        sluice_rtmp::write_message_chunks(&mut out, 6, 80, 22, 1, &body, 128);
        let got = scan_chunks(&out, 7);
        assert_eq!(got, vec![Seen::Media(9, 80, 3), Seen::Media(8, 90, 2)]);
    }
}
