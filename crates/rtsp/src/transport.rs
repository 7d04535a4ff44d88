//! The structured RTSP headers the server reads and writes: `Transport`, `Range`,
//! `Session` and `RTP-Info` (RFC 2326 §12.39, §12.29, §12.37, §12.33).
//!
//! Why: these carry the negotiation of where media flows (TCP channels or UDP ports)
//! and from where it starts. Parsing lives here, apart from the session, so that each
//! rule is tested on its own and the session only sees typed values.
//!
//! # Invariants
//! - Parsers take peer text and never panic: numbers are range-checked, unknown
//!   parameters are skipped (RFC 2326 says to ignore them), nothing is indexed blind.
//! - Formatting writes exactly what parsing reads back (round-trip tested).

use std::fmt::{self, Write as _};
use std::time::Duration;

use crate::error::RtspError;
use sluice_archive::time;

/// Lower transport under RTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LowerTransport {
    /// `RTP/AVP` or `RTP/AVP/UDP`.
    Udp,
    /// `RTP/AVP/TCP`: interleaved on the RTSP connection.
    Tcp,
}

/// Which way media flows for a track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Server to client (the default).
    #[default]
    Play,
    /// Client to server (`mode=record`, `mode="RECORD"`).
    Record,
}

/// An RTP/RTCP pair of UDP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortPair {
    /// RTP port.
    pub rtp: u16,
    /// RTCP port (usually `rtp + 1`).
    pub rtcp: u16,
}

/// An RTP/RTCP pair of interleaved channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelPair {
    /// RTP channel.
    pub rtp: u8,
    /// RTCP channel (usually `rtp + 1`).
    pub rtcp: u8,
}

/// One transport specification from a `Transport:` header, limited to what a unicast
/// RTP server uses. Parameters we do not model are skipped on parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transport {
    /// UDP or TCP.
    pub lower: LowerTransport,
    /// `multicast` was given (we serve unicast only; such specs are not chosen).
    pub multicast: bool,
    /// `interleaved=a-b`.
    pub interleaved: Option<ChannelPair>,
    /// `client_port=a-b`.
    pub client_port: Option<PortPair>,
    /// `server_port=a-b`.
    pub server_port: Option<PortPair>,
    /// `ssrc=` (8 hex digits).
    pub ssrc: Option<u32>,
    /// `mode=`.
    pub mode: Mode,
}

impl Transport {
    /// A unicast TCP-interleaved transport on `channels`.
    pub fn tcp(channels: ChannelPair) -> Self {
        Transport {
            lower: LowerTransport::Tcp,
            multicast: false,
            interleaved: Some(channels),
            client_port: None,
            server_port: None,
            ssrc: None,
            mode: Mode::Play,
        }
    }

    /// A unicast UDP transport to `client_port`.
    pub fn udp(client_port: PortPair) -> Self {
        Transport {
            lower: LowerTransport::Udp,
            multicast: false,
            interleaved: None,
            client_port: Some(client_port),
            server_port: None,
            ssrc: None,
            mode: Mode::Play,
        }
    }

