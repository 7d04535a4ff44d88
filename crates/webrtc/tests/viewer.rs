//! A viewer's whole life against str0m as the browser, in memory and in virtual time:
//! ICE and DTLS, our SRTP media, the hand-over from str0m to our own consent answers,
//! NACKs, and the end. Every byte between the two goes through the same calls the
//! server's sockets make.

use sluice_webrtc::outbound::{Datagrams, StreamPacket};
use sluice_webrtc::restart::IceCredentials;
use sluice_webrtc::{Offered, Peer, PeerConfig, PeerEvent, PeerOutput, Role, Via, VideoCodec};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, IceCreds, Input, Output, Rtc, RtcConfig};

const SERVER: &str = "127.0.0.1:8189";
const BROWSER: &str = "127.0.0.1:50000";
/// An address an offer names that no datagram comes from.
const DECOY: &str = "192.0.2.7:9";

struct Call {
    browser: Rtc,
    server: Peer,
    now: Instant,
    /// What the browser got: video frames, audio packets.
    frames: usize,
    audio: usize,
    browser_state: Option<IceConnectionState>,
    events: Vec<PeerEvent>,
    /// Video datagrams lost on the way to the browser: every n-th, from the 20th on.
    lose_every: Option<usize>,
    seen: usize,
    lost: usize,
    /// Stream packets the server keeps for NACKs (the server's history).
    history: Vec<(StreamPacket, u32, bool, Vec<u8>)>,
    resent: usize,
    /// STUN answers the browser got from us once str0m was gone.
    our_stun: usize,
    /// Whether the browser's RTCP is kept from the server (a viewer that sends none).
    mute_rtcp: bool,
    /// Where the browser is now (an ICE restart may move it).
    at: SocketAddr,
}

/// Whether a datagram is RTCP (RFC 5761 §4: payload types 192-223 after an RTP-like
/// first byte).
fn is_rtcp(d: &[u8]) -> bool {
    (128..192).contains(&d[0]) && (192..224).contains(&d[1])
}

fn addr(a: &str) -> SocketAddr {
    a.parse().unwrap()
}

impl Call {
    fn start() -> Call {
        Call::start_with(|offer| offer)
    }

    /// A call whose offer `edit` changes on its way to the server.
    fn start_with(edit: impl FnOnce(String) -> String) -> Call {
        let now = Instant::now();
        let mut browser = RtcConfig::new()
            .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
            .clear_codecs()
            .enable_h264(true)
            .enable_opus(true, false)
            .build(now);
        browser.add_local_candidate(Candidate::host(addr(BROWSER), "udp").unwrap());
        let mut api = browser.sdp_api();
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
        let (offer, pending) = api.apply().unwrap();
        let config = PeerConfig {
            candidates: vec![addr(SERVER)],
            tcp_candidates: Vec::new(),
        };
        let role = Role::Play(Offered {
            video: Some(VideoCodec::H264),
            opus: true,
        });
        let offer = edit(offer.to_sdp_string());
        let answer = Peer::answer(&offer, role, &config, now).unwrap();
        let sdp = SdpAnswer::from_sdp_string(&answer.sdp).unwrap();
        browser.sdp_api().accept_answer(pending, sdp).unwrap();
        Call {
            browser,
            server: answer.peer,
            now,
            frames: 0,
            audio: 0,
            browser_state: None,
            events: Vec::new(),
            lose_every: None,
            seen: 0,
            lost: 0,
            history: Vec::new(),
            resent: 0,
            our_stun: 0,
            mute_rtcp: false,
            at: addr(BROWSER),
        }
    }

