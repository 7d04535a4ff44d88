use super::*;

/// The AudioSpecificConfig and raw access units of an ADTS file.
fn adts(bytes: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut frames = Vec::new();
    let mut asc = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 7 {
        assert_eq!(rest[0], 0xff, "ADTS sync");
        let object_type = (rest[2] >> 6) + 1;
        let rate_index = (rest[2] >> 2) & 0x0f;
        let channels = ((rest[2] & 1) << 2) | (rest[3] >> 6);
        let header = if rest[1] & 1 == 1 { 7 } else { 9 };
        let len = (usize::from(rest[3] & 3) << 11)
            | (usize::from(rest[4]) << 3)
            | usize::from(rest[5] >> 5);
        let config = (u16::from(object_type) << 11)
            | (u16::from(rate_index) << 7)
            | (u16::from(channels) << 3);
        asc = config.to_be_bytes().to_vec();
        frames.push(rest[header..len].to_vec());
        rest = &rest[len..];
    }
    (asc, frames)
}

const STEREO_44K: &[u8] = include_bytes!("../../tests/data/tone-44k-stereo.aac");
const MONO_48K: &[u8] = include_bytes!("../../tests/data/tone-48k-mono.aac");

/// Transcodes `frames` from time 0 on; the Opus frames made.
fn transcode(asc: &[u8], frames: &[Vec<u8>], rate: i64) -> (AacToOpus, Vec<OpusFrame>) {
    let mut t = AacToOpus::new(asc).expect("transcoder");
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        t.push(f, i as i64 * 1024 * CLOCK_HZ / rate).expect("frame");
        while let Some(o) = t.pop() {
            out.push(o);
        }
    }
    (t, out)
}

/// Decodes Opus frames to interleaved 48 kHz samples.
fn decode(frames: &[OpusFrame], channels: opus::Channels) -> Vec<f32> {
    let mut d = opus::Decoder::new(OPUS_RATE, channels).expect("decoder");
    let n = channels as usize;
    let mut pcm = Vec::new();
    let mut buf = vec![0f32; OPUS_FRAME * n];
    for f in frames {
        let got = d.decode_float(&f.data, &mut buf, false).expect("decodes");
        assert_eq!(got, OPUS_FRAME);
        pcm.extend_from_slice(&buf);
    }
    pcm
}

/// The tone's frequency in one channel, from its zero crossings past the start.
fn frequency(pcm: &[f32], channels: usize, channel: usize) -> f64 {
    let samples: Vec<f32> = pcm
        .iter()
        .skip(channel)
        .step_by(channels)
        .copied()
        .collect();
    let steady = &samples[4800..samples.len() - 960];
    let crossings = steady
        .windows(2)
        .filter(|w| w[0] < 0.0 && w[1] >= 0.0)
        .count();
    crossings as f64 * f64::from(OPUS_RATE) / steady.len() as f64
}

fn rms(pcm: &[f32]) -> f32 {
    (pcm.iter().map(|s| s * s).sum::<f32>() / pcm.len() as f32).sqrt()
}

#[test]
fn a_44k_stereo_tone_comes_out_as_the_same_tone_at_48k() {
    let (asc, frames) = adts(STEREO_44K);
    let (t, out) = transcode(&asc, &frames, 44_100);
    assert_eq!(t.channels(), 2);
    // 1024-sample frames at 44.1 kHz give 1114.6 samples each at 48 kHz.
    let expected = frames.len() as f64 * 1024.0 * 48_000.0 / 44_100.0 / 960.0;
    assert!(
        (out.len() as f64 - expected).abs() <= 2.0,
        "{} Opus frames from {} AAC frames",
        out.len(),
        frames.len()
    );
    for (i, f) in out.iter().enumerate() {
        assert_eq!(
            f.pts,
            i as i64 * 1800,
            "20 ms apart from the first input's time"
        );
    }
    let pcm = decode(&out, opus::Channels::Stereo);
    for channel in 0..2 {
        let hz = frequency(&pcm, 2, channel);
        assert!((hz - 440.0).abs() < 5.0, "channel {channel}: {hz} Hz");
    }
    assert!(rms(&pcm[9600..]) > 0.05, "not silent");
}