    /// Parses one transport spec (no commas).
    pub fn parse(spec: &str) -> Result<Transport, RtspError> {
        let bad = |what| RtspError::Malformed { what };
        let mut params = spec.split(';').map(str::trim);
        let protocol = params.next().unwrap_or("");
        let lower = if protocol.eq_ignore_ascii_case("RTP/AVP")
            || protocol.eq_ignore_ascii_case("RTP/AVP/UDP")
        {
            LowerTransport::Udp
        } else if protocol.eq_ignore_ascii_case("RTP/AVP/TCP") {
            LowerTransport::Tcp
        } else {
            return Err(bad("transport protocol (not RTP/AVP)"));
        };
        let mut t = Transport {
            lower,
            multicast: false,
            interleaved: None,
            client_port: None,
            server_port: None,
            ssrc: None,
            mode: Mode::Play,
        };
        for p in params {
            let (name, value) = match p.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (p, None),
            };
            match (name.to_ascii_lowercase().as_str(), value) {
                ("unicast", None) => t.multicast = false,
                ("multicast", None) => t.multicast = true,
                ("interleaved", Some(v)) => {
                    let (rtp, rtcp) = parse_pair(v, bad("interleaved"))?;
                    t.interleaved = Some(ChannelPair { rtp, rtcp });
                }
                ("client_port", Some(v)) => {
                    let (rtp, rtcp) = parse_pair(v, bad("client_port"))?;
                    t.client_port = Some(PortPair { rtp, rtcp });
                }
                ("server_port", Some(v)) => {
                    let (rtp, rtcp) = parse_pair(v, bad("server_port"))?;
                    t.server_port = Some(PortPair { rtp, rtcp });
                }
                ("ssrc", Some(v)) => {
                    if v.is_empty() || v.len() > 8 {
                        return Err(bad("ssrc"));
                    }
                    t.ssrc = Some(u32::from_str_radix(v, 16).map_err(|_| bad("ssrc"))?);
                }
                ("mode", Some(v)) => {
                    let v = v.trim_matches('"');
                    t.mode = if v
                        .split(',')
                        .any(|m| m.trim().eq_ignore_ascii_case("record"))
                    {
                        Mode::Record
                    } else if v.split(',').any(|m| m.trim().eq_ignore_ascii_case("play")) {
                        Mode::Play
                    } else {
                        return Err(bad("mode"));
                    };
                }
                // destination, source, ttl, layers, port, append, ...: not ours to use.
                _ => {}
            }
        }
        Ok(t)
    }

    /// Whether a unicast server can serve this spec: unicast, and for UDP a client
    /// port to send to.
    pub fn is_supported(&self) -> bool {
        !self.multicast && (self.lower == LowerTransport::Tcp || self.client_port.is_some())
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.lower {
            LowerTransport::Udp => "RTP/AVP",
            LowerTransport::Tcp => "RTP/AVP/TCP",
        })?;
        f.write_str(if self.multicast {
            ";multicast"
        } else {
            ";unicast"
        })?;
        if let Some(c) = self.interleaved {
            write!(f, ";interleaved={}-{}", c.rtp, c.rtcp)?;
        }
        if let Some(p) = self.client_port {
            write!(f, ";client_port={}-{}", p.rtp, p.rtcp)?;
        }
        if let Some(p) = self.server_port {
            write!(f, ";server_port={}-{}", p.rtp, p.rtcp)?;
        }
        if let Some(s) = self.ssrc {
            write!(f, ";ssrc={s:08X}")?;
        }
        if self.mode == Mode::Record {
            f.write_str(";mode=record")?;
        }
        Ok(())
    }
}

/// Parses `a-b` or `a` (then `b = a + 1`) into two integers of type `T`.
fn parse_pair<T>(v: &str, bad: RtspError) -> Result<(T, T), RtspError>
where
    T: TryFrom<u32> + Copy,
{
    let num = |s: &str| -> Result<T, RtspError> {
        let n = crate::message::parse_decimal(s).ok_or(bad.clone())?;
        T::try_from(n).map_err(|_| bad.clone())
    };
    match v.split_once('-') {
        Some((a, b)) => Ok((num(a)?, num(b)?)),
        None => {
            let a = crate::message::parse_decimal(v).ok_or(bad.clone())?;
            let b = a.checked_add(1).ok_or(bad.clone())?;
            Ok((
                T::try_from(a).map_err(|_| bad.clone())?,
                T::try_from(b).map_err(|_| bad.clone())?,
            ))
        }
    }
}

/// Parses every comma-separated alternative of a `Transport:` header, in the client's
/// order of preference. Specs that do not parse come back as errors in place.
pub fn parse_transports(header: &str) -> Vec<Result<Transport, RtspError>> {
    split_outside_quotes(header, ',')
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .take(MAX_TRANSPORT_ALTERNATIVES)
        .map(Transport::parse)
        .collect()
}

/// Splits on `sep` where it is not inside a quoted string (`mode="PLAY,RECORD"`).
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(s.get(start..i).unwrap_or(""));
            start = i + c.len_utf8();
        }
    }
    parts.push(s.get(start..).unwrap_or(""));
    parts
}

/// Most alternatives looked at in one `Transport:` header; real clients offer one to
/// three, and this bounds the work a peer can ask for.
pub const MAX_TRANSPORT_ALTERNATIVES: usize = 16;

