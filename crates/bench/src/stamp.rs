//! Wall-clock stamps in the video, for publish-to-play latency: the bench publisher
//! puts an H.264 SEI NAL unit (type 6, payload type 5 `user_data_unregistered`: our
//! UUID + the Unix time in µs, big-endian) in front of each video frame's NAL units;
//! players find it in the first bytes of each video message (RTSP players: among the
//! first NAL units of each depacketized frame) and compare it with their own clock. Servers pass SEI NAL units through untouched, so this works against any
//! server (the clocks are the same machine's).
//!
//! Only legacy FLV AVC frames (codec id 7, AVCPacketType 1, 4-byte NAL lengths) are
//! stamped: the SEI is the first NAL unit, right after the 5-byte video tag header.

/// Ours, to tell our SEI from an encoder's.
pub(crate) const UUID: [u8; 16] = *b"sluice-bench-t0\x01";
/// Body bytes a player keeps of each video message to find a stamp: 5 header bytes,
/// a 4-byte NAL length, and the NAL (header, type, size, 24 payload bytes, trailing
/// bits) with room for emulation-prevention bytes.
pub(crate) const HEAD_LEN: usize = 56;

/// The SEI NAL unit (escaped) carrying `unix_us`, appended to `out`.
pub(crate) fn push_sei(out: &mut impl bytes::BufMut, unix_us: u64) {
    let mut rbsp = [0u8; 2 + 16 + 8 + 1];
    rbsp[0] = 5; // user_data_unregistered
    rbsp[1] = 24; // payload size
    rbsp[2..18].copy_from_slice(&UUID);
    rbsp[18..26].copy_from_slice(&unix_us.to_be_bytes());
    rbsp[26] = 0x80; // rbsp_stop_one_bit
    out.put_u8(0x06); // forbidden 0, nal_ref_idc 0, type 6
    let mut zeros = 0;
    for &b in &rbsp {
        if zeros >= 2 && b <= 3 {
            out.put_u8(3);
            zeros = 0;
        }
        out.put_u8(b);
        zeros = if b == 0 { zeros + 1 } else { 0 };
    }
}

/// `body` (an FLV video tag body) with our SEI in front of its NAL units, in `out`
/// (cleared first); `false` (and `out` untouched) when `body` is not a legacy AVC frame.
pub(crate) fn stamp_frame(out: &mut Vec<u8>, body: &[u8], unix_us: u64) -> bool {
    if body.len() < 5 || body[0] & 0x0f != 7 || body[0] & 0x80 != 0 || body[1] != 1 {
        return false;
    }
    out.clear();
    out.extend_from_slice(&body[..5]);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    push_sei(out, unix_us);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body[5..]);
    true
}

/// An H.264 access unit as 4-byte length-prefixed NAL units (`nals`) with our SEI in
/// front, appended to `out`: what an RTSP publisher packetizes.
pub(crate) fn stamp_nals(out: &mut bytes::BytesMut, nals: &[u8], unix_us: u64) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    push_sei(out, unix_us);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(nals);
}

/// The stamp in the first bytes of a video tag body, if it carries ours.
pub(crate) fn find(head: &[u8]) -> Option<u64> {
    if head.len() < 10 || head[0] & 0x0f != 7 || head[0] & 0x80 != 0 || head[1] != 1 {
        return None;
    }
    let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
    sei_stamp(head.get(9..9 + len)?)
}

/// The stamp in an H.264 access unit as 4-byte length-prefixed NAL units (what the
/// RTP depacketizer gives): ours is the first SEI, which may come after the parameter
/// sets a server puts in front of a keyframe; the search stops at the first slice.
pub(crate) fn find_in_nals(mut nals: &[u8]) -> Option<u64> {
    while let Some(&[a, b, c, d]) = nals.get(..4) {
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        let nal = nals.get(4..4usize.checked_add(len)?)?;
        match nal.first()? & 0x1f {
            6 => {
                if let Some(t) = sei_stamp(nal) {
                    return Some(t);
                }
            }
            // Coded slices: SEI comes before them or not at all.
            1..=5 => return None,
            _ => {}
        }
        nals = &nals[4 + len..];
    }
    None
}

