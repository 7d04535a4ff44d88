//! A fragmented MP4 file's span from its boxes: the time of its first fragment and the
//! end of its last complete one, in UTC ms.
//!
//! Why a pull parser: a recording holds an hour of media; to find its span the reader
//! needs the box headers, the `moov` (timescales), the `prft` boxes and each `moof`
//! (decode time and durations), never an `mdat`. [`Fmp4Scan::next_read`] says which
//! bytes it needs next, the caller reads them (`pread`) and hands them to
//! [`Fmp4Scan::feed`]: no I/O here, and no allocation sized by the file beyond
//! [`MAX_MOOV_BYTES`] and [`MAX_MOOF_BYTES`].
//!
//! Wall-clock times come from the `prft` box before a fragment (the latest one seen
//! maps media time to UTC), else from the file name's second (`name_ms`: the first
//! fragment starts then) plus `tfdt` and sample durations.
//!
//! # Invariants
//! - A fragment counts when its `moof` and the `mdat` after it are whole within the
//!   file's length: a file cut by a crash yields the span of its complete fragments.
//! - Each step moves forward by at least one box header (8 bytes), so a scan of a file
//!   of `n` bytes takes at most `n / 8` steps.

use crate::prft::Prft;
use thiserror::Error;

/// The largest `moov` read (codec configurations of a few tracks).
pub const MAX_MOOV_BYTES: u64 = 4 << 20;
/// The largest `moof` read (16 bytes per sample: a quarter of a million samples).
pub const MAX_MOOF_BYTES: u64 = 4 << 20;
/// Tracks kept from a `moov`.
const MAX_TRACKS: usize = 32;

/// Why a file's boxes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScanError {
    /// A box or field is cut short or inconsistent.
    #[error("malformed {0} box")]
    Malformed(&'static str),
    /// A box larger than the parser reads.
    #[error("{kind} box of {size} bytes is larger than the limit")]
    TooLarge {
        /// Which box.
        kind: &'static str,
        /// Its size.
        size: u64,
    },
    /// A fragment names a track the `moov` does not describe (or there is no `moov`).
    #[error("fragment of an unknown track {0}")]
    UnknownTrack(u32),
}

/// A read the scan needs: `len` bytes at `offset` (fewer at the end of the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// From the start of the file.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
}

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    /// UTC ms of the first complete fragment's start.
    pub start_ms: i64,
    /// UTC ms of the end of the last complete fragment.
    pub end_ms: i64,
    /// Complete fragments.
    pub fragments: u32,
    /// Bytes up to the end of the last complete fragment.
    pub complete_bytes: u64,
    /// Whether the times came from `prft` boxes.
    pub from_prft: bool,
}

/// One track's timing from the `moov`.
#[derive(Debug, Clone, Copy)]
struct TrackInfo {
    id: u32,
    timescale: u32,
    /// `trex` default sample duration.
    default_duration: u32,
}

/// The timing of one `traf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafTime {
    /// Its track.
    pub track_id: u32,
    /// `tfdt`: decode time of its first sample (track timescale).
    pub tfdt: u64,
    /// Sum of its sample durations when the fragment says them (`trun` or `tfhd`);
    /// `None` when they are the `trex` defaults.
    pub duration: Option<u64>,
    /// Samples in its runs.
    pub samples: u64,
}

#[derive(Debug, Clone, Copy)]
enum Want {
    Header,
    Body { kind: [u8; 4], start: u64, len: u64 },
    Done,
}

/// A fragment read, in media ms, with the UTC offset known when it was read.
#[derive(Debug, Clone, Copy)]
struct Frag {
    start_ms: i64,
    end_ms: i64,
    /// UTC ms minus media ms, from the latest `prft`.
    offset: Option<i64>,
}

