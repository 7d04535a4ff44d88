//! The media crate's integration tests: containers and codecs against real encoders' bytes and hostile input.
//! One binary for all of them: each file under `tests/` used to link the
//! crate again; modules of one binary link it once.

mod common;

mod codec_configs;
mod ffmpeg_flv;
mod flv_round_trip;
mod fmp4_mux;
mod fragment;
mod hostile_input;
mod mp4_demux;
mod rtp_hostile_input;
mod rtp_real_decoders;
mod rtp_round_trip;
mod sdp_round_trip;
mod ts_demux;
mod ts_mux;