/// The first alternative of a `Transport:` header that a unicast RTP server supports
/// ([`Transport::is_supported`]), or `None` (answered 461 Unsupported Transport).
pub fn choose_transport(header: &str) -> Option<Transport> {
    parse_transports(header)
        .into_iter()
        .filter_map(Result::ok)
        .find(Transport::is_supported)
}

/// A point of Normal Play Time (RFC 2326 §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NptTime {
    /// `now`: the live edge.
    Now,
    /// An offset from the start of the presentation.
    At(Duration),
}

/// An NPT range, `npt=start-[end]` or `npt=-end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NptRange {
    /// Start; `None` for the `npt=-end` form.
    pub start: Option<NptTime>,
    /// End; `None` for an open range.
    pub end: Option<NptTime>,
}

impl NptRange {
    /// `npt=0.000-`: what a live stream answers.
    pub const FROM_ZERO: NptRange = NptRange {
        start: Some(NptTime::At(Duration::ZERO)),
        end: None,
    };

    /// Parses a `Range:` header value. Only `npt` is supported (`smpte` and `clock` are
    /// errors; the server answers 457 Invalid Range). A `;time=` suffix is ignored.
    pub fn parse(value: &str) -> Result<NptRange, RtspError> {
        let bad = RtspError::Malformed {
            what: "Range header",
        };
        let value = value.split(';').next().unwrap_or("").trim();
        let (unit, range) = value.split_once('=').ok_or(bad.clone())?;
        if !unit.trim().eq_ignore_ascii_case("npt") {
            return Err(bad);
        }
        let (start, end) = range.trim().split_once('-').ok_or(bad.clone())?;
        let start = match start.trim() {
            "" => None,
            s => Some(parse_npt_time(s).ok_or(bad.clone())?),
        };
        let end = match end.trim() {
            "" => None,
            s => Some(parse_npt_time(s).ok_or(bad.clone())?),
        };
        if start.is_none() && end.is_none() {
            return Err(bad);
        }
        if let (Some(NptTime::At(a)), Some(NptTime::At(b))) = (start, end) {
            if b < a {
                return Err(bad);
            }
        }
        Ok(NptRange { start, end })
    }
}

/// `now`, seconds with an optional fraction (`12.5`), or `h:mm:ss[.frac]`.
fn parse_npt_time(s: &str) -> Option<NptTime> {
    if s.eq_ignore_ascii_case("now") {
        return Some(NptTime::Now);
    }
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    let digits = |p: &str, max_len: usize| -> Option<u64> {
        if p.is_empty() || p.len() > max_len || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let secs = match whole.split(':').collect::<Vec<_>>().as_slice() {
        [secs] => digits(secs, 12)?,
        [h, m, sec] => {
            let (h, m, sec) = (digits(h, 9)?, digits(m, 2)?, digits(sec, 2)?);
            if m > 59 || sec > 59 {
                return None;
            }
            h.checked_mul(3600)?.checked_add(m * 60 + sec)?
        }
        _ => return None,
    };
    let nanos = if frac.is_empty() {
        0
    } else {
        if !frac.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 32 {
            return None;
        }
        // Keep nanosecond precision; digits past the ninth are dropped.
        let mut padded: String = frac.chars().take(9).collect();
        while padded.len() < 9 {
            padded.push('0');
        }
        padded.parse::<u32>().ok()?
    };
    Some(NptTime::At(Duration::new(secs, nanos)))
}

impl fmt::Display for NptTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NptTime::Now => f.write_str("now"),
            NptTime::At(d) => write!(f, "{}.{:03}", d.as_secs(), d.subsec_millis()),
        }
    }
}

impl fmt::Display for NptRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("npt=")?;
        if let Some(s) = self.start {
            write!(f, "{s}")?;
        }
        f.write_char('-')?;
        if let Some(e) = self.end {
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// An absolute range, `clock=START-[END]` or `clock=-END` (RFC 2326 §3.7, RFC 7826
/// §4.4.3): UTC times `YYYYMMDDThhmmss[.fraction]Z`, what NVR clients and ONVIF
/// replay send. Times are Unix milliseconds (fractions past the millisecond dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockRange {
    /// Start; `None` for the `clock=-END` form.
    pub start: Option<i64>,
    /// End; `None` for an open range.
    pub end: Option<i64>,
}

