//! Reading ISO BMFF boxes from a byte slice: headers (32-bit, 64-bit and to-the-end
//! sizes), the children of a container, and a checked big-endian cursor over content.
//!
//! Why: every other part of the demuxer walks boxes; the bounds checks live here, so a
//! size or a count in the file can never index past the bytes it claims to describe.

use super::Mp4Error;

/// One box: its type, where it is in the file and its content (after the header).
#[derive(Debug, Clone, Copy)]
pub(super) struct BoxRef<'a> {
    pub(super) kind: [u8; 4],
    /// Offset of the box's first header byte in the file.
    pub(super) start: u64,
    /// Length of the header (8, or 16 with a 64-bit size).
    pub(super) header_len: u8,
    /// The content, after the header.
    pub(super) body: &'a [u8],
}

/// A box header: the type, its own length and the box's total length (`None`: to the
/// end of the enclosing data, size 0).
struct Header {
    kind: [u8; 4],
    header_len: usize,
    size: Option<u64>,
}

/// Reads the header at the start of `data`; `None` if fewer than 8 bytes remain.
fn header(data: &[u8]) -> Result<Option<Header>, Mp4Error> {
    let Some(&[s0, s1, s2, s3, k0, k1, k2, k3]) = data.get(..8) else {
        return Ok(None);
    };
    let kind = [k0, k1, k2, k3];
    let (header_len, size) = match u32::from_be_bytes([s0, s1, s2, s3]) {
        0 => (8, None),
        1 => {
            let Some(large) = data.get(8..16) else {
                return Err(Mp4Error::TruncatedBox { kind });
            };
            let mut b = [0; 8];
            b.copy_from_slice(large);
            (16, Some(u64::from_be_bytes(b)))
        }
        n => (8, Some(u64::from(n))),
    };
    if size.is_some_and(|s| s < header_len as u64) {
        return Err(Mp4Error::Malformed { what: "box size" });
    }
    Ok(Some(Header {
        kind,
        header_len,
        size,
    }))
}

/// The boxes of the file's top level, in order. A box that runs past the end of the file
/// comes last, with the content that is there and `complete: false`: a file being
/// written, or cut off, still yields its earlier boxes.
pub(super) fn top_level(file: &[u8]) -> TopLevel<'_> {
    TopLevel { file, pos: 0 }
}

/// A top-level box and whether all of it is in the file.
#[derive(Debug, Clone, Copy)]
pub(super) struct TopBox<'a> {
    pub(super) b: BoxRef<'a>,
    pub(super) complete: bool,
}

/// The iterator of [`top_level`].
pub(super) struct TopLevel<'a> {
    file: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for TopLevel<'a> {
    type Item = TopBox<'a>;

    fn next(&mut self) -> Option<TopBox<'a>> {
        let rest = self.file.get(self.pos..)?;
        // A malformed header ends the walk like a cut-off one: nothing after it can be
        // found without trusting it.
        let h = header(rest).ok().flatten()?;
        let start = self.pos as u64;
        let available = rest.len() as u64;
        let size = h.size.unwrap_or(available);
        let complete = size <= available;
        let end = if complete { size as usize } else { rest.len() };
        self.pos = if complete {
            self.pos.saturating_add(end)
        } else {
            self.file.len()
        };
        Some(TopBox {
            b: BoxRef {
                kind: h.kind,
                start,
                header_len: h.header_len as u8,
                body: rest.get(h.header_len..end)?,
            },
            complete,
        })
    }
}

/// The boxes inside `body`, which starts at file offset `start`. A child larger than its
/// parent is an error; fewer than 8 trailing bytes (padding some writers add) end it.
pub(super) fn children(body: &[u8], start: u64) -> Children<'_> {
    Children {
        data: body,
        pos: 0,
        start,
    }
}

/// The iterator of [`children`].
#[derive(Clone)]
pub(super) struct Children<'a> {
    data: &'a [u8],
    pos: usize,
    start: u64,
}

