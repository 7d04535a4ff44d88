//! Opus in, AAC-LC out: libopus's decoder, then Fraunhofer's FDK AAC encoder (through
//! the `fdk-aac` crate), both at 48 kHz, so no resampling.
//!
//! Why FDK AAC: it is the reference-grade AAC-LC encoder (Android's, ffmpeg's
//! `libfdk_aac`), it costs about 0.3 MB and 0.3% of a core per stereo stream, and it
//! builds with a C++ compiler alone. libxaac (Apache-2.0, `xaac-rs`) sounds the same
//! on our measures but takes 57 MB per encoder (its state is sized for every USAC
//! mode) and needs libclang to build. FDK's licence is its own (BSD-like, no patent
//! grant): `deny.toml` allows it for `fdk-aac-sys` alone. See docs/webrtc.md.
//!
//! Timestamps: an Opus packet carries 2.5 to 120 ms, an AAC frame 1024 samples, so
//! output frames do not line up with input packets. Output time is counted in 48 kHz
//! samples from the first packet (or the last restart), less the encoder's delay, so
//! that each AAC frame decodes to the samples that were presented at its time:
//! - a gap in the input (packets lost on the way, a silent DTX stretch) is filled by
//!   the Opus decoder's concealment, so that time keeps its place;
//! - a packet that overlaps what was decoded already (a duplicate) is dropped;
//! - a jump of more than [`MAX_DRIFT_TICKS`] restarts the count at the packet.
//!
//! The encoder's first frames hold its delay, samples from before the first packet:
//! they are not output, so the first frame starts at or after the first packet.

use crate::Error;
use fdk_aac::enc::{
    AudioObjectType, BitRate, ChannelMode, Encoder, EncoderError, EncoderParams, Transport,
};
use std::collections::VecDeque;

/// The rate Opus decodes at and the AAC is made at.
pub const AAC_RATE: u32 = 48_000;
/// Samples per channel in one AAC-LC frame.
pub const AAC_FRAME: usize = 1024;
/// Ticks per second of the timestamps in and out (MPEG's 90 kHz).
const CLOCK_HZ: i64 = 90_000;
/// Most samples per channel in one Opus packet: 120 ms (RFC 6716 §3.2.5).
const MAX_PACKET_SAMPLES: usize = 5760;
/// Concealment comes in steps of 2.5 ms, the shortest Opus frame.
const CONCEAL_STEP: usize = 120;
/// Input time that differs from what the samples so far predict by more than this
/// restarts the count (a publisher's jump, a long gap, a reconnect); within it, a gap
/// is concealed.
pub const MAX_DRIFT_TICKS: i64 = CLOCK_HZ / 5;
/// Bits per second per channel: AAC-LC is transparent for most material at 64 kbit/s
/// per channel (128 kbit/s stereo), what most live encoders send.
const BITRATE_PER_CHANNEL: u32 = 64_000;
/// Largest AAC frame: 6144 bits per channel (ISO/IEC 14496-3 §4.5.3.2).
const MAX_AAC_FRAME: usize = 768;
/// Largest Opus packet taken: 120 ms of 1275-byte frames (RFC 6716 §3.2.5 and §3.4)
/// is 48 frames, about 61 KB; anything larger is not Opus.
pub const MAX_OPUS_PACKET: usize = 48 * 1275 + 2;

/// One raw AAC-LC frame (no ADTS header) and its presentation time in 90 kHz ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AacFrame {
    pub data: Vec<u8>,
    pub pts: i64,
}

/// Opus in, AAC-LC out: see the module docs.
///
/// # Call contract
/// [`OpusToAac::push`] each Opus packet in order with its time, then
/// [`OpusToAac::pop`] until `None`. The AAC's decoder configuration is
/// [`OpusToAac::audio_specific_config`], fixed for the transcoder's life.
pub struct OpusToAac {
    decoder: opus::Decoder,
    encoder: Encoder,
    channels: usize,
    /// Samples of the encoder's delay: its output sample `n` is input sample `n - delay`.
    delay: u64,
    /// The encoder's output.
    packet: Vec<u8>,
    /// One decoded packet, interleaved.
    decoded: Vec<i16>,
    /// 48 kHz samples, interleaved, not yet a whole AAC frame.
    pending: Vec<i16>,
    /// Input time of this run's first sample, and samples given to the encoder since.
    base: i64,
    fed: u64,
    /// Samples out of the encoder this run, in the frames it made (counting the
    /// delay it holds).
    encoded: u64,
    /// Samples per channel of the last packet decoded: what a lost one is assumed to
    /// have been.
    last_samples: usize,
    /// Whether a packet came since the start: the first one starts a run.
    running: bool,
    out: VecDeque<AacFrame>,
}