/// The scan of one file; see the module docs for the call contract.
#[derive(Debug)]
pub struct Fmp4Scan {
    len: u64,
    at: u64,
    want: Want,
    tracks: Vec<TrackInfo>,
    /// The reference track: the `prft`'s, else the first fragment's first.
    reference: Option<u32>,
    /// UTC ms minus media ms, from the latest `prft`.
    offset: Option<i64>,
    /// A `moof` read, waiting for its `mdat`.
    pending: Option<Frag>,
    first: Option<Frag>,
    last: Option<Frag>,
    fragments: u32,
    complete_bytes: u64,
}

impl Fmp4Scan {
    /// A scan of a file of `len` bytes.
    pub fn new(len: u64) -> Fmp4Scan {
        Fmp4Scan {
            len,
            at: 0,
            want: Want::Header,
            tracks: Vec::new(),
            reference: None,
            offset: None,
            pending: None,
            first: None,
            last: None,
            fragments: 0,
            complete_bytes: 0,
        }
    }

    /// The bytes to read next, or `None` when the scan is over.
    pub fn next_read(&self) -> Option<Read> {
        match self.want {
            Want::Header => {
                let left = self.len.saturating_sub(self.at);
                (left >= 8).then(|| Read {
                    offset: self.at,
                    len: left.min(16) as usize,
                })
            }
            Want::Body { start, len, .. } => Some(Read {
                offset: start,
                len: len as usize,
            }),
            Want::Done => None,
        }
    }

    /// The bytes [`Fmp4Scan::next_read`] asked for (fewer if the file was shorter). On
    /// error the scan is over; what it found so far stays in [`Fmp4Scan::scanned`].
    pub fn feed(&mut self, data: &[u8]) -> Result<(), ScanError> {
        let result = self.step(data);
        if result.is_err() {
            self.want = Want::Done;
        }
        result
    }

    fn step(&mut self, data: &[u8]) -> Result<(), ScanError> {
        match self.want {
            Want::Done => Ok(()),
            Want::Header => self.header(data),
            Want::Body { kind, start, len } => {
                let body = data.get(..len as usize);
                let Some(body) = body else {
                    self.want = Want::Done;
                    return Ok(());
                };
                self.at = start + len;
                self.want = Want::Header;
                match &kind {
                    b"moov" => self.moov(body),
                    b"moof" => self.moof(body),
                    b"prft" => self.prft(body),
                    _ => Ok(()),
                }
            }
        }
    }