    /// Moves every datagram both ways until both wait for time.
    fn exchange(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            while let Ok(out) = self.browser.poll_output() {
                match out {
                    Output::Transmit(t) if self.mute_rtcp && is_rtcp(&t.contents) => {}
                    Output::Transmit(t) => {
                        moved = true;
                        let _ =
                            self.server
                                .handle_datagram(self.now, Via::Udp, t.source, &t.contents);
                    }
                    Output::Event(Event::MediaData(d)) => {
                        if d.data.len() > 100 {
                            self.frames += 1;
                        } else {
                            self.audio += 1;
                        }
                    }
                    Output::Event(Event::IceConnectionStateChange(s)) => {
                        self.browser_state = Some(s)
                    }
                    Output::Event(_) => {}
                    Output::Timeout(_) => break,
                }
            }
            let mut out = Datagrams::default();
            loop {
                match self.server.poll_output() {
                    PeerOutput::Transmit {
                        destination,
                        contents,
                    } => out.push(destination, &contents),
                    PeerOutput::Event(e) => self.events.push(e),
                    PeerOutput::Timeout(_) => break,
                }
            }
            while let Some(resend) = self.server.next_resend() {
                let kept = self.history.iter().find(|h| h.0 == resend.packet);
                if let Some((_, ts, marker, payload)) = kept {
                    self.resent += 1;
                    self.server.resend(resend, *ts, *marker, payload, &mut out);
                }
            }
            moved |= !out.is_empty();
            self.deliver(&out);
            if !moved {
                return;
            }
        }
        panic!("the peers never settled");
    }

    fn deliver(&mut self, out: &Datagrams) {
        for (to, d) in out.iter() {
            // What still goes to where the browser was before it moved is lost.
            if to != self.at {
                assert_eq!(to, addr(BROWSER));
                continue;
            }
            if d[0] < 4 && !self.server.in_handshake() {
                self.our_stun += 1;
            }
            let video = d.len() > 300 && !(200..224).contains(&d[1]);
            if video {
                self.seen += 1;
                if let Some(n) = self.lose_every {
                    if self.seen >= 20 && self.seen.is_multiple_of(n) {
                        self.lost += 1;
                        continue;
                    }
                }
            }
            let r = Receive::new(Protocol::Udp, addr(SERVER), to, d).unwrap();
            self.browser
                .handle_input(Input::Receive(self.now, r))
                .unwrap();
        }
    }

    /// Advances both clocks by `step`.
    fn tick(&mut self, step: Duration) {
        self.now += step;
        self.browser.handle_input(Input::Timeout(self.now)).unwrap();
        self.server.handle_timeout(self.now).unwrap();
        self.exchange();
    }

    /// Sends a frame of the stream (video: three packets, audio: one), as the
    /// fan-out would.
    fn send_frame(&mut self, n: u32) {
        let mut out = Datagrams::default();
        for i in 0..3u16 {
            // FU-A fragments of one IDR slice: start, middle, end.
            let (indicator, header) = (0x7c, [0x85, 0x05, 0x45][i as usize]);
            let mut payload = vec![indicator, header];
            payload.resize(1000, n as u8);
            let packet = StreamPacket {
                ssrc: 77,
                seq: (n * 3) as u16 + i,
            };
            let (ts, marker) = (n * 3000, i == 2);
            self.history.push((packet, ts, marker, payload.clone()));
            self.server
                .send_rtp(true, packet, ts, marker, &payload, self.now, &mut out);
        }
        let audio = StreamPacket {
            ssrc: 78,
            seq: n as u16,
        };
        self.server.send_rtp(
            false,
            audio,
            n * 960,
            false,
            &[0xfc; 60],
            self.now,
            &mut out,
        );
        self.deliver(&out);
        self.exchange();
    }

    fn connect(&mut self) {
        self.exchange();
        for _ in 0..200 {
            if self.events.contains(&PeerEvent::Connected) {
                return;
            }
            self.tick(Duration::from_millis(10));
        }
        panic!("no connection: {:?}", self.events);
    }
}

