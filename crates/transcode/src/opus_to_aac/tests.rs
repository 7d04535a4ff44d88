use super::*;
use symphonia_codec_aac::AacDecoder;
use symphonia_core::codecs::audio::well_known::CODEC_ID_AAC;
use symphonia_core::codecs::audio::{AudioCodecParameters, AudioDecoder, AudioDecoderOptions};
use symphonia_core::packet::PacketRef;
use symphonia_core::units::{Duration, Timestamp};

/// Ticks of one 20 ms Opus packet.
const PACKET_TICKS: i64 = 1800;

/// `seconds` of a 440 Hz tone on the left and 1 kHz on the right (or 440 Hz alone in
/// mono), at half scale, silent before `onset` samples; interleaved.
fn tone(seconds: f64, channels: usize, onset: usize) -> Vec<f32> {
    let n = (seconds * 48_000.0) as usize;
    let mut pcm = Vec::with_capacity(n * channels);
    for i in 0..n {
        let t = i as f64 / 48_000.0;
        for hz in [440.0, 1000.0].into_iter().take(channels) {
            let s = if i < onset {
                0.0
            } else {
                (2.0 * std::f64::consts::PI * hz * t).sin() * 0.5
            };
            pcm.push(s as f32);
        }
    }
    pcm
}

/// 20 ms Opus packets of `pcm`, as a WebRTC publisher sends them.
fn opus_packets(pcm: &[f32], channels: usize) -> Vec<Vec<u8>> {
    let ch = if channels == 2 {
        opus::Channels::Stereo
    } else {
        opus::Channels::Mono
    };
    let mut enc = opus::Encoder::new(48_000, ch, opus::Application::Audio).expect("encoder");
    pcm.chunks_exact(960 * channels)
        .map(|frame| enc.encode_vec_float(frame, 1500).expect("encodes"))
        .collect()
}

/// Decodes raw AAC frames to interleaved samples, each frame at its place on the
/// timeline from `base` (gaps silent), as a player does.
fn decode_aac(asc: &[u8], frames: &[AacFrame], base: i64) -> Vec<f32> {
    let mut params = AudioCodecParameters::new();
    params
        .for_codec(CODEC_ID_AAC)
        .with_extra_data(asc.to_vec().into_boxed_slice());
    let mut d = AacDecoder::try_new(&params, &AudioDecoderOptions::default()).expect("decoder");
    let channels = d.codec_params().channels.as_ref().map_or(0, |c| c.count());
    let mut pcm = Vec::new();
    let mut planes = vec![vec![0f32; AAC_FRAME]; channels];
    for f in frames {
        let at = samples(f.pts - base) * channels;
        let packet = PacketRef::new(0, Timestamp::new(0), Duration::new(1024), &f.data);
        let buf = d.decode_ref(&packet).expect("ffmpeg-grade AAC decodes");
        assert_eq!(buf.frames(), AAC_FRAME);
        buf.copy_to_slice_planar::<f32, _>(&mut planes);
        pcm.resize(at, 0.0);
        for i in 0..AAC_FRAME {
            for plane in &planes {
                pcm.push(plane[i]);
            }
        }
    }
    pcm
}

/// Transcodes packets 20 ms apart from `base`; the frames made.
fn transcode(t: &mut OpusToAac, packets: &[Vec<u8>], base: i64) -> Vec<AacFrame> {
    let mut out = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        t.push(p, base + i as i64 * PACKET_TICKS).expect("packet");
        while let Some(f) = t.pop() {
            out.push(f);
        }
    }
    out
}

fn channel(pcm: &[f32], channels: usize, c: usize) -> Vec<f32> {
    pcm.iter().skip(c).step_by(channels).copied().collect()
}