impl std::fmt::Debug for OpusToAac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpusToAac")
            .field("channels", &self.channels)
            .field("base", &self.base)
            .field("fed", &self.fed)
            .finish_non_exhaustive()
    }
}

fn decode_error(e: opus::Error) -> Error {
    Error::Decode(e.to_string())
}

fn encode_error(e: EncoderError) -> Error {
    Error::Encode(e.to_string())
}

/// The AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1) of AAC-LC at 48 kHz with
/// `channels` channels (1 or 2): object type 2, frequency index 3.
fn audio_specific_config(channels: usize) -> [u8; 2] {
    let config = (2u16 << 11) | (3 << 7) | ((channels as u16 & 0x0f) << 3);
    config.to_be_bytes()
}

impl OpusToAac {
    /// A transcoder for Opus of `channels` channels (the stream's OpusHead count);
    /// anything but 1 or 2 is refused.
    pub fn new(channels: usize) -> Result<Self, Error> {
        let opus_channels = match channels {
            1 => opus::Channels::Mono,
            2 => opus::Channels::Stereo,
            n => return Err(Error::Unsupported(format!("Opus with {n} channels"))),
        };
        let decoder = opus::Decoder::new(AAC_RATE, opus_channels).map_err(decode_error)?;
        let encoder = Encoder::new(EncoderParams {
            bit_rate: BitRate::Cbr(BITRATE_PER_CHANNEL * channels as u32),
            sample_rate: AAC_RATE,
            transport: Transport::Raw,
            channels: if channels == 1 {
                ChannelMode::Mono
            } else {
                ChannelMode::Stereo
            },
            audio_object_type: AudioObjectType::Mpeg4LowComplexity,
        })
        .map_err(encode_error)?;
        let info = encoder.info().map_err(encode_error)?;
        if info.frameLength as usize != AAC_FRAME {
            return Err(Error::Encode(format!(
                "{} samples per frame",
                info.frameLength
            )));
        }
        Ok(OpusToAac {
            decoder,
            encoder,
            channels,
            // 2048 at 48 kHz, what the decoders see too (test
            // `aac_frames_are_timed_like_the_opus_they_came_from`).
            delay: u64::from(info.nDelay),
            packet: vec![0; MAX_AAC_FRAME * channels],
            decoded: vec![0; MAX_PACKET_SAMPLES * channels],
            pending: Vec::with_capacity((AAC_FRAME + MAX_PACKET_SAMPLES) * channels),
            base: 0,
            fed: 0,
            encoded: 0,
            last_samples: 960,
            running: false,
            out: VecDeque::new(),
        })
    }

    /// Channels of the AAC made (1 or 2).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The AAC's AudioSpecificConfig: AAC-LC, 48 kHz, [`OpusToAac::channels`].
    pub fn audio_specific_config(&self) -> [u8; 2] {
        audio_specific_config(self.channels)
    }

    /// The AudioSpecificConfig a transcoder for `channels` (1 or 2) makes, known
    /// before one is made.
    pub fn audio_specific_config_for(channels: usize) -> [u8; 2] {
        audio_specific_config(channels.clamp(1, 2))
    }

    /// One Opus packet presented at `pts` (90 kHz ticks). A packet that does not decode
    /// is concealed (the decoder guesses its samples from the last ones), so that time
    /// goes on, and its error is returned; the transcoder stays usable.
    pub fn push(&mut self, packet: &[u8], pts: i64) -> Result<(), Error> {
        let expected = self.base + ticks(self.fed);
        let gap = pts.saturating_sub(expected);
        if !self.running || gap.abs() > MAX_DRIFT_TICKS {
            self.restart(pts);
        } else if gap > 0 {
            // Lost packets (or DTX): their samples, concealed, in 2.5 ms steps.
            let missing = samples(gap) / CONCEAL_STEP * CONCEAL_STEP;
            self.conceal(missing)?;
        } else if samples(-gap) >= CONCEAL_STEP {
            // Samples for this time were decoded already: a duplicate.
            return Ok(());
        }
        let decoded = self.decode(packet);
        self.encode()?;
        decoded
    }

