//! MP4 demuxing: any bytes parse to a movie or an error, never a panic; every sample of
//! a parsed movie lies inside the file and reads as a frame, in seek/next order.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_media::mp4::{parse_movie, Mp4Error};

fuzz_target!(|data: &[u8]| {
    let file = Bytes::copy_from_slice(data);
    let Ok(movie) = parse_movie(&file) else {
        return;
    };
    assert!(movie.tracks.len() <= 2);
    let mut total = 0usize;
    for t in &movie.tracks {
        total += t.samples.len();
        for s in &t.samples {
            assert!(s.offset + u64::from(s.size) <= file.len() as u64);
        }
    }
    for t in [i64::MIN, 0, movie.duration / 2, movie.duration, i64::MAX] {
        let mut pos = movie.seek(t);
        let mut steps = 0;
        while let Some((track, sample)) = movie.next(&mut pos) {
            match movie.frame(&file, track, sample) {
                // Only a 1- to 3-byte NAL length that runs past the sample can fail.
                Ok(_) | Err(Mp4Error::Malformed { .. }) => {}
                Err(e) => panic!("frame {track}/{sample}: {e}"),
            }
            steps += 1;
            assert!(steps <= total);
        }
    }
});