/// The strongest frequency of `x` between 100 Hz and 4 kHz, to 1 Hz (a DFT at each).
fn peak_hz(x: &[f32]) -> f64 {
    let x = &x[..x.len().min(48_000)];
    let power = |hz: f64| {
        let w = 2.0 * std::f64::consts::PI * hz / 48_000.0;
        let (re, im) = x.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, &s)| {
            let a = w * i as f64;
            (re + f64::from(s) * a.cos(), im - f64::from(s) * a.sin())
        });
        re * re + im * im
    };
    (100..4000)
        .step_by(10)
        .map(f64::from)
        .max_by(|a, b| power(*a).total_cmp(&power(*b)))
        .map(|coarse| {
            ((coarse - 10.0) as i64..=(coarse + 10.0) as i64)
                .map(|hz| hz as f64)
                .max_by(|a, b| power(*a).total_cmp(&power(*b)))
                .unwrap_or(coarse)
        })
        .unwrap_or(0.0)
}

fn rms(x: &[f32]) -> f64 {
    (x.iter().map(|s| f64::from(s * s)).sum::<f64>() / x.len() as f64).sqrt()
}

/// The first sample louder than a tenth of full scale.
fn onset(x: &[f32]) -> usize {
    x.iter().position(|s| s.abs() > 0.1).expect("a sound")
}

#[test]
fn a_stereo_tone_comes_out_as_the_same_tone_in_aac() {
    let pcm = tone(3.0, 2, 0);
    let packets = opus_packets(&pcm, 2);
    let mut t = OpusToAac::new(2).expect("transcoder");
    assert_eq!(t.audio_specific_config(), [0x11, 0x90]);
    let base = 90_000;
    let out = transcode(&mut t, &packets, base);
    // 3 s is 140.6 frames of 1024; the encoder holds back its delay.
    let whole = 3 * 48_000 / AAC_FRAME as u64;
    let held = t.delay / AAC_FRAME as u64 + 1;
    assert!(
        (whole - held..=whole).contains(&(out.len() as u64)),
        "{} frames",
        out.len()
    );
    assert!(out[0].pts >= base, "nothing from before the first packet");
    for w in out.windows(2) {
        assert_eq!(w[1].pts - w[0].pts, 1920, "1024 samples apart");
    }
    let bytes: usize = out.iter().map(|f| f.data.len()).sum();
    let kbps = bytes as f64 * 8.0 / (out.len() as f64 * 1024.0 / 48_000.0) / 1000.0;
    assert!((96.0..160.0).contains(&kbps), "{kbps} kbit/s");

    let decoded = decode_aac(&t.audio_specific_config(), &out, base);
    for (c, hz) in [(0, 440.0), (1, 1000.0)] {
        let x = channel(&decoded, 2, c);
        let steady = &x[48_000..];
        let found = peak_hz(steady);
        assert!((found - hz).abs() <= 2.0, "channel {c}: {found} Hz");
        // Half scale: an RMS of 0.354 (-9 dBFS).
        let level = rms(steady);
        assert!((0.30..0.40).contains(&level), "channel {c}: RMS {level}");
    }
}

#[test]
fn a_mono_stream_stays_mono() {
    let pcm = tone(1.0, 1, 0);
    let mut t = OpusToAac::new(1).expect("transcoder");
    assert_eq!(t.audio_specific_config(), [0x11, 0x88]);
    let out = transcode(&mut t, &opus_packets(&pcm, 1), 0);
    let decoded = decode_aac(&t.audio_specific_config(), &out, 0);
    let found = peak_hz(&decoded[24_000..]);
    assert!((found - 440.0).abs() <= 2.0, "{found} Hz");
}

/// What a player hears of the AAC at time T is what it would hear of the Opus at T:
/// a tone that starts 500 ms in starts at the same sample in both, within 1 ms.
#[test]
fn aac_frames_are_timed_like_the_opus_they_came_from() {
    let pcm = tone(1.5, 2, 24_000);
    let packets = opus_packets(&pcm, 2);
    let mut dec = opus::Decoder::new(48_000, opus::Channels::Stereo).expect("decoder");
    let mut opus_pcm = Vec::new();
    let mut buf = vec![0f32; 960 * 2];
    for p in &packets {
        dec.decode_float(p, &mut buf, false).expect("decodes");
        opus_pcm.extend_from_slice(&buf);
    }
    let base = 1_000_000;
    let mut t = OpusToAac::new(2).expect("transcoder");
    let out = transcode(&mut t, &packets, base);
    let aac_pcm = decode_aac(&t.audio_specific_config(), &out, base);
    let from_opus = onset(&channel(&opus_pcm, 2, 0));
    let from_aac = onset(&channel(&aac_pcm, 2, 0));
    assert!(
        from_opus.abs_diff(from_aac) <= 48,
        "Opus sounds at sample {from_opus}, its AAC at {from_aac}"
    );
}