    fn header(&mut self, data: &[u8]) -> Result<(), ScanError> {
        let left = self.len.saturating_sub(self.at);
        let Some((kind, header_len, size)) = box_header(data, left)? else {
            self.want = Want::Done;
            return Ok(());
        };
        let end = self.at.saturating_add(size);
        if end > self.len {
            // Cut by a crash: nothing after this box is complete.
            self.want = Want::Done;
            return Ok(());
        }
        let body = size - header_len;
        let start = self.at + header_len;
        let read = |kind: [u8; 4], name: &'static str, limit: u64| {
            if body > limit {
                Err(ScanError::TooLarge { kind: name, size })
            } else {
                Ok(Want::Body {
                    kind,
                    start,
                    len: body,
                })
            }
        };
        match &kind {
            b"moov" => self.want = read(kind, "moov", MAX_MOOV_BYTES)?,
            b"moof" => self.want = read(kind, "moof", MAX_MOOF_BYTES)?,
            b"prft" if body <= 64 => self.want = read(kind, "prft", 64)?,
            b"mdat" => {
                if let Some(f) = self.pending.take() {
                    self.first.get_or_insert(f);
                    self.last = Some(f);
                    self.fragments = self.fragments.saturating_add(1);
                    self.complete_bytes = end;
                }
                self.at = end;
            }
            _ => self.at = end,
        }
        Ok(())
    }

    fn moov(&mut self, body: &[u8]) -> Result<(), ScanError> {
        let mut defaults = Vec::new();
        for child in children(body) {
            let (kind, b) = child?;
            match &kind {
                b"trak" if self.tracks.len() < MAX_TRACKS => {
                    if let Some(t) = trak(b)? {
                        self.tracks.push(t);
                    }
                }
                b"mvex" => {
                    for c in children(b) {
                        let (kind, b) = c?;
                        if &kind == b"trex" {
                            let id = be32(b, 4).ok_or(ScanError::Malformed("trex"))?;
                            let d = be32(b, 12).ok_or(ScanError::Malformed("trex"))?;
                            defaults.push((id, d));
                        }
                    }
                }
                _ => {}
            }
        }
        for (id, d) in defaults {
            if let Some(t) = self.tracks.iter_mut().find(|t| t.id == id) {
                t.default_duration = d;
            }
        }
        Ok(())
    }

    fn prft(&mut self, body: &[u8]) -> Result<(), ScanError> {
        let p = Prft::parse(body)?;
        let t = self.track(p.track_id)?;
        let media_ms = ticks_ms(p.media_time, t.timescale);
        self.offset = Some(p.unix_ms().saturating_sub(media_ms));
        self.reference = Some(p.track_id);
        Ok(())
    }

    fn moof(&mut self, body: &[u8]) -> Result<(), ScanError> {
        let trafs = parse_moof(body)?;
        if self.reference.is_none() {
            self.reference = trafs.first().map(|t| t.track_id);
        }
        let Some(traf) = trafs
            .iter()
            .find(|t| Some(t.track_id) == self.reference)
            .or(trafs.first())
        else {
            return Ok(());
        };
        let t = self.track(traf.track_id)?;
        let duration = traf
            .duration
            .unwrap_or_else(|| traf.samples.saturating_mul(u64::from(t.default_duration)));
        self.pending = Some(Frag {
            start_ms: ticks_ms(traf.tfdt, t.timescale),
            end_ms: ticks_ms(traf.tfdt.saturating_add(duration), t.timescale),
            offset: self.offset,
        });
        Ok(())
    }

    fn track(&self, id: u32) -> Result<TrackInfo, ScanError> {
        self.tracks
            .iter()
            .find(|t| t.id == id)
            .copied()
            .ok_or(ScanError::UnknownTrack(id))
    }

    /// The span of the complete fragments so far (`None` without any), the first
    /// starting at `name_ms` when there is no `prft` to say.
    pub fn scanned(&self, name_ms: i64) -> Option<Scanned> {
        let (first, last) = (self.first?, self.last?);
        let fallback = name_ms.saturating_sub(first.start_ms);
        Some(Scanned {
            start_ms: first
                .start_ms
                .saturating_add(first.offset.unwrap_or(fallback)),
            end_ms: last
                .end_ms
                .saturating_add(last.offset.or(first.offset).unwrap_or(fallback)),
            fragments: self.fragments,
            complete_bytes: self.complete_bytes,
            from_prft: first.offset.is_some(),
        })
    }
}

/// Media ticks to ms.
fn ticks_ms(ticks: u64, timescale: u32) -> i64 {
    let ms = u128::from(ticks) * 1000 / u128::from(timescale.max(1));
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A box header at the start of `data`, of a box with at most `left` bytes to the end
/// of its parent: (type, header length, size). `None` when fewer than 8 bytes remain.
fn box_header(data: &[u8], left: u64) -> Result<Option<([u8; 4], u64, u64)>, ScanError> {
    let (Some(size), Some(kind)) = (be32(data, 0), data.get(4..8)) else {
        return Ok(None);
    };
    let mut kind4 = [0; 4];
    kind4.copy_from_slice(kind);
    let (header, size) = match size {
        0 => (8, left),
        1 => (16, be64(data, 8).ok_or(ScanError::Malformed("largesize"))?),
        n => (8, u64::from(n)),
    };
    if size < header {
        return Err(ScanError::Malformed("box size"));
    }
    Ok(Some((kind4, header, size)))
}

/// The child boxes of a box's content: (type, content).
fn children(body: &[u8]) -> impl Iterator<Item = Result<([u8; 4], &[u8]), ScanError>> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.len() < 8 {
            return None;
        }
        let parsed = box_header(rest, rest.len() as u64).and_then(|h| {
            let (kind, header, size) = h.ok_or(ScanError::Malformed("box header"))?;
            let content = rest
                .get(header as usize..size as usize)
                .ok_or(ScanError::Malformed("box size"))?;
            rest = rest.get(size as usize..).unwrap_or_default();
            Ok((kind, content))
        });
        if parsed.is_err() {
            rest = &[];
        }
        Some(parsed)
    })
}

