//! SDP: what we write for DESCRIBE parses back to the same tracks, and the ANNOUNCE
//! bodies ffmpeg and GStreamer send parse into tracks and depacketizers.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig, OpusConfig};
use sluice_media::rtp::{AacParams, RtpCodec};
use sluice_media::sdp::{
    parse_sdp, write_sdp, SdpError, SdpRange, SdpTrack, SessionDescription, MAX_LINES,
};
use sluice_media::{Track, TrackConfig};

const AVCC_720P: &[u8] = include_bytes!("../data/x264_720p.avcC");
const HVCC_1080P: &[u8] = include_bytes!("../data/x265_1080p.hvcC");

fn avc() -> AvcConfig {
    AvcConfig::parse(Bytes::from_static(AVCC_720P)).expect("avcC")
}

fn describe(tracks: &[SdpTrack<'_>], range: SdpRange) -> String {
    let desc = SessionDescription {
        session_id: 42,
        session_version: 1,
        origin_address: "127.0.0.1",
        name: "live/cam1",
        range,
        tracks,
    };
    let mut out = BytesMut::new();
    write_sdp(&desc, &mut out).expect("writes");
    String::from_utf8(out.to_vec()).expect("utf-8")
}

#[test]
fn h264_and_aac_describe_parses_back() {
    let video = Track::new(TrackConfig::H264(avc()));
    let audio = Track::new(TrackConfig::Aac(
        AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("asc"),
    ));
    let text = describe(
        &[
            SdpTrack {
                track: &video,
                payload_type: 96,
                control: "trackID=0",
            },
            SdpTrack {
                track: &audio,
                payload_type: 98,
                control: "trackID=1",
            },
        ],
        SdpRange::Live,
    );
    let TrackConfig::H264(c) = &video.config else {
        unreachable!()
    };
    let sps = BASE64.encode(&c.sps[0]);
    let pps = BASE64.encode(&c.pps[0]);
    for line in [
        "v=0",
        "o=- 42 1 IN IP4 127.0.0.1",
        "s=live/cam1",
        "c=IN IP4 0.0.0.0",
        "t=0 0",
        "a=control:*",
        "a=range:npt=now-",
        "m=video 0 RTP/AVP 96",
        "a=rtpmap:96 H264/90000",
        &format!("a=fmtp:96 packetization-mode=1;profile-level-id=64001F;sprop-parameter-sets={sps},{pps}"),
        "a=control:trackID=0",
        "m=audio 0 RTP/AVP 98",
        "a=rtpmap:98 MPEG4-GENERIC/48000/2",
        "a=fmtp:98 streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190",
        "a=control:trackID=1",
    ] {
        assert!(text.split("\r\n").any(|l| l == line), "missing {line:?} in\n{text}");
    }
    assert!(text.ends_with("\r\n"));

    let parsed = parse_sdp(text.as_bytes()).expect("parses");
    assert_eq!(parsed.control.as_deref(), Some("*"));
    assert!(parsed.skipped.is_empty());
    assert_eq!(parsed.media.len(), 2);
    let v = &parsed.media[0];
    assert_eq!(
        (v.codec, v.payload_type, v.clock_rate, v.control.as_str()),
        (RtpCodec::H264, 96, 90_000, "trackID=0")
    );
    assert_eq!(
        v.track.as_ref(),
        Some(&video),
        "the avcC rebuilt byte for byte"
    );
    let a = &parsed.media[1];
    assert_eq!(
        (a.codec, a.payload_type, a.clock_rate),
        (RtpCodec::Aac, 98, 48_000)
    );
    assert_eq!(a.track.as_ref(), Some(&audio));
    assert_eq!(a.aac, Some(AacParams::HBR));
    assert!(a.depacketizer().is_ok());
}

#[test]
fn h265_and_opus_describe_parses_back_with_vod_range() {
    let hevc = HevcConfig::parse(Bytes::from_static(HVCC_1080P)).expect("hvcC");
    let video = Track::new(TrackConfig::H265(hevc.clone()));
    let audio = Track::new(TrackConfig::Opus(OpusConfig::stereo_48k()));
    let pcmu = Track::new(TrackConfig::Pcmu { channels: 1 });
    let text = describe(
        &[
            SdpTrack {
                track: &video,
                payload_type: 97,
                control: "trackID=0",
            },
            SdpTrack {
                track: &audio,
                payload_type: 111,
                control: "trackID=1",
            },
            SdpTrack {
                track: &pcmu,
                payload_type: 0,
                control: "trackID=2",
            },
        ],
        SdpRange::Vod {
            duration_secs: 12.5,
        },
    );
    assert!(text.contains("a=range:npt=0-12.500\r\n"));
    assert!(text.contains("a=rtpmap:97 H265/90000\r\n"));
    assert!(text.contains(&format!("sprop-vps={}", BASE64.encode(&hevc.vps[0]))));
    assert!(text.contains("a=rtpmap:111 opus/48000/2\r\na=fmtp:111 sprop-stereo=1\r\n"));
    assert!(text.contains("m=audio 0 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"));
    let parsed = parse_sdp(text.as_bytes()).expect("parses");
    assert_eq!(parsed.media.len(), 3);
    let Some(Track {
        config: TrackConfig::H265(back),
        ..
    }) = &parsed.media[0].track
    else {
        panic!("H.265 track expected: {:?}", parsed.media[0]);
    };
    assert_eq!(
        (&back.vps, &back.sps, &back.pps),
        (&hevc.vps, &hevc.sps, &hevc.pps)
    );
    assert_eq!((back.width, back.height), (1920, 1080));
    assert_eq!(parsed.media[1].track.as_ref(), Some(&audio));
    assert_eq!(parsed.media[1].clock_rate, 48_000);
    assert_eq!(parsed.media[2].track.as_ref(), Some(&pcmu));
    assert_eq!(parsed.media[2].clock_rate, 8000);
}

#[test]
fn writer_rejects_what_sdp_cannot_say_and_writes_nothing() {
    let mp3 = Track::new(TrackConfig::Mp3 {
        sample_rate: 44_100,
        channels: 2,
    });
    let video = Track::new(TrackConfig::H264(avc()));
    let mut out = BytesMut::from(&b"keep"[..]);
    let tracks = [SdpTrack {
        track: &mp3,
        payload_type: 96,
        control: "trackID=0",
    }];
    let desc = SessionDescription {
        session_id: 1,
        session_version: 1,
        origin_address: "127.0.0.1",
        name: "x",
        range: SdpRange::Live,
        tracks: &tracks,
    };
    assert_eq!(
        write_sdp(&desc, &mut out),
        Err(SdpError::NoCodec { index: 0 })
    );
    let tracks = [SdpTrack {
        track: &video,
        payload_type: 96,
        control: "trackID=0\r\na=evil",
    }];
    let desc = SessionDescription {
        tracks: &tracks,
        ..desc
    };
    assert!(matches!(
        write_sdp(&desc, &mut out),
        Err(SdpError::InvalidText { .. })
    ));
    assert_eq!(&out[..], b"keep");
}

#[test]
fn vp8_vp9_and_av1_are_described() {
    let vp8 = Track::new(TrackConfig::Vp8 {
        record: Bytes::new(),
    });
    let vp9 = Track::new(TrackConfig::Vp9 {
        record: Bytes::new(),
    });
    // av1C: main profile, level 8 (4.0), main tier.
    let av1 = Track::new(TrackConfig::Av1 {
        record: Bytes::from_static(&[0x81, 0x08, 0x0c, 0x00]),
    });
    for (track, want) in [
        (
            &vp8,
            "m=video 0 RTP/AVP 99\r\na=rtpmap:99 VP8/90000\r\na=control:trackID=0\r\n",
        ),
        (
            &vp9,
            "m=video 0 RTP/AVP 100\r\na=rtpmap:100 VP9/90000\r\na=control:trackID=0\r\n",
        ),
        (
            &av1,
            "m=video 0 RTP/AVP 101\r\na=rtpmap:101 AV1/90000\r\n\
             a=fmtp:101 profile=0;level-idx=8;tier=0\r\na=control:trackID=0\r\n",
        ),
    ] {
        let payload_type = RtpCodec::for_track(track)
            .expect("codec")
            .default_payload_type();
        let text = describe(
            &[SdpTrack {
                track,
                payload_type,
                control: "trackID=0",
            }],
            SdpRange::Live,
        );
        assert!(text.ends_with(want), "{text}");
    }
}

/// What ffmpeg (`-f rtsp`) sends in its ANNOUNCE: LF or CRLF, spaces after `;`, the
/// stream's control as `streamid=N`, AAC `config` in upper-case hex.
#[test]
fn ffmpeg_announce_parses() {
    let c = avc();
    let sps = BASE64.encode(&c.sps[0]);
    let pps = BASE64.encode(&c.pps[0]);
    let sdp = format!(
        "v=0\r\n\
         o=- 0 0 IN IP4 127.0.0.1\r\n\
         s=No Name\r\n\
         c=IN IP4 127.0.0.1\r\n\
         t=0 0\r\n\
         a=tool:libavformat 61.7.100\r\n\
         m=video 0 RTP/AVP 96\r\n\
         b=AS:2000\r\n\
         a=rtpmap:96 H264/90000\r\n\
         a=fmtp:96 packetization-mode=1; sprop-parameter-sets={sps},{pps}; profile-level-id=64001F\r\n\
         a=control:streamid=0\r\n\
         m=audio 0 RTP/AVP 97\r\n\
         b=AS:128\r\n\
         a=rtpmap:97 MPEG4-GENERIC/44100/2\r\n\
         a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\n\
         a=control:streamid=1\r\n\
         m=application 0 RTP/AVP 98\r\n\
         a=rtpmap:98 smpte336m/1000\r\n\
         a=control:streamid=2\r\n\
         m=audio 0 RTP/AVP 0\r\n\
         a=control:streamid=3\r\n"
    );
    let parsed = parse_sdp(sdp.as_bytes()).expect("parses");
    assert_eq!(parsed.media.len(), 3);
    let v = &parsed.media[0];
    assert_eq!(v.control, "streamid=0");
    assert_eq!(
        v.track.as_ref().map(|t| &t.config),
        Some(&TrackConfig::H264(c.clone()))
    );
    let a = &parsed.media[1];
    assert_eq!((a.control.as_str(), a.clock_rate), ("streamid=1", 44_100));
    let Some(TrackConfig::Aac(aac)) = a.track.as_ref().map(|t| &t.config) else {
        panic!("AAC")
    };
    assert_eq!((aac.sample_rate, aac.channels), (44_100, 2));
    assert_eq!(&aac.asc[..], &[0x12, 0x10, 0x56, 0xe5, 0x00]);
    let g711 = &parsed.media[2];
    assert_eq!(
        (g711.codec, g711.payload_type, g711.clock_rate),
        (RtpCodec::Pcmu, 0, 8000)
    );
    assert_eq!(parsed.skipped.len(), 1);
    assert_eq!(parsed.skipped[0].media, "application");
    assert_eq!(parsed.skipped[0].encoding, "smpte336m");

    // Without sprop (ffmpeg's RTP muxer without global headers): codec known, track
    // left to the in-band parameter sets. GStreamer's lower-case names and LF endings.
    let bare =
        "v=0\no=- 1 1 IN IP4 0.0.0.0\ns=x\nt=0 0\nm=video 0 RTP/AVP 96\na=rtpmap:96 h264/90000\n\
                a=fmtp:96 packetization-mode=1\nm=audio 0 RTP/AVP 97\na=rtpmap:97 OPUS/48000/2\n\
                a=fmtp:97 sprop-stereo=0\nm=audio 0 RTP/AVP 98\na=rtpmap:98 mpeg4-generic/48000/1\n\
                a=fmtp:98 mode=AAC-LATM\n";
    let parsed = parse_sdp(bare.as_bytes()).expect("parses");
    assert_eq!(parsed.media.len(), 2);
    assert_eq!(
        (parsed.media[0].codec, parsed.media[0].track.is_none()),
        (RtpCodec::H264, true)
    );
    assert!(parsed.media[0].depacketizer().is_ok());
    let Some(TrackConfig::Opus(o)) = parsed.media[1].track.as_ref().map(|t| &t.config) else {
        panic!("Opus")
    };
    assert_eq!(o.channels, 1);
    assert_eq!(parsed.skipped.len(), 1, "AAC-LATM mode is not ours");
}

#[test]
fn parser_bounds_and_garbage() {
    let many = "a=x\n".repeat(MAX_LINES + 1);
    assert!(matches!(
        parse_sdp(many.as_bytes()),
        Err(SdpError::TooLarge { .. })
    ));
    let long = format!("v=0\ns={}\n", "x".repeat(10_000));
    assert!(matches!(
        parse_sdp(long.as_bytes()),
        Err(SdpError::TooLarge { .. })
    ));
    assert!(parse_sdp(&[0xff, 0xfe, b'\n']).is_err());
    assert!(matches!(
        parse_sdp(b"v=0\nnot a line\n"),
        Err(SdpError::Malformed { line: 2, .. })
    ));
    let empty = parse_sdp(b"").expect("empty is no media");
    assert!(empty.media.is_empty());
    // Lying parameters: a track-less media or a skip, never a panic.
    let lying = b"m=video 0 RTP/AVP 96\na=rtpmap:96 H264/90000\na=fmtp:96 sprop-parameter-sets=!!!,Z2Q=\n\
                  m=audio 0 RTP/AVP 97\na=rtpmap:97 MPEG4-GENERIC/0/2\na=fmtp:97 sizelength=99;config=zz\n\
                  m=audio x RTP/AVP\nm=audio 0 RTP/AVP 300\n";
    let parsed = parse_sdp(lying).expect("parses");
    assert_eq!(parsed.media.len(), 1);
    assert!(parsed.media[0].track.is_none());
    assert_eq!(parsed.skipped.len(), 3);
}