impl<'a> Children<'a> {
    fn read(&mut self) -> Result<Option<BoxRef<'a>>, Mp4Error> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let Some(h) = header(rest)? else {
            return Ok(None);
        };
        let len = match h.size {
            None => rest.len(),
            Some(s) => usize::try_from(s)
                .ok()
                .filter(|&s| s <= rest.len())
                .ok_or(Mp4Error::TruncatedBox { kind: h.kind })?,
        };
        let body = rest
            .get(h.header_len..len)
            .ok_or(Mp4Error::TruncatedBox { kind: h.kind })?;
        let start = self.start.saturating_add(self.pos as u64);
        self.pos = self.pos.saturating_add(len);
        Ok(Some(BoxRef {
            kind: h.kind,
            start,
            header_len: h.header_len as u8,
            body,
        }))
    }

    /// The first child of type `kind`, if any; a malformed child before it is an error.
    pub(super) fn get(mut self, kind: &[u8; 4]) -> Result<Option<BoxRef<'a>>, Mp4Error> {
        while let Some(b) = self.read()? {
            if &b.kind == kind {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// Like [`Children::get`], but a missing box is [`Mp4Error::Missing`].
    pub(super) fn require(
        self,
        kind: &[u8; 4],
        what: &'static str,
    ) -> Result<BoxRef<'a>, Mp4Error> {
        self.get(kind)?.ok_or(Mp4Error::Missing { what })
    }
}

impl<'a> Iterator for Children<'a> {
    type Item = Result<BoxRef<'a>, Mp4Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.read() {
            Ok(b) => b.map(Ok),
            Err(e) => {
                self.pos = self.data.len();
                Some(Err(e))
            }
        }
    }
}

impl<'a> BoxRef<'a> {
    /// The children of this box.
    pub(super) fn children(&self) -> Children<'a> {
        children(self.body, self.body_start())
    }

    /// The children after the first `fields` bytes of content (a full box's version and
    /// flags, a sample entry's fields); `what` names the box if it is shorter.
    pub(super) fn children_after(
        &self,
        fields: usize,
        what: &'static str,
    ) -> Result<Children<'a>, Mp4Error> {
        let rest = self
            .body
            .get(fields..)
            .ok_or(Mp4Error::Truncated { what })?;
        let start = self.body_start().saturating_add(fields as u64);
        Ok(children(rest, start))
    }

    fn body_start(&self) -> u64 {
        self.start.saturating_add(u64::from(self.header_len))
    }
}