impl ClockRange {
    /// Parses a `Range:` header value of unit `clock`. A `;time=` suffix is ignored.
    pub fn parse(value: &str) -> Result<ClockRange, RtspError> {
        let bad = RtspError::Malformed {
            what: "Range header",
        };
        let value = value.split(';').next().unwrap_or("").trim();
        let (unit, range) = value.split_once('=').ok_or(bad.clone())?;
        if !unit.trim().eq_ignore_ascii_case("clock") {
            return Err(bad);
        }
        // Times hold no `-`, so the first one splits the bounds.
        let (start, end) = range.trim().split_once('-').ok_or(bad.clone())?;
        let time = |t: &str| match t.trim() {
            "" => Ok(None),
            t => parse_clock_time(t).map(Some).ok_or(bad.clone()),
        };
        let (start, end) = (time(start)?, time(end)?);
        match (start, end) {
            (None, None) => Err(bad),
            (Some(a), Some(b)) if b < a => Err(bad),
            _ => Ok(ClockRange { start, end }),
        }
    }
}

/// `YYYYMMDDThhmmss[.fraction]Z` as Unix ms.
fn parse_clock_time(t: &str) -> Option<i64> {
    let t = t.strip_suffix(['Z', 'z'])?;
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    let (date, hms) = whole.split_once(['T', 't'])?;
    if date.len() != 8 || hms.len() != 6 || frac.len() > 9 {
        return None;
    }
    if !(date.bytes().chain(hms.bytes()).chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |s: &str, r: std::ops::Range<usize>| s.get(r)?.parse::<u32>().ok();
    let (year, month, day) = (num(date, 0..4)?, num(date, 4..6)?, num(date, 6..8)?);
    let (hour, minute, second) = (num(hms, 0..2)?, num(hms, 2..4)?, num(hms, 4..6)?);
    // Second 60 is a leap second (RFC 3339): read as the next second's start.
    if second > 60 {
        return None;
    }
    let leap = if second == 60 { 1000 } else { 0 };
    let at = time::from_fields(i64::from(year), month, day, hour, minute, second.min(59)).ok()?;
    let millis = frac
        .get(..frac.len().min(3))
        .map_or(0, |m| format!("{m:0<3}").parse::<i64>().unwrap_or(0));
    Some(at + leap + millis)
}

/// Unix ms as `YYYYMMDDThhmmss.mmmZ`.
pub fn format_clock_time(ms: i64) -> String {
    let (year, month, day, hour, minute, second, milli) = time::fields(ms);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}.{milli:03}Z")
}

impl fmt::Display for ClockRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("clock=")?;
        if let Some(s) = self.start {
            f.write_str(&format_clock_time(s))?;
        }
        f.write_char('-')?;
        if let Some(e) = self.end {
            f.write_str(&format_clock_time(e))?;
        }
        Ok(())
    }
}

/// The `Range:` of a PLAY: relative (`npt`) or absolute (`clock`). `smpte` is not
/// supported (457 Invalid Range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayRange {
    /// Normal Play Time, from the presentation's start.
    Npt(NptRange),
    /// Wall-clock time, UTC.
    Clock(ClockRange),
}

impl PlayRange {
    /// Parses a `Range:` header value by its unit.
    pub fn parse(value: &str) -> Result<PlayRange, RtspError> {
        let unit = value.trim_start().get(..5).unwrap_or("");
        if unit.eq_ignore_ascii_case("clock") {
            ClockRange::parse(value).map(PlayRange::Clock)
        } else {
            NptRange::parse(value).map(PlayRange::Npt)
        }
    }
}

impl fmt::Display for PlayRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlayRange::Npt(r) => r.fmt(f),
            PlayRange::Clock(r) => r.fmt(f),
        }
    }
}

/// Most a `Scale:` may ask, either way: far beyond any trick play, and it keeps the
/// value exact in thousandths.
pub const MAX_SCALE: i64 = 1_000_000;

