//! Decoder, resampler and encoder, chained; see the crate docs.

use crate::Error;
use rubato::audioadapter_buffers::direct::SequentialSliceOfVecs;
use rubato::{
    Async, FixedAsync, Resampler, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};
use std::collections::VecDeque;
use symphonia_codec_aac::AacDecoder;
use symphonia_core::codecs::audio::well_known::CODEC_ID_AAC;
use symphonia_core::codecs::audio::{AudioCodecParameters, AudioDecoder, AudioDecoderOptions};
use symphonia_core::packet::PacketRef;
use symphonia_core::units::{Duration, Timestamp};

/// Opus's rate: every Opus stream decodes at 48 kHz.
pub const OPUS_RATE: u32 = 48_000;
/// Samples per channel in one Opus frame of the default length: 20 ms, what WebRTC
/// expects.
pub const OPUS_FRAME: usize = 960;

/// How long each Opus packet made is. 40 ms halves the packets (and their per-viewer
/// header, SRTP and send) at 20 ms more latency and a coarser loss: every receiver
/// decodes it (RFC 6716 allows 2.5 to 60 ms; RFC 7587 needs no signalling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpusFrameLength {
    #[default]
    Ms20,
    Ms40,
}

impl OpusFrameLength {
    /// Samples per channel at 48 kHz.
    pub fn samples(self) -> usize {
        match self {
            OpusFrameLength::Ms20 => OPUS_FRAME,
            OpusFrameLength::Ms40 => 2 * OPUS_FRAME,
        }
    }
}
/// Samples per channel in one AAC-LC frame.
const AAC_FRAME: usize = 1024;
/// Ticks per second of the timestamps in and out (MPEG's 90 kHz).
const CLOCK_HZ: i64 = 90_000;
/// Input time that differs from what the samples so far predict by more than this
/// restarts the output's count (a publisher's jump, a gap, a reconnect).
const MAX_DRIFT_TICKS: i64 = CLOCK_HZ / 5;
/// Largest Opus packet a frame can make (RFC 6716 §3.2.1 bounds a frame at 1275).
const MAX_PACKET: usize = 1500;
/// Bits per second per channel: transparent for music at 20 ms frames.
const BITRATE_PER_CHANNEL: i32 = 48_000;

/// One Opus packet (20 or 40 ms) and its presentation time in 90 kHz ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpusFrame {
    pub data: Vec<u8>,
    pub pts: i64,
}

/// AAC-LC in, Opus out: see the crate docs.
///
/// # Call contract
/// [`AacToOpus::push`] each access unit in decode order with its time, then
/// [`AacToOpus::pop`] until `None`.
pub struct AacToOpus {
    decoder: AacDecoder,
    channels: usize,
    /// Input samples per second.
    rate: u32,
    /// `None` when the input is at 48 kHz already.
    resampler: Option<Async<f32>>,
    /// Resampled frames still to drop at the start of a run: the resampler's delay, so
    /// that output sample 0 is input sample 0.
    to_skip: usize,
    encoder: opus::Encoder,
    /// One decoded frame, per channel.
    decoded: Vec<Vec<f32>>,
    /// The resampler's output, per channel.
    resampled: Vec<Vec<f32>>,
    /// 48 kHz samples, interleaved, not yet a whole Opus frame.
    pending: Vec<f32>,
    /// Input time of this run's first sample, and 48 kHz samples encoded since.
    base: Option<i64>,
    encoded: u64,
    /// Where the next input frame is expected, in ticks.
    next_in: Option<i64>,
    /// Samples per channel in each packet made.
    frame: usize,
    out: VecDeque<OpusFrame>,
}

impl std::fmt::Debug for AacToOpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AacToOpus")
            .field("channels", &self.channels)
            .field("rate", &self.rate)
            .field("base", &self.base)
            .field("encoded", &self.encoded)
            .finish_non_exhaustive()
    }
}

fn unsupported(e: impl std::fmt::Display) -> Error {
    Error::Unsupported(e.to_string())
}

fn encode_error(e: opus::Error) -> Error {
    Error::Encode(e.to_string())
}

impl AacToOpus {
    /// A transcoder for the AAC stream whose AudioSpecificConfig is `asc`.
    pub fn new(asc: &[u8]) -> Result<Self, Error> {
        Self::with_frames(asc, OpusFrameLength::default())
    }