#[test]
fn a_viewer_plays_with_our_srtp_and_keeps_its_consent_after_str0m_is_gone() {
    let mut call = Call::start();
    call.connect();
    assert!(call.server.in_handshake());
    // 60 s of a 30 fps stream.
    for n in 0..1800 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
    }
    assert!(call.frames >= 1790, "{} frames", call.frames);
    assert!(call.audio >= 1790, "{} audio packets", call.audio);
    // The browser's RTCP showed its DTLS done: str0m went, and our own consent answers
    // kept the browser's ICE agent content for the remaining minute.
    assert!(!call.server.in_handshake());
    assert!(call.our_stun >= 10, "{} consent answers", call.our_stun);
    assert!(
        matches!(
            call.browser_state,
            Some(IceConnectionState::Connected | IceConnectionState::Completed)
        ),
        "{:?}",
        call.browser_state
    );
    assert!(!call.events.contains(&PeerEvent::Disconnected));
    assert!(call.server.is_alive());

    // A DELETE: the browser hears a BYE; with the browser silent from then on, the
    // session ends (here at once, its close being ours).
    call.server.close();
    call.exchange();
    assert!(call.events.contains(&PeerEvent::Disconnected));
    assert!(!call.server.is_alive());
}

#[test]
fn a_viewer_that_sends_no_rtcp_loses_str0m_after_the_settle_time_and_plays_on() {
    let mut call = Call::start();
    call.mute_rtcp = true;
    call.connect();
    let frame = Duration::from_millis(33);
    let mut n = 0;
    // Until shortly before SETTLE, str0m stays for the viewer's DTLS retransmissions.
    let started = call.now;
    while call.now - started < sluice_webrtc::SETTLE - Duration::from_secs(1) {
        call.send_frame(n);
        call.tick(frame);
        n += 1;
    }
    assert!(call.server.in_handshake());
    while call.now - started < sluice_webrtc::SETTLE + Duration::from_secs(1) {
        call.send_frame(n);
        call.tick(frame);
        n += 1;
    }
    assert!(!call.server.in_handshake(), "str0m kept without RTCP");
    // Media and consent go on without str0m, for longer than the consent time.
    let (frames, stun) = (call.frames, call.our_stun);
    for _ in 0..(40 * 30) {
        call.send_frame(n);
        call.tick(frame);
        n += 1;
    }
    assert!(
        call.frames >= frames + 1190,
        "{} frames",
        call.frames - frames
    );
    assert!(
        call.our_stun >= stun + 5,
        "{} consent answers",
        call.our_stun
    );
    assert!(!call.events.contains(&PeerEvent::Disconnected));
    assert!(call.server.is_alive());
}

#[test]
fn an_ice_restart_moves_the_media_to_where_the_new_checks_come_from_keeping_srtp() {
    let mut call = Call::start();
    call.connect();
    let mut n = 0;
    for _ in 0..60 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
        n += 1;
    }
    assert!(!call.server.in_handshake());
    // The browser moves (a new network) and restarts ICE: the PATCH's exchange of
    // credentials, then checks from its new address only.
    let moved = addr("127.0.0.1:50002");
    let ours = IceCredentials::random().unwrap();
    let theirs = IceCredentials::random().unwrap();
    let old_ufrag = call.server.ufrag().to_owned();
    call.server.restart_ice(ours.clone(), theirs.clone());
    assert_ne!(call.server.ufrag(), old_ufrag);
    let mut api = call.browser.direct_api();
    api.set_local_ice_credentials(IceCreds {
        ufrag: theirs.ufrag,
        pass: theirs.pwd,
    });
    api.set_remote_ice_credentials(IceCreds {
        ufrag: ours.ufrag,
        pass: ours.pwd,
    });
    assert!(api.invalidate_candidate(&Candidate::host(addr(BROWSER), "udp").unwrap()));
    call.browser
        .add_local_candidate(Candidate::host(moved, "udp").unwrap());
    call.at = moved;
    // Media keeps its SRTP (no new DTLS) and reaches the browser at its new address
    // (`deliver` checks every datagram's destination).
    let frames = call.frames;
    for _ in 0..300 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
        n += 1;
    }
    assert_eq!(call.server.remote(), Some(moved));
    assert!(
        call.frames >= frames + 280,
        "{} frames",
        call.frames - frames
    );
    assert!(!call.events.contains(&PeerEvent::Disconnected));
}