/// A `Scale:` header (RFC 7826 §18.46): the playback speed, negative for reverse, in
/// thousandths (`2` is 2000, `-0.5` is -500).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Thousandths of normal speed.
    pub milli: i64,
}

impl Scale {
    /// Normal speed.
    pub const NORMAL: Scale = Scale { milli: 1000 };

    /// Parses `[-]digits[.digits]`; digits past the thousandth are dropped.
    pub fn parse(value: &str) -> Result<Scale, RtspError> {
        let bad = RtspError::Malformed {
            what: "Scale header",
        };
        let v = value.trim();
        let (negative, v) = match v.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, v.strip_prefix('+').unwrap_or(v)),
        };
        let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || whole.len() > 7 || frac.len() > 9 || !all_digits(whole) {
            return Err(bad);
        }
        if !all_digits(frac) {
            return Err(bad);
        }
        let whole: i64 = whole.parse().map_err(|_| bad.clone())?;
        let frac: i64 = format!("{:0<3}", frac.get(..frac.len().min(3)).unwrap_or(""))
            .parse()
            .map_err(|_| bad.clone())?;
        let milli = whole * 1000 + frac;
        if milli > MAX_SCALE * 1000 {
            return Err(bad);
        }
        Ok(Scale {
            milli: if negative { -milli } else { milli },
        })
    }

    /// As a number.
    pub fn as_f64(self) -> f64 {
        self.milli as f64 / 1000.0
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.milli < 0 { "-" } else { "" };
        let m = self.milli.unsigned_abs();
        match m % 1000 {
            0 => write!(f, "{sign}{}", m / 1000),
            r => write!(f, "{sign}{}.{r:03}", m / 1000),
        }
    }
}

/// Shortest session id we accept or generate: RFC 2326 §3.4 asks for at least eight
/// octets of randomness-derived text.
pub const MIN_SESSION_ID_LEN: usize = 8;
/// Longest session id we accept: ids are echoed into every response.
pub const MAX_SESSION_ID_LEN: usize = 64;

/// A `Session:` header: `id[;timeout=secs]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// The session identifier (`1*(ALPHA | DIGIT | safe)`).
    pub id: String,
    /// The timeout in seconds, when given.
    pub timeout: Option<u32>,
}

impl SessionHeader {
    /// Parses a `Session:` header value. Unknown parameters are ignored.
    pub fn parse(value: &str) -> Result<SessionHeader, RtspError> {
        let bad = RtspError::Malformed {
            what: "Session header",
        };
        let mut parts = value.split(';').map(str::trim);
        let id = parts.next().unwrap_or("");
        let id_char = |b: u8| b.is_ascii_alphanumeric() || b"$-_.+".contains(&b);
        if id.is_empty() || id.len() > MAX_SESSION_ID_LEN || !id.bytes().all(id_char) {
            return Err(bad);
        }
        let mut timeout = None;
        for p in parts {
            if let Some((n, v)) = p.split_once('=') {
                if n.trim().eq_ignore_ascii_case("timeout") {
                    timeout = Some(crate::message::parse_decimal(v).ok_or(bad.clone())?);
                }
            }
        }
        Ok(SessionHeader {
            id: id.to_string(),
            timeout,
        })
    }
}

impl fmt::Display for SessionHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)?;
        if let Some(t) = self.timeout {
            write!(f, ";timeout={t}")?;
        }
        Ok(())
    }
}

/// One stream of an `RTP-Info:` header: where a track's RTP starts after PLAY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpInfo {
    /// The track URL, as the client used it in SETUP.
    pub url: String,
    /// Sequence number of the first packet sent.
    pub seq: Option<u16>,
    /// RTP timestamp matching the start of the range.
    pub rtptime: Option<u32>,
}