    /// [`AacToOpus::new`], making Opus packets of `length`.
    pub fn with_frames(asc: &[u8], length: OpusFrameLength) -> Result<Self, Error> {
        let frame = length.samples();
        let mut params = AudioCodecParameters::new();
        params
            .for_codec(CODEC_ID_AAC)
            .with_extra_data(asc.to_vec().into_boxed_slice());
        let decoder =
            AacDecoder::try_new(&params, &AudioDecoderOptions::default()).map_err(unsupported)?;
        let decoded_params = decoder.codec_params();
        let rate = decoded_params
            .sample_rate
            .filter(|r| (8_000..=96_000).contains(r))
            .ok_or_else(|| unsupported("no usable sample rate"))?;
        let channels = decoded_params
            .channels
            .as_ref()
            .map_or(0, |c| c.count())
            .clamp(0, 2);
        let opus_channels = match channels {
            1 => opus::Channels::Mono,
            2 => opus::Channels::Stereo,
            _ => return Err(unsupported("no channels")),
        };
        let resampler = if rate == OPUS_RATE {
            None
        } else {
            let params = SincInterpolationParameters {
                sinc_len: 64,
                f_cutoff: None,
                oversampling_factor: 128,
                interpolation: SincInterpolationType::Linear,
                window: WindowFunction::Blackman2,
            };
            let ratio = f64::from(OPUS_RATE) / f64::from(rate);
            Some(
                Async::<f32>::new_sinc(ratio, 1.0, &params, AAC_FRAME, channels, FixedAsync::Input)
                    .map_err(unsupported)?,
            )
        };
        let mut encoder = opus::Encoder::new(OPUS_RATE, opus_channels, opus::Application::Audio)
            .map_err(encode_error)?;
        encoder
            .set_bitrate(opus::Bitrate::Bits(BITRATE_PER_CHANNEL * channels as i32))
            .map_err(encode_error)?;
        let out_max = resampler
            .as_ref()
            .map_or(AAC_FRAME, |r| r.output_frames_max());
        Ok(AacToOpus {
            decoder,
            channels,
            rate,
            to_skip: resampler.as_ref().map_or(0, |r| r.output_delay()),
            resampler,
            encoder,
            decoded: vec![vec![0.0; AAC_FRAME]; channels],
            resampled: vec![vec![0.0; out_max]; channels],
            pending: Vec::with_capacity(2 * frame * channels),
            frame,
            base: None,
            encoded: 0,
            next_in: None,
            out: VecDeque::new(),
        })
    }

    /// Channels of the Opus made (1 or 2).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// One AAC access unit (no ADTS header) presented at `pts` (90 kHz ticks). A frame
    /// that does not decode is replaced by silence, so that time goes on, and its error
    /// is returned; the transcoder stays usable.
    pub fn push(&mut self, aac: &[u8], pts: i64) -> Result<(), Error> {
        let drifted = self
            .next_in
            .is_none_or(|expected| (pts - expected).abs() > MAX_DRIFT_TICKS);
        if drifted {
            self.restart(pts);
        }
        self.next_in = Some(pts + AAC_FRAME as i64 * CLOCK_HZ / i64::from(self.rate));
        let decoded = self.decode(aac);
        if decoded.is_err() {
            for plane in &mut self.decoded {
                plane.fill(0.0);
            }
        }
        self.resample()?;
        self.encode()?;
        decoded
    }

    /// The next Opus frame made, oldest first.
    pub fn pop(&mut self) -> Option<OpusFrame> {
        self.out.pop_front()
    }

    /// A new run from `pts`: what is pending is dropped, the resampler starts afresh.
    fn restart(&mut self, pts: i64) {
        self.pending.clear();
        if let Some(r) = &mut self.resampler {
            r.reset();
            self.to_skip = r.output_delay();
        }
        self.base = Some(pts);
        self.encoded = 0;
    }

    /// Decodes into `self.decoded`, 1024 samples per channel.
    fn decode(&mut self, aac: &[u8]) -> Result<(), Error> {
        let packet = PacketRef::new(0, Timestamp::new(0), Duration::new(AAC_FRAME as u64), aac);
        let buf = self
            .decoder
            .decode_ref(&packet)
            .map_err(|e| Error::Decode(e.to_string()))?;
        if buf.frames() != AAC_FRAME || buf.num_planes() != self.channels {
            return Err(Error::Decode(format!(
                "{} frames in {} planes",
                buf.frames(),
                buf.num_planes()
            )));
        }
        buf.copy_to_slice_planar::<f32, _>(&mut self.decoded);
        Ok(())
    }

    /// Takes `self.decoded` to 48 kHz, interleaved onto `pending`.
    fn resample(&mut self) -> Result<(), Error> {
        let (planes, frames) = match &mut self.resampler {
            None => (&self.decoded, AAC_FRAME),
            Some(r) => {
                let input = SequentialSliceOfVecs::new(&self.decoded, self.channels, AAC_FRAME)
                    .map_err(|e| Error::Decode(e.to_string()))?;
                let capacity = self.resampled.first().map_or(0, Vec::len);
                let mut output =
                    SequentialSliceOfVecs::new_mut(&mut self.resampled, self.channels, capacity)
                        .map_err(|e| Error::Decode(e.to_string()))?;
                let (_, written) = r
                    .process_into_buffer(&input, &mut output, None)
                    .map_err(|e| Error::Decode(e.to_string()))?;
                (&self.resampled, written)
            }
        };
        let skip = self.to_skip.min(frames);
        self.to_skip -= skip;
        for i in skip..frames {
            for plane in planes {
                self.pending.push(plane[i].clamp(-1.0, 1.0));
            }
        }
        Ok(())
    }

    /// Encodes every whole frame pending.
    fn encode(&mut self) -> Result<(), Error> {
        let frame_len = self.frame * self.channels;
        let mut packet = [0u8; MAX_PACKET];
        let mut taken = 0;
        let mut result = Ok(());
        while self.pending.len() - taken >= frame_len {
            let samples = &self.pending[taken..taken + frame_len];
            taken += frame_len;
            let pts =
                self.base.unwrap_or(0) + self.encoded as i64 * CLOCK_HZ / i64::from(OPUS_RATE);
            self.encoded += self.frame as u64;
            match self.encoder.encode_float(samples, &mut packet) {
                Ok(len) => self.out.push_back(OpusFrame {
                    data: packet[..len].to_vec(),
                    pts,
                }),
                Err(e) => result = Err(encode_error(e)),
            }
        }
        self.pending.drain(..taken);
        result
    }
}

#[cfg(test)]
mod tests;