#[test]
fn a_48k_mono_tone_is_not_resampled() {
    let (asc, frames) = adts(MONO_48K);
    let (t, out) = transcode(&asc, &frames, 48_000);
    assert_eq!(t.channels(), 1);
    assert_eq!(out.len(), frames.len() * 1024 / 960);
    let pcm = decode(&out, opus::Channels::Mono);
    let hz = frequency(&pcm, 1, 0);
    assert!((hz - 1000.0).abs() < 10.0, "{hz} Hz");
}

#[test]
fn a_frame_that_does_not_decode_becomes_silence_and_time_goes_on() {
    let (asc, frames) = adts(MONO_48K);
    let mut t = AacToOpus::new(&asc).expect("transcoder");
    let mut pts = Vec::new();
    for i in 0..20i64 {
        let result = if i == 10 {
            t.push(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x11], i * 1920)
        } else {
            t.push(&frames[i as usize], i * 1920)
        };
        assert_eq!(result.is_err(), i == 10, "frame {i}: {result:?}");
        while let Some(o) = t.pop() {
            pts.push(o.pts);
        }
    }
    assert_eq!(pts.len(), 20 * 1024 / 960);
    assert!(pts.windows(2).all(|w| w[1] - w[0] == 1800));
}

#[test]
fn a_jump_in_input_time_restarts_the_count_there() {
    let (asc, frames) = adts(MONO_48K);
    let mut t = AacToOpus::new(&asc).expect("transcoder");
    let mut pts = Vec::new();
    for i in 0..20i64 {
        // Two seconds later from frame 10 on.
        let at = i * 1920 + if i >= 10 { 180_000 } else { 0 };
        t.push(&frames[i as usize], at).expect("frame");
        while let Some(o) = t.pop() {
            pts.push(o.pts);
        }
    }
    let jump = pts
        .iter()
        .position(|&p| p >= 180_000)
        .expect("a frame after the jump");
    assert_eq!(pts[jump], 10 * 1920 + 180_000);
    assert!(pts[..jump].windows(2).all(|w| w[1] - w[0] == 1800));
}

#[test]
fn configurations_the_decoder_cannot_handle_are_refused() {
    // HE-AAC (object type 5), a 7.1 channel configuration, a truncated config.
    for asc in [&[0x2b, 0x92, 0x08, 0x00][..], &[0x12, 0x38], &[0x12]] {
        match AacToOpus::new(asc) {
            Err(Error::Unsupported(_)) => {}
            other => panic!("{asc:02x?}: {other:?}"),
        }
    }
}

#[test]
fn forty_ms_frames_are_half_as_many_and_decode_to_the_same_tone() {
    let (asc, frames) = adts(MONO_48K);
    let mut t = AacToOpus::with_frames(&asc, OpusFrameLength::Ms40).expect("transcoder");
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        t.push(f, i as i64 * 1024 * CLOCK_HZ / 48_000)
            .expect("frame");
        while let Some(o) = t.pop() {
            out.push(o);
        }
    }
    assert_eq!(out.len(), frames.len() * 1024 / 1920);
    for (i, f) in out.iter().enumerate() {
        assert_eq!(f.pts, i as i64 * 3600, "40 ms apart");
    }
    let mut d = opus::Decoder::new(OPUS_RATE, opus::Channels::Mono).expect("decoder");
    let mut pcm = Vec::new();
    let mut buf = vec![0f32; 2 * OPUS_FRAME];
    for f in &out {
        let got = d.decode_float(&f.data, &mut buf, false).expect("decodes");
        assert_eq!(got, 2 * OPUS_FRAME);
        pcm.extend_from_slice(&buf);
    }
    let hz = frequency(&pcm, 1, 0);
    assert!((hz - 1000.0).abs() < 10.0, "{hz} Hz");
}