/// The stamp in one H.264 RTP payload (RFC 6184): a single SEI NAL unit, or one in an
/// aggregation packet (STAP-A), where a packetizer puts small NAL units that precede a
/// frame's slices.
pub(crate) fn find_in_rtp(payload: &[u8]) -> Option<u64> {
    match payload.first()? & 0x1f {
        6 => sei_stamp(payload),
        24 => {
            let mut rest = payload.get(1..)?;
            while let Some(&[a, b]) = rest.get(..2) {
                let len = usize::from(u16::from_be_bytes([a, b]));
                let nal = rest.get(2..2 + len)?;
                if nal.first().is_some_and(|h| h & 0x1f == 6) {
                    if let Some(t) = sei_stamp(nal) {
                        return Some(t);
                    }
                }
                rest = rest.get(2 + len..)?;
            }
            None
        }
        _ => None,
    }
}

/// The stamp among the first NAL units of H.264 in Annex B form (start codes), as
/// an MPEG-TS PES carries them: the search stops at the first slice.
pub(crate) fn find_in_annexb(data: &[u8]) -> Option<u64> {
    let mut at = 0;
    while let Some(i) = memchr::memmem::find(&data[at..], &[0, 0, 1]) {
        let nal = &data[at + i + 3..];
        match nal.first()? & 0x1f {
            6 => {
                if let Some(t) = sei_stamp(nal) {
                    return Some(t);
                }
            }
            1..=5 => return None,
            _ => {}
        }
        at += i + 3;
    }
    None
}

/// Fills `out` from `escaped` with the emulation-prevention bytes (a 3 after two
/// zeros) taken out; returns how many bytes it filled.
pub(crate) fn unescape(escaped: &[u8], out: &mut [u8]) -> usize {
    let (mut n, mut zeros) = (0, 0);
    for &b in escaped {
        if n == out.len() {
            break;
        }
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        out[n] = b;
        n += 1;
        zeros = if b == 0 { zeros + 1 } else { 0 };
    }
    n
}

/// Our time, from an SEI NAL unit (header byte included), if it is ours.
fn sei_stamp(nal: &[u8]) -> Option<u64> {
    if nal.first()? & 0x1f != 6 {
        return None;
    }
    // Unescape the start of the RBSP: type, size, UUID, time.
    let mut rbsp = [0u8; 26];
    let n = unescape(&nal[1..], &mut rbsp);
    if n < rbsp.len() || rbsp[0] != 5 || rbsp[1] != 24 || rbsp[2..18] != UUID {
        return None;
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&rbsp[18..26]);
    Some(u64::from_be_bytes(t))
}