/// Track id and timescale of a `trak` (`None` without `tkhd` or `mdhd`).
fn trak(body: &[u8]) -> Result<Option<TrackInfo>, ScanError> {
    let (mut id, mut timescale) = (None, None);
    for child in children(body) {
        let (kind, b) = child?;
        match &kind {
            b"tkhd" => {
                let at = if b.first() == Some(&1) { 20 } else { 12 };
                id = Some(be32(b, at).ok_or(ScanError::Malformed("tkhd"))?);
            }
            b"mdia" => {
                for c in children(b) {
                    let (kind, b) = c?;
                    if &kind == b"mdhd" {
                        let at = if b.first() == Some(&1) { 20 } else { 12 };
                        let ts = be32(b, at).ok_or(ScanError::Malformed("mdhd"))?;
                        timescale = Some(ts).filter(|&t| t > 0);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(id.zip(timescale).map(|(id, timescale)| TrackInfo {
        id,
        timescale,
        default_duration: 0,
    }))
}

/// Track ids and timescales of an init segment (`ftyp` + `moov`); empty without a
/// readable `moov`.
pub fn init_timescales(init: &[u8]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for child in children(init) {
        let Ok((kind, body)) = child else { break };
        if &kind != b"moov" {
            continue;
        }
        for c in children(body) {
            let Ok((kind, b)) = c else { break };
            if &kind == b"trak" && out.len() < MAX_TRACKS {
                if let Ok(Some(t)) = trak(b) {
                    out.push((t.id, t.timescale));
                }
            }
        }
    }
    out
}

/// The timing of the first `traf` of a fragment that starts with its `moof`.
pub fn first_traf(fragment: &[u8]) -> Option<TrafTime> {
    let (kind, body) = children(fragment).next()?.ok()?;
    if &kind != b"moof" {
        return None;
    }
    parse_moof(body).ok()?.into_iter().next()
}

/// The timing of each `traf` of a `moof`'s content.
pub fn parse_moof(body: &[u8]) -> Result<Vec<TrafTime>, ScanError> {
    let mut out = Vec::new();
    for child in children(body) {
        let (kind, b) = child?;
        if &kind == b"traf" && out.len() < MAX_TRACKS {
            out.push(traf(b)?);
        }
    }
    Ok(out)
}

fn traf(body: &[u8]) -> Result<TrafTime, ScanError> {
    let mut t = TrafTime {
        track_id: 0,
        tfdt: 0,
        duration: None,
        samples: 0,
    };
    let mut default_duration = None;
    let mut sum: Option<u64> = Some(0);
    for child in children(body) {
        let (kind, b) = child?;
        match &kind {
            b"tfhd" => {
                let bad = ScanError::Malformed("tfhd");
                let flags = be32(b, 0).ok_or(bad.clone())? & 0xff_ffff;
                t.track_id = be32(b, 4).ok_or(bad.clone())?;
                let mut at = 8;
                at += if flags & 0x1 != 0 { 8 } else { 0 };
                at += if flags & 0x2 != 0 { 4 } else { 0 };
                if flags & 0x8 != 0 {
                    default_duration = Some(be32(b, at).ok_or(bad)?);
                }
            }
            b"tfdt" => {
                t.tfdt = match b.first() {
                    Some(1) => be64(b, 4),
                    _ => be32(b, 4).map(u64::from),
                }
                .ok_or(ScanError::Malformed("tfdt"))?;
            }
            b"trun" => {
                let bad = ScanError::Malformed("trun");
                let flags = be32(b, 0).ok_or(bad.clone())? & 0xff_ffff;
                let count = be32(b, 4).ok_or(bad.clone())?;
                let mut at = 8usize;
                at += if flags & 0x1 != 0 { 4 } else { 0 };
                at += if flags & 0x4 != 0 { 4 } else { 0 };
                let per = [0x100, 0x200, 0x400, 0x800]
                    .iter()
                    .filter(|&&f| flags & f != 0)
                    .count()
                    * 4;
                // The samples must fit in the box: the count cannot make us loop longer.
                if (count as usize).saturating_mul(per) > b.len().saturating_sub(at) {
                    return Err(bad);
                }
                t.samples = t.samples.saturating_add(u64::from(count));
                if flags & 0x100 != 0 {
                    let mut d = 0u64;
                    for i in 0..count as usize {
                        d = d.saturating_add(u64::from(be32(b, at + i * per).ok_or(bad.clone())?));
                    }
                    sum = sum.map(|s| s.saturating_add(d));
                } else if let Some(dd) = default_duration {
                    sum = sum.map(|s| s.saturating_add(u64::from(count) * u64::from(dd)));
                } else {
                    sum = None;
                }
            }
            _ => {}
        }
    }
    t.duration = sum;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};

    fn bx(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut out = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
        out
    }

    fn full(kind: &[u8; 4], version: u8, flags: u32, body: &[u8]) -> Vec<u8> {
        let mut b = ((u32::from(version) << 24) | flags).to_be_bytes().to_vec();
        b.extend_from_slice(body);
        bx(kind, &b)
    }

    /// ftyp + moov with a 90 kHz video track 1 and a 48 kHz audio track 2.
    pub(crate) fn init() -> Vec<u8> {
        let trak = |id: u32, ts: u32| {
            let mut tkhd = vec![0; 8];
            tkhd.extend_from_slice(&id.to_be_bytes());
            tkhd.extend_from_slice(&[0; 12]);
            let mut mdhd = vec![0; 8];
            mdhd.extend_from_slice(&ts.to_be_bytes());
            mdhd.extend_from_slice(&[0; 8]);
            let mdia = bx(b"mdia", &full(b"mdhd", 0, 0, &mdhd));
            bx(b"trak", &[full(b"tkhd", 0, 3, &tkhd), mdia].concat())
        };
        let moov = bx(b"moov", &[trak(1, 90_000), trak(2, 48_000)].concat());
        [bx(b"ftyp", b"isom\0\0\0\0"), moov].concat()
    }

    /// A fragment: optional prft, moof with video (n samples of 3600 ticks from `tfdt`)
    /// and audio, then an mdat.
    pub(crate) fn fragment(tfdt: u64, n: u32, prft_ms: Option<i64>) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(ms) = prft_ms {
            let mut b = BytesMut::new();
            Prft::new(1, ms, tfdt).encode(&mut b);
            out.extend_from_slice(&b);
        }
        let traf = |id: u32, tfdt: u64, n: u32, dur: u32| {
            let tfhd = full(b"tfhd", 0, 0x02_0000, &id.to_be_bytes());
            let tfdt = full(b"tfdt", 1, 0, &tfdt.to_be_bytes());
            let mut trun = n.to_be_bytes().to_vec();
            trun.put_u32(0);
            for _ in 0..n {
                trun.put_u32(dur);
                trun.put_u32(10);
            }
            bx(
                b"traf",
                &[tfhd, tfdt, full(b"trun", 0, 0x301, &trun)].concat(),
            )
        };
        let moof = bx(
            b"moof",
            &[
                full(b"mfhd", 0, 0, &[0, 0, 0, 1]),
                traf(1, tfdt, n, 3600),
                traf(2, tfdt * 48 / 90, n, 1920),
            ]
            .concat(),
        );
        out.extend_from_slice(&moof);
        out.extend_from_slice(&bx(b"mdat", &vec![0; 10 * n as usize * 2]));
        out
    }

    fn scan(file: &[u8]) -> (Fmp4Scan, Result<(), ScanError>, usize) {
        let mut s = Fmp4Scan::new(file.len() as u64);
        let mut steps = 0;
        while let Some(r) = s.next_read() {
            steps += 1;
            let start = (r.offset as usize).min(file.len());
            let end = start.saturating_add(r.len).min(file.len());
            if let Err(e) = s.feed(&file[start..end]) {
                return (s, Err(e), steps);
            }
        }
        (s, Ok(()), steps)
    }

    const T0: i64 = 1_795_773_600_250;

    #[test]
    fn prft_gives_the_wall_clock_of_each_fragment() {
        // Three 1 s fragments (25 samples of 40 ms), the clock in prft.
        let file = [
            init(),
            fragment(0, 25, Some(T0)),
            fragment(90_000, 25, Some(T0 + 1000)),
            fragment(180_000, 25, Some(T0 + 2000)),
        ]
        .concat();
        let (s, r, _) = scan(&file);
        r.unwrap();
        let got = s.scanned(0).unwrap();
        assert_eq!(
            (got.start_ms, got.end_ms, got.fragments),
            (T0, T0 + 3000, 3)
        );
        assert!(got.from_prft);
        assert_eq!(got.complete_bytes, file.len() as u64);
    }

    #[test]
    fn without_prft_the_name_and_tfdt_say() {
        let file = [init(), fragment(0, 25, None), fragment(90_000, 50, None)].concat();
        let (s, r, _) = scan(&file);
        r.unwrap();
        let got = s.scanned(T0 - 250).unwrap();
        assert_eq!((got.start_ms, got.end_ms), (T0 - 250, T0 - 250 + 3000));
        assert!(!got.from_prft);
    }

    #[test]
    fn a_cut_file_spans_its_complete_fragments() {
        let whole = [
            init(),
            fragment(0, 25, Some(T0)),
            fragment(90_000, 25, Some(T0 + 1000)),
        ]
        .concat();
        let first_end = init().len() + fragment(0, 25, Some(T0)).len();
        for cut in [first_end, first_end + 10, first_end + 40, whole.len() - 1] {
            let (s, r, _) = scan(&whole[..cut]);
            r.unwrap();
            let got = s.scanned(0).unwrap();
            assert_eq!((got.end_ms, got.fragments), (T0 + 1000, 1), "cut at {cut}");
            assert_eq!(got.complete_bytes, first_end as u64);
        }
        let (s, _, _) = scan(&whole[..first_end - 1]);
        assert_eq!(s.scanned(0), None);
    }

    #[test]
    fn sizes_from_the_disk_are_bounded() {
        // A moov claiming 1 GiB inside a file that long is refused, not read.
        let mut huge = (1u32 << 30).to_be_bytes().to_vec();
        huge.extend_from_slice(b"moov");
        let mut s = Fmp4Scan::new(1 << 31);
        assert_eq!(s.next_read().map(|r| r.len), Some(16));
        assert!(matches!(s.feed(&huge), Err(ScanError::TooLarge { .. })));
        assert_eq!(s.next_read(), None);
        // A trun claiming more samples than it holds.
        let mut trun = 1_000_000u32.to_be_bytes().to_vec();
        trun.put_u32(0);
        let traf = bx(b"traf", &full(b"trun", 0, 0x101, &trun));
        assert!(parse_moof(&traf).is_err());
        // A box of size 3, and garbage: errors, never a panic or a loop.
        let (_, r, steps) = scan(&[0, 0, 0, 3, b'f', b'r', b'e', b'e', 0, 0]);
        assert!(r.is_err());
        assert_eq!(steps, 1);
    }

    #[test]
    fn a_fragment_of_an_unknown_track_is_an_error() {
        let file = [bx(b"ftyp", b"isom"), fragment(0, 1, None)].concat();
        let (_, r, _) = scan(&file);
        assert_eq!(r, Err(ScanError::UnknownTrack(1)));
    }
}