#[test]
fn a_browser_that_goes_silent_loses_its_session_after_the_consent_time() {
    let mut call = Call::start();
    call.connect();
    for n in 0..100 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
    }
    assert!(!call.server.in_handshake());
    // The browser vanishes: no more datagrams from it.
    let mut at = call.now;
    let mut ended = None;
    for _ in 0..40 {
        at += Duration::from_secs(1);
        call.server.handle_timeout(at).unwrap();
        loop {
            match call.server.poll_output() {
                PeerOutput::Timeout(_) => break,
                PeerOutput::Event(PeerEvent::Disconnected) => {
                    ended.get_or_insert(at);
                }
                _ => {}
            }
        }
    }
    let ended = ended.expect("the silent session ended");
    // Counted from its last consent check, a few seconds before it vanished.
    let silent = ended - call.now;
    assert!(
        silent >= Duration::from_secs(20) && silent <= Duration::from_secs(31),
        "{silent:?}"
    );
}

#[test]
fn lost_packets_are_asked_for_and_sent_again() {
    let mut call = Call::start();
    call.lose_every = Some(17);
    call.connect();
    for n in 0..300 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
    }
    assert!(call.lost >= 40, "{} lost", call.lost);
    assert!(
        call.resent >= call.lost,
        "{} resent, {} lost",
        call.resent,
        call.lost
    );
    // Resent packets complete their frames: the few not whole are from before the
    // browser's first NACK could arrive.
    assert!(call.frames >= 295, "{} frames", call.frames);
}

#[test]
fn the_first_check_gets_a_check_back_at_once_and_offered_candidates_none() {
    // The offer names the decoy before its real candidate.
    let mut call = Call::start_with(|offer| {
        let d = addr(DECOY);
        let decoy = format!(
            "a=candidate:9 1 udp 2130706431 {} {} typ host\r\na=candidate:",
            d.ip(),
            d.port()
        );
        assert!(offer.contains("a=candidate:"));
        offer.replace("a=candidate:", &decoy)
    });
    call.browser.handle_input(Input::Timeout(call.now)).unwrap();
    let check = loop {
        match call.browser.poll_output().unwrap() {
            Output::Transmit(t) => break t.contents.to_vec(),
            Output::Timeout(_) => panic!("the browser sent no check"),
            Output::Event(_) => {}
        }
    };
    assert_eq!(check[..2], [0x00, 0x01], "a binding request");
    call.server
        .handle_datagram(call.now, Via::Udp, addr(BROWSER), &check)
        .unwrap();
    // With no time passing: the answer, and a check of ours (a triggered check, what a
    // controlling agent nominates on), both to where the check came from.
    let mut out = Datagrams::default();
    let mut types = Vec::new();
    loop {
        match call.server.poll_output() {
            PeerOutput::Transmit {
                destination,
                contents,
            } => {
                assert_eq!(destination, addr(BROWSER));
                types.push([contents[0], contents[1]]);
                out.push(destination, &contents);
            }
            PeerOutput::Event(e) => call.events.push(e),
            PeerOutput::Timeout(_) => break,
        }
    }
    assert!(
        types.contains(&[0x01, 0x01]),
        "no binding response: {types:?}"
    );
    assert!(
        types.contains(&[0x00, 0x01]),
        "no binding request: {types:?}"
    );
    call.deliver(&out);
    // From there on, as any call; every datagram of the server goes to the browser
    // (`deliver`), none to the decoy.
    call.connect();
    for n in 0..60 {
        call.send_frame(n);
        call.tick(Duration::from_millis(33));
    }
    assert!(call.frames >= 55, "{} frames", call.frames);
}

#[test]
fn an_ice_lite_offer_is_refused() {
    let mut browser = RtcConfig::new()
        .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
        .set_ice_lite(true)
        .enable_h264(true)
        .build(Instant::now());
    browser.add_local_candidate(Candidate::host(addr(BROWSER), "udp").unwrap());
    let mut api = browser.sdp_api();
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    let (offer, _) = api.apply().unwrap();
    let offer = offer.to_sdp_string();
    assert!(offer.contains("a=ice-lite"));
    let config = PeerConfig {
        candidates: vec![addr(SERVER)],
        tcp_candidates: Vec::new(),
    };
    let role = Role::Play(Offered {
        video: Some(VideoCodec::H264),
        opus: false,
    });
    let refused = Peer::answer(&offer, role, &config, Instant::now());
    assert!(refused.is_err());
}