impl RtpInfo {
    /// Formats a whole `RTP-Info:` value for several tracks.
    pub fn format_list(infos: &[RtpInfo]) -> String {
        let mut s = String::new();
        for (i, info) in infos.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{info}");
        }
        s
    }

    /// Parses an `RTP-Info:` value. URLs containing commas or semicolons are not
    /// supported (RFC 2326's grammar is ambiguous there; servers do not send them).
    pub fn parse_list(value: &str) -> Result<Vec<RtpInfo>, RtspError> {
        let bad = |what| RtspError::Malformed { what };
        value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|stream| {
                let mut info = RtpInfo {
                    url: String::new(),
                    seq: None,
                    rtptime: None,
                };
                for p in stream.split(';').map(str::trim) {
                    let (n, v) = p.split_once('=').ok_or(bad("RTP-Info parameter"))?;
                    match n.trim().to_ascii_lowercase().as_str() {
                        "url" => info.url = v.trim().to_string(),
                        "seq" => {
                            let n = crate::message::parse_decimal(v).ok_or(bad("RTP-Info seq"))?;
                            info.seq = Some(u16::try_from(n).map_err(|_| bad("RTP-Info seq"))?);
                        }
                        "rtptime" => {
                            info.rtptime = Some(
                                crate::message::parse_decimal(v).ok_or(bad("RTP-Info rtptime"))?,
                            );
                        }
                        _ => {}
                    }
                }
                if info.url.is_empty() {
                    return Err(bad("RTP-Info without url"));
                }
                Ok(info)
            })
            .collect()
    }
}