/// A cursor over box content: big-endian reads that fail with [`Mp4Error::Truncated`]
/// naming the box, never panic.
pub(super) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(data: &'a [u8], what: &'static str) -> Self {
        Reader { data, pos: 0, what }
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], Mp4Error> {
        let end = self.pos.checked_add(n).ok_or(self.truncated())?;
        let b = self.data.get(self.pos..end).ok_or(self.truncated())?;
        self.pos = end;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Mp4Error> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(super) fn skip(&mut self, n: usize) -> Result<(), Mp4Error> {
        self.take(n).map(|_| ())
    }

    pub(super) fn u8(&mut self) -> Result<u8, Mp4Error> {
        Ok(self.array::<1>()?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, Mp4Error> {
        self.array().map(u16::from_be_bytes)
    }

    pub(super) fn u32(&mut self) -> Result<u32, Mp4Error> {
        self.array().map(u32::from_be_bytes)
    }

    pub(super) fn i32(&mut self) -> Result<i32, Mp4Error> {
        self.array().map(i32::from_be_bytes)
    }

    pub(super) fn u64(&mut self) -> Result<u64, Mp4Error> {
        self.array().map(u64::from_be_bytes)
    }

    pub(super) fn i64(&mut self) -> Result<i64, Mp4Error> {
        self.array().map(i64::from_be_bytes)
    }

    /// A full box's version and 24-bit flags.
    pub(super) fn version_flags(&mut self) -> Result<(u8, u32), Mp4Error> {
        let v = self.u32()?;
        Ok(((v >> 24) as u8, v & 0x00ff_ffff))
    }

    /// A 32-bit field in version 0, 64-bit in version 1 (times and durations).
    pub(super) fn u32_or_u64(&mut self, version: u8) -> Result<u64, Mp4Error> {
        if version == 1 {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    /// A table of `count` entries of `entry_len` bytes: checked against what the box
    /// holds before anything trusts `count`.
    pub(super) fn table(&mut self, count: u32, entry_len: usize) -> Result<&'a [u8], Mp4Error> {
        let len = (count as usize)
            .checked_mul(entry_len)
            .ok_or(self.truncated())?;
        self.take(len)
    }

    fn truncated(&self) -> Mp4Error {
        Mp4Error::Truncated { what: self.what }
    }
}

/// The big-endian u32 at entry `i` of a table of `stride`-byte entries, `at` bytes into
/// the entry; `None` past the end.
pub(super) fn be_u32_at(table: &[u8], i: usize, stride: usize, at: usize) -> Option<u32> {
    let start = i.checked_mul(stride)?.checked_add(at)?;
    let b = table.get(start..start.checked_add(4)?)?;
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// The big-endian u64 at entry `i` of a table of 8-byte entries.
pub(super) fn be_u64_at(table: &[u8], i: usize) -> Option<u64> {
    let start = i.checked_mul(8)?;
    let b = table.get(start..start.checked_add(8)?)?;
    let mut a = [0; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_32_64_and_to_end() {
        let mut data = Vec::new();
        data.extend_from_slice(b"\0\0\0\x09free\x07");
        data.extend_from_slice(b"\0\0\0\x01mdat\0\0\0\0\0\0\0\x12ab");
        data.extend_from_slice(b"\0\0\0\0skip123");
        let kids: Vec<_> = children(&data, 100)
            .map(|b| b.map(|b| (b.kind, b.start, b.body.to_vec())))
            .collect();
        assert_eq!(
            kids,
            vec![
                Ok((*b"free", 100, vec![7])),
                Ok((*b"mdat", 109, b"ab".to_vec())),
                Ok((*b"skip", 127, b"123".to_vec())),
            ]
        );
    }

    #[test]
    fn child_past_parent_is_an_error() {
        let data = b"\0\0\0\x10moov\0\0\0\0";
        let kids: Vec<_> = children(data, 0).map(|b| b.map(|b| b.kind)).collect();
        assert_eq!(kids, vec![Err(Mp4Error::TruncatedBox { kind: *b"moov" })]);
        let bad = b"\0\0\0\x04moov";
        assert!(children(bad, 0).next().is_some_and(|r| r.is_err()));
        let cut64 = b"\0\0\0\x01mdat\0\0";
        assert!(children(cut64, 0).next().is_some_and(|r| r.is_err()));
    }

    #[test]
    fn top_level_keeps_a_cut_off_box() {
        let data = b"\0\0\0\x08ftyp\0\0\0\x20mdatabc";
        let boxes: Vec<_> = top_level(data)
            .map(|t| (t.b.kind, t.complete, t.b.body.to_vec()))
            .collect();
        assert_eq!(
            boxes,
            vec![(*b"ftyp", true, vec![]), (*b"mdat", false, b"abc".to_vec())]
        );
        // A malformed header ends the walk.
        assert_eq!(top_level(b"\0\0\0\x02moov").count(), 0);
    }

    #[test]
    fn reader_checks_bounds() {
        let mut r = Reader::new(&[1, 0, 0, 2, 0xff], "test");
        assert_eq!(r.version_flags(), Ok((1, 2)));
        assert_eq!(r.u16(), Err(Mp4Error::Truncated { what: "test" }));
        assert_eq!(r.u8(), Ok(0xff));
        assert!(r.table(u32::MAX, 8).is_err());
        assert_eq!(be_u32_at(&[0, 0, 0, 1, 0, 0, 0, 2], 1, 4, 0), Some(2));
        assert_eq!(be_u32_at(&[0, 0, 0, 1], 1, 4, 0), None);
    }
}
