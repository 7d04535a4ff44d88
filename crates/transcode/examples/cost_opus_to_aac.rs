//! What Opus to AAC costs per stream: a minute of 48 kHz stereo Opus (a 440 Hz and a
//! 1 kHz tone, 20 ms packets, encoded beforehand) through the chain, timed; prints the
//! share of one core it takes. With a path, writes the AAC there as ADTS, for ffmpeg:
//!
//!     cargo run --release -p sluice-transcode --example cost_opus_to_aac [out.aac]

use sluice_transcode::OpusToAac;
use std::io::Write;
use std::time::Instant;

/// A 7-byte ADTS header for a raw AAC-LC frame of `len` bytes at 48 kHz.
fn adts(len: usize, channels: usize) -> [u8; 7] {
    let full = len + 7;
    [
        0xff,
        0xf1,
        (1 << 6) | (3 << 2) | ((channels as u8 >> 2) & 1),
        ((channels as u8 & 3) << 6) | ((full >> 11) as u8 & 3),
        (full >> 3) as u8,
        ((full as u8 & 7) << 5) | 0x1f,
        0xfc,
    ]
}

fn main() {
    let seconds = 60;
    let mut enc = opus::Encoder::new(48_000, opus::Channels::Stereo, opus::Application::Audio)
        .expect("Opus encoder");
    let packets: Vec<Vec<u8>> = (0..seconds * 50)
        .map(|p| {
            let frame: Vec<f32> = (0..960)
                .flat_map(|i| {
                    let t = f64::from(p * 960 + i) / 48_000.0;
                    let tau = 2.0 * std::f64::consts::PI * t;
                    [
                        ((tau * 440.0).sin() * 0.5) as f32,
                        ((tau * 1000.0).sin() * 0.5) as f32,
                    ]
                })
                .collect();
            enc.encode_vec_float(&frame, 1500).expect("encodes")
        })
        .collect();
    let mut file = std::env::args()
        .nth(1)
        .map(|path| std::fs::File::create(path).expect("output file"));
    let mut t = OpusToAac::new(2).expect("transcoder");
    let start = Instant::now();
    let (mut frames, mut bytes) = (0, 0);
    for (i, p) in packets.iter().enumerate() {
        let _ = t.push(p, i as i64 * 1800);
        while let Some(f) = t.pop() {
            frames += 1;
            bytes += f.data.len();
            if let Some(file) = &mut file {
                file.write_all(&adts(f.data.len(), 2)).expect("write");
                file.write_all(&f.data).expect("write");
            }
        }
    }
    let spent = start.elapsed().as_secs_f64();
    println!(
        "{} Opus packets ({seconds} s of 48 kHz stereo) -> {frames} AAC frames ({} kbit/s) \
         in {spent:.3} s: {:.2}% of one core per stream",
        packets.len(),
        bytes * 8 / seconds as usize / 1000,
        100.0 * spent / f64::from(seconds)
    );
}
