//! MPEG-TS over RTP (RFC 2250) as UDP ingest receives it: any datagrams, in any order,
//! never panic; what comes out is TS (non-empty, starting with a sync byte), never more
//! packets than went in, and it demuxes (the server's path) without panicking.
//!
//! The first byte spaces the reorder timeouts (`skip_missing` after every N datagrams,
//! none for 0); the rest is datagrams, each behind its 2-byte big-endian length.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::rtp::Mp2tReceiver;
use sluice_media::ts::TsDemuxer;

fuzz_target!(|data: &[u8]| {
    let Some((&every, mut rest)) = data.split_first() else {
        return;
    };
    let mut rtp = Mp2tReceiver::new();
    let mut demux = TsDemuxer::new();
    let (mut pushed, mut popped) = (0u64, 0u64);
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let len = usize::from(u16::from_be_bytes(*len)).min(tail.len());
        let (datagram, tail) = tail.split_at(len);
        rest = tail;
        if rtp.push(Bytes::copy_from_slice(datagram)).is_ok() {
            pushed += 1;
        }
        if every != 0 && rtp.stats().datagrams % u64::from(every) == 0 {
            rtp.skip_missing();
        }
        while let Some(ts) = rtp.pop() {
            popped += 1;
            assert_eq!(ts.first(), Some(&0x47));
            demux.push(&ts);
            while demux.poll().is_some() {}
        }
    }
    rtp.skip_missing();
    while rtp.pop().is_some() {
        popped += 1;
    }
    assert!(popped <= pushed, "{popped} out of {pushed} in");
    let s = rtp.stats();
    assert_eq!(s.datagrams, pushed + s.not_rtp + s.not_ts);
});
