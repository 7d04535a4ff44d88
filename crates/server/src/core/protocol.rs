//! The protocols viewers watch a stream with, as the API, `/metrics` and the console
//! name them.
//!
//! Why: a viewer's protocol is not its output format. Formats decide which forms a
//! publisher builds (RTSP's and WebRTC's players may share one RTP form, HTTP-FLV's
//! and WS-FLV's one FLV tag); operators ask who watches how. Each protocol says what
//! it is when it starts a player (`Playing::start`), and the stream counts its players
//! by it ([`Stream::viewers_of`](crate::core::hub::Stream::viewers_of)); the names
//! below are the API's `viewers` keys and the `protocol` label of
//! `sluice_stream_viewers`, written once.

/// A protocol viewers play a stream with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RTMP and RTMPS (an edge's pull too).
    Rtmp,
    /// HTTP-FLV, over HTTP/1.1, HTTPS or HTTP/2.
    Flv,
    /// FLV over WebSocket.
    WsFlv,
    /// MPEG-TS over HTTP (HTTP-TS).
    HttpTs,
    /// Fragmented MP4 over HTTP (HTTP-fMP4), for MSE players.
    HttpFmp4,
    /// Fragmented MP4 over WebSocket.
    WsFmp4,
    /// RTSP, over TCP or UDP.
    Rtsp,
    /// SRT.
    Srt,
    /// WebRTC (WHEP).
    Webrtc,
    /// HLS: not players of the fan-out, counted by the segments they fetch
    /// (`Stream::tap_viewers`).
    Hls,
}

impl Protocol {
    /// Every protocol, in the order the API and `/metrics` list them.
    pub const ALL: [Protocol; 10] = [
        Protocol::Rtmp,
        Protocol::Flv,
        Protocol::WsFlv,
        Protocol::HttpTs,
        Protocol::HttpFmp4,
        Protocol::WsFmp4,
        Protocol::Rtsp,
        Protocol::Srt,
        Protocol::Webrtc,
        Protocol::Hls,
    ];

    /// How many there are: the size of a per-protocol count.
    pub const COUNT: usize = Protocol::ALL.len();

    /// The API's key and the metric's label.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Rtmp => "rtmp",
            Protocol::Flv => "flv",
            Protocol::WsFlv => "ws-flv",
            Protocol::HttpTs => "http-ts",
            Protocol::HttpFmp4 => "http-fmp4",
            Protocol::WsFmp4 => "ws-fmp4",
            Protocol::Rtsp => "rtsp",
            Protocol::Srt => "srt",
            Protocol::Webrtc => "webrtc",
            Protocol::Hls => "hls",
        }
    }

    /// Its slot in a per-protocol count.
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_has_its_own_slot_and_name() {
        for (i, p) in Protocol::ALL.iter().enumerate() {
            assert_eq!(p.index(), i);
        }
        let mut names: Vec<_> = Protocol::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Protocol::COUNT);
    }
}