    /// The next AAC frame made, oldest first.
    pub fn pop(&mut self) -> Option<AacFrame> {
        self.out.pop_front()
    }

    /// A new run from `pts`: pending samples are dropped, the count starts afresh, and
    /// the encoder's delay holds samples of the old run, which are not output.
    fn restart(&mut self, pts: i64) {
        self.running = true;
        self.pending.clear();
        self.base = pts;
        self.fed = 0;
        self.encoded = 0;
        let _ = self.decoder.reset_state();
    }

    /// Decodes one packet onto `pending`; a packet that does not decode is concealed.
    fn decode(&mut self, packet: &[u8]) -> Result<(), Error> {
        let result = if packet.len() > MAX_OPUS_PACKET {
            Err(Error::Decode(format!("{} bytes", packet.len())))
        } else {
            self.decoder
                .decode(packet, &mut self.decoded, false)
                .map_err(decode_error)
        };
        match result {
            Ok(n) => {
                let n = n.min(MAX_PACKET_SAMPLES);
                self.last_samples = n.max(CONCEAL_STEP);
                self.take(n);
                Ok(())
            }
            Err(e) => {
                self.conceal(self.last_samples)?;
                Err(e)
            }
        }
    }

    /// `n` samples per channel guessed by the decoder from the last ones.
    fn conceal(&mut self, mut n: usize) -> Result<(), Error> {
        while n > 0 {
            let step = n.min(MAX_PACKET_SAMPLES);
            let len = step * self.channels;
            let got = match self.decoder.decode(&[], &mut self.decoded[..len], false) {
                Ok(got) => got.min(step),
                Err(_) => {
                    // No concealment before the first packet: silence.
                    self.decoded[..len].fill(0);
                    step
                }
            };
            self.take(got.max(CONCEAL_STEP).min(step));
            n -= step;
        }
        Ok(())
    }

    /// Moves `n` decoded samples per channel onto `pending`.
    fn take(&mut self, n: usize) {
        let len = (n * self.channels).min(self.decoded.len());
        self.pending.extend_from_slice(&self.decoded[..len]);
        self.fed += n as u64;
    }

    /// Encodes every whole frame pending; frames that hold only the encoder's delay
    /// (samples from before this run) are not output.
    fn encode(&mut self) -> Result<(), Error> {
        let frame_len = AAC_FRAME * self.channels;
        let mut taken = 0;
        let mut result = Ok(());
        while self.pending.len() - taken >= frame_len {
            let samples = &self.pending[taken..taken + frame_len];
            taken += frame_len;
            match self.encoder.encode(samples, &mut self.packet) {
                Ok(info) if info.output_size > 0 => {
                    let start = self.encoded;
                    self.encoded += AAC_FRAME as u64;
                    if start >= self.delay {
                        let len = info.output_size.min(self.packet.len());
                        self.out.push_back(AacFrame {
                            data: self.packet[..len].to_vec(),
                            pts: self.base + ticks(start - self.delay),
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => result = Err(encode_error(e)),
            }
        }
        self.pending.drain(..taken);
        result
    }
}

/// 90 kHz ticks of `n` samples at 48 kHz (exact: 1 sample is 1.875 ticks, so whole
/// frames of 1024 come to 1920 ticks).
fn ticks(n: u64) -> i64 {
    i64::try_from(n.saturating_mul(CLOCK_HZ as u64) / u64::from(AAC_RATE)).unwrap_or(i64::MAX)
}

/// Samples at 48 kHz in `ticks` (at least 0).
fn samples(ticks: i64) -> usize {
    usize::try_from(ticks.max(0).saturating_mul(i64::from(AAC_RATE)) / CLOCK_HZ).unwrap_or(0)
}

#[cfg(test)]
mod tests;