impl fmt::Display for RtpInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "url={}", self.url)?;
        if let Some(seq) = self.seq {
            write!(f, ";seq={seq}")?;
        }
        if let Some(t) = self.rtptime {
            write!(f, ";rtptime={t}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ffmpeg_tcp_play() {
        let t = choose_transport("RTP/AVP/TCP;unicast;interleaved=0-1").expect("supported");
        assert_eq!(t.lower, LowerTransport::Tcp);
        assert_eq!(t.interleaved, Some(ChannelPair { rtp: 0, rtcp: 1 }));
        assert_eq!(t.mode, Mode::Play);
    }

    #[test]
    fn udp_record_variants() {
        for h in [
            "RTP/AVP/UDP;unicast;client_port=5000-5001;mode=record",
            "RTP/AVP;unicast;client_port=5000-5001;mode=\"RECORD\"",
            "rtp/avp;unicast;client_port=5000;mode=\"PLAY,RECORD\"",
        ] {
            let t = choose_transport(h).expect(h);
            assert_eq!(t.lower, LowerTransport::Udp, "{h}");
            assert_eq!(
                t.client_port,
                Some(PortPair {
                    rtp: 5000,
                    rtcp: 5001
                }),
                "{h}"
            );
            assert_eq!(t.mode, Mode::Record, "{h}");
        }
    }

    #[test]
    fn picks_first_supported_alternative() {
        let h = "RTP/AVP;multicast;ttl=127, RTP/SAVP;unicast;client_port=1-2, RTP/AVP/UDP;unicast;client_port=7000-7001, RTP/AVP/TCP;interleaved=0-1";
        let t = choose_transport(h).expect("one fits");
        assert_eq!(
            t.client_port,
            Some(PortPair {
                rtp: 7000,
                rtcp: 7001
            })
        );
        assert_eq!(parse_transports(h).len(), 4);
        assert!(
            choose_transport("RTP/AVP;unicast").is_none(),
            "UDP needs client_port"
        );
        assert!(choose_transport("RAW/RAW/UDP;unicast;client_port=1-2").is_none());
        assert!(choose_transport("").is_none());
    }

    #[test]
    fn bad_numbers_are_errors() {
        for spec in [
            "RTP/AVP/TCP;interleaved=0-256",
            "RTP/AVP/TCP;interleaved=255",
            "RTP/AVP;client_port=65535",
            "RTP/AVP;client_port=70000-70001",
            "RTP/AVP;client_port=a-b",
            "RTP/AVP;ssrc=123456789",
            "RTP/AVP;ssrc=zz",
            "RTP/AVP;mode=fly",
        ] {
            assert!(Transport::parse(spec).is_err(), "{spec}");
        }
    }

    #[test]
    fn server_reply_format() {
        let mut t = Transport::udp(PortPair {
            rtp: 5000,
            rtcp: 5001,
        });
        t.server_port = Some(PortPair {
            rtp: 30000,
            rtcp: 30001,
        });
        t.ssrc = Some(0xDEAD_BEEF);
        assert_eq!(
            t.to_string(),
            "RTP/AVP;unicast;client_port=5000-5001;server_port=30000-30001;ssrc=DEADBEEF"
        );
        let mut tcp = Transport::tcp(ChannelPair { rtp: 2, rtcp: 3 });
        tcp.mode = Mode::Record;
        assert_eq!(
            tcp.to_string(),
            "RTP/AVP/TCP;unicast;interleaved=2-3;mode=record"
        );
    }

    #[test]
    fn ranges() {
        let at = |s: f64| Some(NptTime::At(Duration::from_secs_f64(s)));
        let cases = [
            ("npt=now-", Some(NptTime::Now), None),
            ("npt=0-", at(0.0), None),
            ("npt=0.000-", at(0.0), None),
            ("npt = 12.5-20", at(12.5), at(20.0)),
            ("npt=00:01:02.5-1:00:00", at(62.5), at(3600.0)),
            ("npt=-20", None, at(20.0)),
            ("NPT=5-;time=19970123T143720Z", at(5.0), None),
        ];
        for (s, start, end) in cases {
            assert_eq!(NptRange::parse(s), Ok(NptRange { start, end }), "{s}");
        }
        for s in [
            "npt=-",
            "npt=",
            "smpte=10:07:00-10:07:33:05.01",
            "clock=19961108T142300Z-",
            "npt=1:60:00-",
            "npt=abc-",
            "npt=20-10",
            "npt=1:2-",
            "npt=99999999999999999999-",
            "npt",
        ] {
            assert!(NptRange::parse(s).is_err(), "{s}");
        }
        assert_eq!(NptRange::FROM_ZERO.to_string(), "npt=0.000-");
    }

    #[test]
    fn clock_ranges() {
        // 2026-11-27T10:00:00Z and 10:15:00Z.
        let (a, b) = (1_795_773_600_000, 1_795_774_500_000);
        let cases = [
            ("clock=20261127T100000Z-20261127T101500Z", Some(a), Some(b)),
            ("clock=20261127T100000.25Z-", Some(a + 250), None),
            ("Clock = 20261127T100000.123456Z-", Some(a + 123), None),
            ("clock=-20261127T101500Z", None, Some(b)),
            (
                "clock=19700101T000000Z-;time=19970123T143720Z",
                Some(0),
                None,
            ),
            ("clock=20240229T235960Z-", Some(1_709_251_200_000), None),
        ];
        for (s, start, end) in cases {
            assert_eq!(ClockRange::parse(s), Ok(ClockRange { start, end }), "{s}");
            assert_eq!(
                PlayRange::parse(s),
                Ok(PlayRange::Clock(ClockRange { start, end })),
                "{s}"
            );
        }
        for s in [
            "clock=",
            "clock=-",
            "clock=20261127T101500Z-20261127T100000Z",
            "clock=20261127T1000Z-",
            "clock=20261127T100000-",
            "clock=20230229T100000Z-",
            "clock=20261327T100000Z-",
            "clock=20261127T240000Z-",
            "clock=2026-11-27T10:00:00Z-",
            "clock=+0261127T100000Z-",
            "clock=20261127T100000.1234567890Z-",
            "clock=20261127T10000Z0-",
            "npt=20261127T100000Z-",
            "clock",
        ] {
            assert!(ClockRange::parse(s).is_err(), "{s}");
        }
        let r = ClockRange {
            start: Some(a + 5),
            end: Some(b),
        };
        assert_eq!(
            r.to_string(),
            "clock=20261127T100000.005Z-20261127T101500.000Z"
        );
        assert_eq!(ClockRange::parse(&r.to_string()), Ok(r));
        assert_eq!(
            PlayRange::parse("npt=0-"),
            Ok(PlayRange::Npt(NptRange::FROM_ZERO))
        );
        assert!(PlayRange::parse("smpte=0:00:00-").is_err());
    }

    #[test]
    fn scales() {
        for (s, milli) in [
            ("2", 2000),
            ("1.0", 1000),
            ("-1", -1000),
            (" 0.5 ", 500),
            ("+4", 4000),
            ("2.0005", 2000),
        ] {
            assert_eq!(Scale::parse(s), Ok(Scale { milli }), "{s}");
        }
        for s in ["", "x", "1e3", "--1", "1.x", "99999999", ".5", "2000000"] {
            assert!(Scale::parse(s).is_err(), "{s}");
        }
        assert_eq!(Scale { milli: 2000 }.to_string(), "2");
        assert_eq!(Scale { milli: -500 }.to_string(), "-0.500");
    }

    proptest! {
        #[test]
        fn clock_times_round_trip(ms in 0i64..253_402_300_800_000, len in proptest::option::of(0i64..86_400_000)) {
            let r = ClockRange { start: Some(ms), end: len.map(|l| ms + l) };
            prop_assert_eq!(ClockRange::parse(&r.to_string()), Ok(r));
        }

        #[test]
        fn ranges_never_panic(s in "\\PC{0,64}") {
            let _ = PlayRange::parse(&s);
            let _ = Scale::parse(&s);
        }
    }

    #[test]
    fn session_header() {
        assert_eq!(
            SessionHeader::parse("47112344;timeout=60"),
            Ok(SessionHeader {
                id: "47112344".into(),
                timeout: Some(60)
            })
        );
        assert_eq!(
            SessionHeader::parse(" abc$-_.+ ").map(|s| s.id),
            Ok("abc$-_.+".into())
        );
        for s in ["", ";timeout=1", "a b", "id;timeout=x", &"x".repeat(65)] {
            assert!(SessionHeader::parse(s).is_err(), "{s}");
        }
        let h = SessionHeader {
            id: "ABCDEF0123456789".into(),
            timeout: Some(60),
        };
        assert_eq!(SessionHeader::parse(&h.to_string()), Ok(h));
    }

    #[test]
    fn rtp_info() {
        let infos = vec![
            RtpInfo {
                url: "rtsp://h/live/s/trackID=0".into(),
                seq: Some(4321),
                rtptime: Some(90000),
            },
            RtpInfo {
                url: "rtsp://h/live/s/trackID=1".into(),
                seq: None,
                rtptime: None,
            },
        ];
        let s = RtpInfo::format_list(&infos);
        assert_eq!(
            s,
            "url=rtsp://h/live/s/trackID=0;seq=4321;rtptime=90000,url=rtsp://h/live/s/trackID=1"
        );
        assert_eq!(RtpInfo::parse_list(&s), Ok(infos));
    }

    fn arb_transport() -> impl Strategy<Value = Transport> {
        (
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(any::<(u8, u8)>()),
            proptest::option::of(any::<(u16, u16)>()),
            proptest::option::of(any::<(u16, u16)>()),
            proptest::option::of(any::<u32>()),
            any::<bool>(),
        )
            .prop_map(|(tcp, multicast, il, cp, sp, ssrc, rec)| Transport {
                lower: if tcp {
                    LowerTransport::Tcp
                } else {
                    LowerTransport::Udp
                },
                multicast,
                interleaved: il.map(|(rtp, rtcp)| ChannelPair { rtp, rtcp }),
                client_port: cp.map(|(rtp, rtcp)| PortPair { rtp, rtcp }),
                server_port: sp.map(|(rtp, rtcp)| PortPair { rtp, rtcp }),
                ssrc,
                mode: if rec { Mode::Record } else { Mode::Play },
            })
    }

    proptest! {
        #[test]
        fn transport_round_trips(t in arb_transport()) {
            prop_assert_eq!(Transport::parse(&t.to_string()), Ok(t));
        }

        #[test]
        fn range_round_trips(a in 0u64..10_000_000, am in 0u32..1000, len in proptest::option::of(0u64..1000)) {
            let start = Duration::from_secs(a) + Duration::from_millis(u64::from(am));
            let r = NptRange { start: Some(NptTime::At(start)), end: len.map(|l| NptTime::At(start + Duration::from_secs(l))) };
            prop_assert_eq!(NptRange::parse(&r.to_string()), Ok(r));
        }

        #[test]
        fn header_parsers_never_panic(s in "\\PC{0,80}") {
            let _ = parse_transports(&s);
            let _ = NptRange::parse(&s);
            let _ = SessionHeader::parse(&s);
            let _ = RtpInfo::parse_list(&s);
        }
    }
}
