//! An MPEG-TS recording's span from the PTS of the PES packets at its head and tail.
//!
//! Why head and tail: a TS file has no index, and an hour of it is gigabytes; the
//! first and last PTS (read from the first and last few hundred KiB) give its
//! duration, and its file name gives the UTC second it began. The caller reads the
//! two ranges; nothing here allocates.
//!
//! # Invariants
//! - Only whole 188-byte packets, found by their sync bytes, are read: a tail cut by a
//!   crash mid-packet is skipped.
//! - PTS are 33-bit and wrap (every 26.5 hours): the duration is taken modulo 2^33.

/// Bytes to read at each end of a file.
pub const WINDOW: usize = 256 << 10;
const PACKET: usize = 188;
const PTS_WRAP: u64 = 1 << 33;

/// Where whole packets start in `bytes`: the first offset from which two (or, at the
/// very end, one) sync bytes 188 apart line up.
fn alignment(bytes: &[u8]) -> Option<usize> {
    (0..PACKET.min(bytes.len()))
        .find(|&o| bytes.get(o) == Some(&0x47) && bytes.get(o + PACKET).is_none_or(|&b| b == 0x47))
}

/// The PTS of each PES start in the whole packets of `bytes`, in order.
pub fn pts_values(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let start = alignment(bytes).unwrap_or(bytes.len());
    bytes
        .get(start..)
        .unwrap_or_default()
        .chunks_exact(PACKET)
        .filter_map(packet_pts)
}

/// The PTS of a packet that starts a PES packet with one.
fn packet_pts(p: &[u8]) -> Option<u64> {
    let (&sync, &b1, &b3) = (p.first()?, p.get(1)?, p.get(3)?);
    if sync != 0x47 || b1 & 0x40 == 0 {
        return None;
    }
    let mut at = 4;
    if b3 & 0x20 != 0 {
        at += 1 + usize::from(*p.get(4)?);
    }
    if b3 & 0x10 == 0 {
        return None;
    }
    let pes = p.get(at..)?;
    if pes.get(..3)? != [0, 0, 1] || pes.get(7)? & 0x80 == 0 {
        return None;
    }
    let &[b0, b1, b2, b3, b4] = pes.get(9..14)? else {
        return None;
    };
    let (b0, b1, b2, b3, b4) = (
        u64::from(b0),
        u64::from(b1),
        u64::from(b2),
        u64::from(b3),
        u64::from(b4),
    );
    Some(((b0 >> 1) & 0x07) << 30 | b1 << 22 | (b2 >> 1) << 15 | b3 << 7 | b4 >> 1)
}

/// The span in ms from the first PTS of `head` to the latest PTS of `tail` (the last
/// [`WINDOW`] bytes of the file; the whole file when it is small, then `head` and `tail`
/// may be the same bytes). `None` without a PTS.
pub fn duration_ms(head: &[u8], tail: &[u8]) -> Option<i64> {
    let first = pts_values(head).next()?;
    let latest = pts_values(tail)
        .map(|p| (p + PTS_WRAP - first) % PTS_WRAP)
        .max()?;
    i64::try_from(latest / 90).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TS packet starting a PES with `pts`.
    pub(crate) fn packet(pts: u64) -> Vec<u8> {
        let mut p = vec![0x47, 0x41, 0x00, 0x10, 0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5];
        p.push(0x21 | (((pts >> 30) & 7) << 1) as u8);
        p.push((pts >> 22) as u8);
        p.push(0x01 | ((pts >> 14) & 0xfe) as u8);
        p.push((pts >> 7) as u8);
        p.push(0x01 | ((pts << 1) & 0xfe) as u8);
        p.resize(PACKET, 0xff);
        p
    }

    #[test]
    fn head_and_tail_give_the_duration() {
        let file: Vec<u8> = (0..100).flat_map(|i| packet(1000 + i * 3600)).collect();
        assert_eq!(duration_ms(&file, &file), Some(99 * 40));
        // A tail that starts mid-packet and ends cut.
        let tail = &file[file.len() - 1000..file.len() - 50];
        assert_eq!(duration_ms(&file, tail), Some(98 * 40));
        assert_eq!(duration_ms(&[], &file), None);
    }

    #[test]
    fn pts_wrap_around() {
        let file: Vec<u8> = [packet(PTS_WRAP - 90_000), packet(90_000)].concat();
        assert_eq!(duration_ms(&file, &file), Some(2000));
    }
}
