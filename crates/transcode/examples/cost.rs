//! What transcoding one stream costs: a minute of 44.1 kHz stereo AAC (the test tone,
//! looped) through the chain, timed; prints the share of one core it takes.
//!
//!     cargo run --release -p sluice-transcode --example cost

use sluice_transcode::AacToOpus;
use std::time::Instant;

/// The AudioSpecificConfig and access units of an ADTS file.
fn adts(mut rest: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (mut asc, mut frames) = (Vec::new(), Vec::new());
    while rest.len() >= 7 && rest[0] == 0xff {
        let config = (u16::from((rest[2] >> 6) + 1) << 11)
            | (u16::from((rest[2] >> 2) & 0x0f) << 7)
            | (u16::from(((rest[2] & 1) << 2) | (rest[3] >> 6)) << 3);
        asc = config.to_be_bytes().to_vec();
        let header = if rest[1] & 1 == 1 { 7 } else { 9 };
        let len = (usize::from(rest[3] & 3) << 11)
            | (usize::from(rest[4]) << 3)
            | usize::from(rest[5] >> 5);
        frames.push(rest[header..len].to_vec());
        rest = &rest[len..];
    }
    (asc, frames)
}

fn main() {
    let (asc, frames) = adts(include_bytes!("../tests/data/tone-44k-stereo.aac"));
    let mut t = AacToOpus::new(&asc).expect("transcoder");
    let seconds = 60.0;
    let count = (seconds * 44_100.0 / 1024.0) as usize;
    let start = Instant::now();
    let mut out = 0;
    for i in 0..count {
        let _ = t.push(&frames[i % frames.len()], i as i64 * 1024 * 90_000 / 44_100);
        while t.pop().is_some() {
            out += 1;
        }
    }
    let spent = start.elapsed().as_secs_f64();
    println!(
        "{count} AAC frames ({seconds} s of 44.1 kHz stereo) -> {out} Opus frames in {:.3} s: \
         {:.2}% of one core per stream",
        spent,
        100.0 * spent / seconds
    );
}