/// Now, as Unix µs.
pub(crate) fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annexb_stamps_are_found_before_the_first_slice() {
        let mut au = bytes::BytesMut::new();
        au.extend_from_slice(&[0, 0, 0, 1, 9, 0xf0, 0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1]);
        push_sei(&mut au, 0x0102_0000_0000_0003);
        au.extend_from_slice(&[0, 0, 1, 0x65, 7, 7]);
        assert_eq!(find_in_annexb(&au), Some(0x0102_0000_0000_0003));
        // Behind a slice, or cut short: none.
        let mut late = bytes::BytesMut::from(&[0u8, 0, 1, 0x41, 5][..]);
        late.extend_from_slice(&[0, 0, 1]);
        push_sei(&mut late, 5);
        assert_eq!(find_in_annexb(&late), None);
        assert_eq!(find_in_annexb(&au[..20]), None);
    }

    #[test]
    fn stamps_round_trip_with_emulation_prevention() {
        let frame = [0x27u8, 1, 0, 0, 0, 0, 0, 0, 3, 0x41, 0x9a, 0x00];
        for us in [
            0u64,
            1,
            0x0000_0100_0000_0003,
            1_763_800_000_123_456,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            assert!(stamp_frame(&mut out, &frame, us));
            // No start-code emulation inside the NAL.
            let len = u32::from_be_bytes([out[5], out[6], out[7], out[8]]) as usize;
            let nal = &out[9..9 + len];
            assert!(
                !nal.windows(3).any(|w| w[0] == 0 && w[1] == 0 && w[2] <= 2),
                "{nal:x?}"
            );
            assert!(out.len() <= HEAD_LEN + frame.len());
            // The frame's own NAL units follow untouched.
            assert_eq!(&out[9 + len..], &frame[5..]);
            assert_eq!(find(&out[..HEAD_LEN.min(out.len())]), Some(us), "{us:x}");
        }
        // Not AVC frames: sequence headers, HEVC (enhanced), audio.
        let mut out = Vec::new();
        assert!(!stamp_frame(&mut out, &[0x17, 0, 0, 0, 0, 1], 5));
        assert!(!stamp_frame(&mut out, &[0x91, 0, 0, 0, 0, 1], 5));
        assert_eq!(find(&frame), None);
        // Another encoder's SEI (other UUID) is not ours.
        let mut other = Vec::new();
        stamp_frame(&mut other, &frame, 7);
        other[12] ^= 0xff;
        assert_eq!(find(&other), None);
    }

    #[test]
    fn stamps_are_found_in_rtp_payloads() {
        let mut sei = bytes::BytesMut::new();
        push_sei(&mut sei, 1_234_567);
        let nal = sei.to_vec();
        assert_eq!(find_in_rtp(&nal), Some(1_234_567));
        let mut stap = vec![24u8];
        for n in [&[0x67u8, 1, 2][..], &nal, &[0x68, 3]] {
            stap.extend_from_slice(&(n.len() as u16).to_be_bytes());
            stap.extend_from_slice(n);
        }
        assert_eq!(find_in_rtp(&stap), Some(1_234_567));
        assert_eq!(find_in_rtp(&[0x65, 1, 2, 3]), None);
        assert_eq!(find_in_rtp(&stap[..stap.len() - 8]), None);
    }

    #[test]
    fn stamps_are_found_among_nal_units() {
        let mut sei = Vec::new();
        push_sei(&mut sei, 1_763_800_000_123_456);
        let nal = |out: &mut Vec<u8>, n: &[u8]| {
            out.extend_from_slice(&(n.len() as u32).to_be_bytes());
            out.extend_from_slice(n);
        };
        // A keyframe as a server sends it: SPS, PPS, our SEI, the IDR slice.
        let mut au = Vec::new();
        nal(&mut au, &[0x67, 0x42, 0xc0, 0x1e]);
        nal(&mut au, &[0x68, 0xce]);
        nal(&mut au, &sei);
        nal(&mut au, &[0x65, 0x88, 0x84]);
        assert_eq!(find_in_nals(&au), Some(1_763_800_000_123_456));
        // After the first slice, or in a truncated unit, nothing is found.
        let mut late = Vec::new();
        nal(&mut late, &[0x41, 0x9a]);
        nal(&mut late, &sei);
        assert_eq!(find_in_nals(&late), None);
        assert_eq!(find_in_nals(&au[..20]), None);
        assert_eq!(find_in_nals(&[0xff, 0xff, 0xff, 0xff, 6]), None);
        assert_eq!(find_in_nals(&[]), None);
        // What an RTSP publisher sends: the stamp first, the frame's units after it.
        let mut out = bytes::BytesMut::from(&b"kept"[..]);
        let frame = [0, 0, 0, 3, 0x41, 0x9a, 0x00];
        stamp_nals(&mut out, &frame, 99);
        assert_eq!(&out[..4], b"kept");
        assert_eq!(find_in_nals(&out[4..]), Some(99));
        assert!(out.ends_with(&frame));
    }
}
