//! The datagram payloads of one write to an SRT player: the write's bytes cut into
//! payloads of [`PAYLOAD_LEN`] across the buffers it is made of.
//!
//! Why across buffers: a write holds the TS form of several frames (a merge window's
//! worth), one buffer per frame. Cut frame by frame, every frame would end in a short
//! datagram (every audio frame would be one), and each short datagram also ends a GSO
//! run: ~25 % more datagrams and a send message per frame instead of one per write,
//! all of it per-datagram work of the kernel. Cut across frames, only the write's last
//! payload may be short, as libsrt senders fed by ffmpeg send a TS stream. A payload
//! inside one buffer is a slice of the shared bytes; one that spans buffers is copied
//! together (at most one per buffer). Payloads stay whole TS packets: each frame's TS
//! form is whole packets and [`PAYLOAD_LEN`] is seven of them.

use bytes::{Bytes, BytesMut};
use sluice_srt::PAYLOAD_LEN;

/// Hands `out` the payloads of the write made of `bufs`, in order.
pub fn cut(bufs: impl IntoIterator<Item = Bytes>, mut out: impl FnMut(Bytes)) {
    // The short end of the buffers so far, waiting for the next buffer's start.
    let mut short: Option<Bytes> = None;
    for mut buf in bufs {
        if let Some(head) = short.take() {
            let take = (PAYLOAD_LEN - head.len()).min(buf.len());
            let mut joined = BytesMut::with_capacity(head.len() + take);
            joined.extend_from_slice(&head);
            joined.extend_from_slice(&buf.split_to(take));
            let joined = joined.freeze();
            if joined.len() < PAYLOAD_LEN {
                short = Some(joined);
                continue;
            }
            out(joined);
        }
        while buf.len() >= PAYLOAD_LEN {
            out(buf.split_to(PAYLOAD_LEN));
        }
        if !buf.is_empty() {
            short = Some(buf);
        }
    }
    if let Some(last) = short {
        out(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(bufs: &[Bytes]) -> Vec<Bytes> {
        let mut out = Vec::new();
        cut(bufs.iter().cloned(), |p| out.push(p));
        out
    }

    /// The TS form of one frame: `packets` TS packets of the byte `b`.
    fn frame(b: u8, packets: usize) -> Bytes {
        Bytes::from(vec![b; packets * 188])
    }

    #[test]
    fn the_frames_of_one_write_go_out_as_full_payloads_and_one_short_last() {
        // A video frame of 10 TS packets, two audio frames of 1, a frame of 16.
        let bufs = [frame(1, 10), frame(2, 1), frame(3, 1), frame(4, 16)];
        let out = payloads(&bufs);
        let lens: Vec<usize> = out.iter().map(Bytes::len).collect();
        // 28 packets: four payloads of seven, none short.
        assert_eq!(lens, [PAYLOAD_LEN; 4]);
        let joined: Vec<u8> = out.iter().flat_map(|p| p.iter().copied()).collect();
        let want: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(joined, want, "every byte, in order");

        let bufs = [frame(1, 8), frame(2, 1)];
        let lens: Vec<usize> = payloads(&bufs).iter().map(Bytes::len).collect();
        assert_eq!(lens, [PAYLOAD_LEN, 2 * 188]);
    }

    #[test]
    fn a_payload_inside_one_buffer_is_a_slice_of_it() {
        let big = frame(7, 15);
        let out = payloads(&[frame(1, 3), big.clone()]);
        assert_eq!(out.len(), 3);
        // The second payload lies wholly in `big`: its bytes are `big`'s, not a copy.
        let inside = big.as_ptr() as usize..big.as_ptr() as usize + big.len();
        assert!(inside.contains(&(out[1].as_ptr() as usize)));
        assert!(
            !inside.contains(&(out[0].as_ptr() as usize)),
            "the joined one is a copy"
        );
    }

    #[test]
    fn nothing_comes_of_nothing() {
        assert!(payloads(&[]).is_empty());
        assert!(payloads(&[Bytes::new(), Bytes::new()]).is_empty());
    }
}