#[test]
fn lost_packets_are_concealed_and_time_keeps_its_place() {
    let packets = opus_packets(&tone(2.0, 2, 0), 2);
    let mut t = OpusToAac::new(2).expect("transcoder");
    let mut out = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        // Packets 20..23 and 60 lost on the way.
        if (20..23).contains(&i) || i == 60 {
            continue;
        }
        t.push(p, i as i64 * PACKET_TICKS).expect("packet");
        while let Some(f) = t.pop() {
            out.push(f);
        }
    }
    for w in out.windows(2) {
        assert_eq!(w[1].pts - w[0].pts, 1920);
    }
    // Every sample of the 2 s went in (less the encoder's delay at the start).
    let last = out.last().expect("frames").pts + 1920;
    assert!((2 * 90_000 - last).abs() < 1920 + ticks(t.delay), "{last}");
}

#[test]
fn a_duplicate_packet_is_dropped() {
    let packets = opus_packets(&tone(1.0, 1, 0), 1);
    let mut t = OpusToAac::new(1).expect("transcoder");
    for (i, p) in packets.iter().enumerate().take(10) {
        t.push(p, i as i64 * PACKET_TICKS).expect("packet");
    }
    let fed = t.fed;
    t.push(&packets[9], 9 * PACKET_TICKS).expect("a duplicate");
    assert_eq!(t.fed, fed);
}

#[test]
fn a_jump_in_input_time_restarts_the_count_there() {
    let packets = opus_packets(&tone(1.0, 2, 0), 2);
    let mut t = OpusToAac::new(2).expect("transcoder");
    let mut pts = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        // Ten seconds later from packet 25 on.
        let at = i as i64 * PACKET_TICKS + if i >= 25 { 900_000 } else { 0 };
        t.push(p, at).expect("packet");
        while let Some(f) = t.pop() {
            pts.push(f.pts);
        }
    }
    let jump = pts
        .iter()
        .position(|&p| p >= 900_000)
        .expect("after the jump");
    assert!(pts[jump] >= 25 * PACKET_TICKS + 900_000);
    assert!(pts[jump] < 25 * PACKET_TICKS + 900_000 + ticks(t.delay) + 1920);
    assert!(pts[..jump].windows(2).all(|w| w[1] - w[0] == 1920));
    assert!(pts[jump..].windows(2).all(|w| w[1] - w[0] == 1920));
}

#[test]
fn a_packet_that_does_not_decode_is_concealed_and_time_goes_on() {
    let packets = opus_packets(&tone(1.0, 2, 0), 2);
    let mut t = OpusToAac::new(2).expect("transcoder");
    let mut pts = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let bad = [0xff_u8, 0xff, 0xff];
        let oversized = vec![0x78; MAX_OPUS_PACKET + 1];
        let packet: &[u8] = match i {
            10 => &bad,
            11 => &oversized,
            _ => p,
        };
        let result = t.push(packet, i as i64 * PACKET_TICKS);
        assert_eq!(
            result.is_err(),
            i == 10 || i == 11,
            "packet {i}: {result:?}"
        );
        while let Some(f) = t.pop() {
            pts.push(f.pts);
        }
    }
    assert_eq!(t.fed, 50 * 960);
    assert!(pts.windows(2).all(|w| w[1] - w[0] == 1920));
}

#[test]
fn only_mono_and_stereo_are_taken() {
    for channels in [0, 3, 8] {
        assert!(matches!(
            OpusToAac::new(channels),
            Err(Error::Unsupported(_))
        ));
    }
}
