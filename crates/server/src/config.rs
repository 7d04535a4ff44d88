//! Settings: defaults for everything, a TOML file over them, command-line flags over both.
//!
//! # The file
//! Keys are grouped by concern: `workers`, `log` and `media_root` at the top level, then
//! one table each for `[rtmp]`, `[rtsp]`, `[http]`, `[hls]`, `[record]`, `[players]` and
//! `[limits]`, then any number of `[[apps]]` overrides. Every key is optional; a key the
//! file does not know is an error naming it (and, for a key of the old flat layout,
//! where it moved).
//!
//! `[players]` is apart from `[limits]` because it is what an operator tunes per kind
//! of audience (latency against CPU, patience with slow viewers) and what `[[apps]]`
//! override (`merge_ms`), while `[limits]` bounds what one stream or connection may
//! hold on to (memory, time) whoever watches it.
//!
//! # Each setting is defined once
//! The `settings!` table below is the only place a setting is named: its field (the
//! TOML key within its section), type, default, flag (`#[flag("name", "VALUE")]`, if
//! it has one) and doc comment (its help). From it come the section structs and
//! [`Config`] with their defaults, the flags of [`Cli`] (clap) and how they override
//! the file, `--print-config` (commented TOML that `--config` reads back unchanged) and
//! `docs/configuration.md`. Regenerate that file after changing the table:
//!
//! ```sh
//! cargo run -p sluice-server --bin sluice -- --print-config-doc > docs/configuration.md
//! ```
//!
//! A unit test fails when the committed file differs from the generated text, or when
//! the flags of `sluice --help`, the keys of `--print-config` and the doc disagree.
//!
//! # Per-app overrides
//! An `[[apps]]` entry's `name` is matched against the stream key `app/stream` with the
//! `record` pattern grammar ([`crate::keys::Pattern`]): `live/*`, `live/cam1`, `*/cam*`,
//! `*`; a name without `/` names apps (`live` is `live/*`, `cam*` is `cam*/*`). The
//! first entry that matches a new stream is its entry, whole: a key it leaves out takes
//! the global setting, never a later entry's. `hls` turns HLS on or off for the
//! stream (on uses the `[hls]` segment settings even when `hls.enabled` is false);
//! `record` forces recording on or off whatever the `record.streams` patterns say;
//! `merge_ms` is the merge window of the stream's players (`players.merge_ms`
//! otherwise); `keep_days` replaces `record.keep_days` for the stream's recordings,
//! and `keep_bytes` bounds the bytes of the recordings of every stream the entry
//! matches (a limit of the entry's own: `record.keep_bytes` still bounds all
//! recordings together). [`Config::for_stream`] gives the result as a [`StreamSettings`], which
//! the hub fixes when it creates the stream.

pub use crate::auth::UserConfig;
use crate::core::hub::StreamPolicy;
use crate::hls::StreamHls;
pub use crate::io::listen::Listen;
pub use crate::io::udp_pair::RtpPorts;
use crate::keys::{Pattern, PerStream};
use crate::record;
use clap::builder::ValueParser;
use clap::{Arg, ArgAction, ArgMatches, CommandFactory, Parser};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One setting of the table: where it lives in the file, its flag and its help.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The table it is in (`rtmp` for `[rtmp]`); empty at the top level.
    pub section: &'static str,
    /// Its key within the table.
    pub key: &'static str,
    /// Its command-line flag, if it has one.
    pub flag: Option<Flag>,
    /// The lines of its doc comment.
    help: &'static [&'static str],
    /// Gives its flag the parser and action of its type.
    typed: fn(Arg) -> Arg,
}

/// A setting's command-line flag.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// `--name`.
    pub name: &'static str,
    /// What the value is called in the help (`ADDR`, `MS`).
    pub value: &'static str,
    /// For a list: values may also be given as one argument separated by this.
    pub split: Option<char>,
}

impl Setting {
    /// `section.key`, or `key` at the top level.
    pub fn path(&self) -> String {
        if self.section.is_empty() {
            self.key.to_string()
        } else {
            format!("{}.{}", self.section, self.key)
        }
    }

    /// The help text, as one line.
    pub fn help(&self) -> String {
        join(self.help)
    }

    /// The clap argument of its flag (its id is the flag's name).
    fn arg(&self, default: &str) -> Option<Arg> {
        let flag = self.flag?;
        let help = self.help();
        let summary = help
            .split_once(". ")
            .map_or(help.as_str(), |(first, _)| first);
        let summary = summary.trim_end_matches('.');
        let shown = if default.is_empty() || default == "[]" || default == "\"\"" {
            String::new()
        } else {
            format!(" [default: {default}]")
        };
        let mut arg = (self.typed)(Arg::new(flag.name).long(flag.name))
            .value_name(flag.value)
            .help(format!("{summary}{shown}"))
            .long_help(format!("{help}{shown}"));
        if let Some(c) = flag.split {
            arg = arg.value_delimiter(c);
        }
        Some(arg)
    }
}

/// Doc comment lines as one line of text.
fn join(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The types a setting may have: how its flag parses and is read back.
trait Value: Sized {
    fn typed(arg: Arg) -> Arg;
    fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self>;
}

macro_rules! number_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn typed(arg: Arg) -> Arg {
                arg.action(ArgAction::Set).value_parser(clap::value_parser!($t))
            }
            fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
                matches.get_one::<$t>(id).copied()
            }
        }
    )*};
}
number_value!(u32, u64, usize);

impl Value for String {
    fn typed(arg: Arg) -> Arg {
        arg.action(ArgAction::Set)
            .value_parser(ValueParser::string())
    }
    fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
        matches.get_one::<String>(id).cloned()
    }
}

/// A setting written as text but parsed into its type (an address or `off`, a port
/// range): the flag's parser refuses what the type's `FromStr` refuses, and the
/// table's default literal is parsed the same way.
macro_rules! text_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn typed(arg: Arg) -> Arg {
                arg.action(ArgAction::Set).value_parser(|s: &str| s.parse::<$t>())
            }
            fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
                matches.get_one::<$t>(id).copied()
            }
        }

        /// A default literal that does not parse is caught by the tests that every
        /// default reads back as the table writes it, not at run time.
        impl FromDefault<&str> for $t {
            fn from_default(value: &str) -> $t {
                value.parse().unwrap_or_else(|_| <$t>::OFF)
            }
        }
    )*};
}
text_value!(Listen, RtpPorts);

/// `--flag` alone means true; `--flag false` and `--flag true` say it.
impl Value for bool {
    fn typed(arg: Arg) -> Arg {
        arg.action(ArgAction::Set)
            .num_args(0..=1)
            .default_missing_value("true")
            .value_parser(clap::value_parser!(bool))
    }
    fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
        matches.get_one::<bool>(id).copied()
    }
}

/// Repeat the flag for more; given on the command line, the list replaces the file's.
impl Value for Vec<String> {
    fn typed(arg: Arg) -> Arg {
        arg.action(ArgAction::Append)
            .value_parser(ValueParser::string())
    }
    fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
        matches
            .get_many::<String>(id)
            .map(|values| values.cloned().collect())
    }
}

/// A default as written in the table: a `&str` for a `String`, else the value itself.
/// A setting with a few named values (`"reject"`, `"takeover"`): parsed once, by
/// the file, the flag or the API alike, and matched as a type, never as a string.
trait Choice: Copy + Send + Sync + 'static {
    /// Each value's name, as the file and the flag write it.
    const NAMES: &'static [(&'static str, Self)];
}

impl<T: Choice> Value for T {
    fn typed(arg: Arg) -> Arg {
        let names: Vec<&'static str> = T::NAMES.iter().map(|(n, _)| *n).collect();
        use clap::builder::TypedValueParser;
        arg.action(ArgAction::Set).value_parser(
            clap::builder::PossibleValuesParser::new(names).map(|name: String| {
                T::NAMES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(T::NAMES[0].1, |(_, v)| *v)
            }),
        )
    }
    fn from_flag(matches: &ArgMatches, id: &str) -> Option<Self> {
        matches.get_one::<T>(id).copied()
    }
}

/// `log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Choice for LogFormat {
    const NAMES: &'static [(&'static str, Self)] =
        &[("text", LogFormat::Text), ("json", LogFormat::Json)];
}

/// `rtsp.auth`: which RTSP requests need credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RtspAuth {
    Publish,
    All,
}

impl Choice for RtspAuth {
    const NAMES: &'static [(&'static str, Self)] =
        &[("publish", RtspAuth::Publish), ("all", RtspAuth::All)];
}

/// `publishers.second` (and an app's `second_publisher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecondPublisher {
    Reject,
    Takeover,
}

impl Choice for SecondPublisher {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("reject", SecondPublisher::Reject),
        ("takeover", SecondPublisher::Takeover),
    ];
}

/// `hls.encryption` (and an app's `hls_encryption`): how live HLS segments are
/// encrypted (see `docs/hls.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HlsEncryption {
    #[serde(rename = "none")]
    None,
    /// AES-128-CBC of whole segments, keys from `/app/name/key/ID` (RFC 8216 5.2).
    #[serde(rename = "aes-128")]
    Aes128,
}

impl Choice for HlsEncryption {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("none", HlsEncryption::None),
        ("aes-128", HlsEncryption::Aes128),
    ];
}

impl HlsEncryption {
    /// `config` with this encryption, a new key every `rotation` segments. AES-128
    /// turns Low-Latency HLS off: parts are not encrypted, so the fMP4 variant of an
    /// encrypted stream has whole segments only.
    pub fn apply(self, config: sluice_hls::HlsConfig, rotation: u32) -> sluice_hls::HlsConfig {
        match self {
            HlsEncryption::None => sluice_hls::HlsConfig {
                encryption: sluice_hls::Encryption::None,
                ..config
            },
            HlsEncryption::Aes128 => sluice_hls::HlsConfig {
                low_latency: false,
                encryption: sluice_hls::Encryption::Aes128 { rotation },
                ..config
            },
        }
    }
}

impl Choice for record::Format {
    const NAMES: &'static [(&'static str, Self)] =
        &[("fmp4", record::Format::Fmp4), ("ts", record::Format::Ts)];
}

trait FromDefault<D> {
    fn from_default(value: D) -> Self;
}

impl<T> FromDefault<T> for T {
    fn from_default(value: T) -> T {
        value
    }
}

impl FromDefault<&str> for String {
    fn from_default(value: &str) -> String {
        value.to_string()
    }
}

macro_rules! flag_spec {
    () => {
        None
    };
    (($name:literal, $value:literal)) => {
        Some(Flag {
            name: $name,
            value: $value,
            split: None,
        })
    };
    (($name:literal, $value:literal, split = $split:literal)) => {
        Some(Flag {
            name: $name,
            value: $value,
            split: Some($split),
        })
    };
}

macro_rules! apply_flag {
    ($matches:ident, $($place:ident).+ : $ty:ty) => {};
    ($matches:ident, $($place:ident).+ : $ty:ty, ($name:literal, $($rest:tt)*)) => {
        if let Some(value) = <$ty as Value>::from_flag($matches, $name) {
            $($place).+ = value;
        }
    };
}

/// A section's struct: defined here, or (`[section] Name in path`) by the module that
/// uses it, which then need not import `config`; its fields must be the table's (the
/// `Default` made here names each of them), and it derives `Serialize` and
/// `Deserialize` with `#[serde(default, deny_unknown_fields)]` like the others.
macro_rules! section_struct {
    (
        []
        $(#[doc = $sdoc:literal])*
        $Section:ident { $( $(#[doc = $doc:literal])* $field:ident : $ty:ty, )* }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $Section {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }
    };
    ([$($owner:ident)::+] $(#[doc = $sdoc:literal])* $Section:ident { $($fields:tt)* }) => {
        pub use $($owner)::+::$Section;
    };
}

/// The settings table: from it come the structs, defaults, flags, `--print-config` and
/// `docs/configuration.md` (see the module doc).
macro_rules! settings {
    (
        top {
            $( $(#[doc = $tdoc:literal])* $(#[flag $tflag:tt])?
               $tfield:ident : $tty:ty = $tdefault:expr; )*
        }
        $(
            $(#[doc = $sdoc:literal])*
            [$section:ident] $Section:ident $(in $($owner:ident)::+)? {
                $( $(#[doc = $doc:literal])* $(#[flag $flag:tt])?
                   $field:ident : $ty:ty = $default:expr; )*
            }
        )*
    ) => {
        $(
            section_struct! {
                [$($($owner)::+)?]
                $(#[doc = $sdoc])*
                $Section { $( $(#[doc = $doc])* $field: $ty, )* }
            }

            impl Default for $Section {
                fn default() -> Self {
                    $Section { $( $field: FromDefault::from_default($default), )* }
                }
            }
        )*

        /// The complete configuration.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Config {
            $( $(#[doc = $tdoc])* pub $tfield: $tty, )*
            $( $(#[doc = $sdoc])* pub $section: $Section, )*
            /// Per-app overrides, the first that matches a stream wins.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            pub apps: Vec<AppConfig>,
            /// Static users of the authorization (see `[auth]`).
            #[serde(skip_serializing_if = "Vec::is_empty")]
            pub users: Vec<UserConfig>,
            /// MPEG-TS received over UDP (plain or RTP) and published as a stream.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            pub ingest: Vec<IngestConfig>,
        }

        impl Default for Config {
            fn default() -> Self {
                Config {
                    $( $tfield: FromDefault::from_default($tdefault), )*
                    $( $section: $Section::default(), )*
                    apps: Vec::new(),
                    users: Vec::new(),
                    ingest: Vec::new(),
                }
            }
        }

        /// Every setting, in the order `--print-config` and the doc list them.
        pub const SETTINGS: &[Setting] = &[
            $( Setting {
                section: "",
                key: stringify!($tfield),
                flag: flag_spec!($($tflag)?),
                help: &[$($tdoc),*],
                typed: <$tty as Value>::typed,
            }, )*
            $( $( Setting {
                section: stringify!($section),
                key: stringify!($field),
                flag: flag_spec!($($flag)?),
                help: &[$($doc),*],
                typed: <$ty as Value>::typed,
            }, )* )*
        ];

        /// Each table and the lines of its doc comment.
        const SECTIONS: &[(&str, &[&str])] = &[ $( (stringify!($section), &[$($sdoc),*]), )* ];

        /// Sets every setting whose flag was given.
        fn apply_flags(config: &mut Config, matches: &ArgMatches) {
            $( apply_flag!(matches, config.$tfield : $tty $(, $tflag)?); )*
            $( $( apply_flag!(matches, config.$section.$field : $ty $(, $flag)?); )* )*
        }
    };
}

settings! {
    top {
        /// Worker threads, each with its own event loop and listeners; 0 = one per core.
        #[flag("workers", "N")]
        workers: usize = 0;
        /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
        /// "sluice=debug".
        #[flag("log", "LEVEL")]
        log: String = "info";
        /// Log lines as "text" (for people) or "json" (one object per line, for log
        /// shippers).
        #[flag("log-format", "FORMAT")]
        log_format: LogFormat = LogFormat::Text;
        /// Directory of files served on demand (/files/ downloads, /vod/ playback) and where
        /// recordings are written.
        #[flag("media-root", "DIR")]
        media_root: String = "./media";
    }

    /// RTMP in (publishers) and out (players).
    [rtmp] RtmpSettings {
        /// RTMP listener address, or "off".
        #[flag("rtmp", "ADDR")]
        listen: Listen = "0.0.0.0:1935";
        /// RTMPS (RTMP over TLS) listener address, or "off"; it serves the HTTPS certificate
        /// (`http.tls_cert`, `http.tls_key`, or `--tls-self-signed`) and is off without one.
        #[flag("rtmps", "ADDR")]
        rtmps: Listen = "off";
        /// Outgoing RTMP chunk size; the same for every player so chunked bytes are shared.
        chunk_size: u32 = 4096;
        /// Largest RTMP message accepted from a peer, in bytes.
        max_message_len: usize = 8 << 20;
    }

    /// RTSP in (ANNOUNCE/RECORD) and out (DESCRIBE/PLAY), RTP interleaved on TCP or over UDP.
    [rtsp] RtspSettings {
        /// RTSP listener address (publish with ANNOUNCE/RECORD, play with DESCRIBE/PLAY; RTP
        /// interleaved on TCP or over UDP), or "off".
        #[flag("rtsp", "ADDR")]
        listen: Listen = "0.0.0.0:8554";
        /// UDP ports for RTSP's RTP over UDP, as "A-B": each worker binds one pair (RTP on an
        /// even port, RTCP on the next) shared by all its UDP sessions; "0" lets the kernel
        /// choose; "off" offers TCP only.
        #[flag("rtp-ports", "A-B")]
        rtp_ports: RtpPorts = "30000-30199";
        /// RTSP users as "name:password" (the flag: repeat it for more); empty (the default)
        /// asks nobody for credentials. Clients get Digest and Basic challenges (401).
        #[flag("rtsp-user", "NAME:PASSWORD")]
        users: Vec<String> = Vec::new();
        /// Which RTSP requests need credentials when users are set: "publish"
        /// (ANNOUNCE/RECORD) or "all" (every request but OPTIONS).
        #[flag("rtsp-auth", "WHICH")]
        auth: RtspAuth = RtspAuth::Publish;
        /// Send all RTP packets of a frame (of a merge window) with one call: a vectored
        /// write on TCP, sendmmsg on UDP. false sends each packet with its own call, only to
        /// measure what batching saves.
        #[flag("rtsp-batch", "BOOL")]
        batch: bool = true;
        /// An RTSP session with no request (and, playing over UDP, no RTCP receiver report)
        /// for this many seconds is closed; announced to clients, which send keep-alives.
        session_timeout_s: u64 = 60;
    }

    /// HTTP and HTTPS: HTTP-FLV, WebSocket-FLV, HLS, files and VOD.
    [http] HttpSettings {
        /// HTTP listener address (HTTP-FLV, WebSocket-FLV, HLS, files), or "off".
        #[flag("http", "ADDR")]
        listen: Listen = "0.0.0.0:8080";
        /// HTTPS listener address (the same routes as HTTP), or "off"; it listens only with a
        /// certificate (tls_cert and tls_key) or tls_self_signed.
        #[flag("https", "ADDR")]
        https: Listen = "0.0.0.0:8443";
        /// PEM file with the HTTPS certificate chain.
        #[flag("tls-cert", "FILE")]
        tls_cert: String = "";
        /// PEM file with the HTTPS private key.
        #[flag("tls-key", "FILE")]
        tls_key: String = "";
        /// Generate a self-signed certificate for localhost at start (development only).
        #[flag("tls-self-signed", "BOOL")]
        tls_self_signed: bool = false;
    }

    /// WebRTC: WHEP players at /app/stream/whep and WHIP publishers at /app/stream/whip on
    /// the HTTP and HTTPS listeners, media on one UDP port (ICE, DTLS-SRTP).
    [webrtc] WebrtcSettings {
        /// UDP address of WebRTC media (every worker shares it), or "off".
        #[flag("webrtc-udp", "ADDR")]
        udp: Listen = "0.0.0.0:8189";
        /// TCP address for ICE over TCP (RFC 6544 passive candidates, RFC 4571 framing), for
        /// browsers on networks that block UDP; "off" by default. With `udp` off, WebRTC is
        /// TCP only.
        #[flag("webrtc-tcp", "ADDR")]
        tcp: Listen = "off";
        /// Addresses (IPs or host names) browsers reach the UDP port at, announced as ICE
        /// candidates. Empty: the UDP address's IP when it names one, else this machine's
        /// interface addresses. Behind NAT or in Docker, name the public address here.
        #[flag("webrtc-candidate", "HOST")]
        candidates: Vec<String> = Vec::new();
        /// STUN servers ("host:port") asked at start which address they see the UDP port
        /// at; that address is announced first (behind NAT, where it is not known in
        /// advance). None by default: nothing is sent anywhere unless configured.
        #[flag("webrtc-stun", "HOST:PORT")]
        stun_servers: Vec<String> = Vec::new();
        /// Answered sessions whose ICE has not started yet, at most (SDP offers past it are
        /// refused with 503).
        max_pending: usize = 1_000;
        /// A WHIP publisher is asked for a keyframe this often (browsers send one only when
        /// asked), so that new players start on a recent one; and sooner (at most every
        /// 500 ms) when a WebRTC player of its stream asks for one.
        #[flag("webrtc-keyframe-interval-ms", "MS")]
        keyframe_interval_ms: u64 = 2_000;
        /// Transcode a stream's AAC audio to Opus for its WebRTC players, once per stream on a
        /// thread of its own while it has any. Off (or a build without the `transcode`
        /// feature): WebRTC players of AAC streams get video only.
        #[flag("webrtc-transcode", "BOOL")]
        transcode_audio: bool = true;
        /// How long each Opus packet transcoded from AAC is, in ms: 20 (what browsers send)
        /// or 40 (half the packets to send per viewer, 20 ms more latency).
        #[flag("webrtc-opus-frame-ms", "MS")]
        opus_frame_ms: u64 = 20;
    }

    /// SRT in (publishers) and out (players): MPEG-TS over SRT on one UDP port. Callers say
    /// what they want in their stream id: `#!::r=app/stream,m=publish` (or `m=request`),
    /// `publish:app/stream`, `read:app/stream`.
    [srt] SrtSettings {
        /// SRT listener address (UDP; every worker shares it), or "off".
        #[flag("srt", "ADDR")]
        listen: Listen = "0.0.0.0:8890";
        /// The receiver latency this server asks for, in ms (TSBPD): how long a lost packet may
        /// be waited for. The larger of both sides' wins; libsrt's default is 120.
        #[flag("srt-latency-ms", "MS")]
        latency_ms: u64 = 120;
        /// Passphrase (10 to 79 characters) every SRT caller must use; empty (the default):
        /// callers must not encrypt.
        #[flag("srt-passphrase", "TEXT")]
        passphrase: String = "";
        /// AES key length in bytes announced to callers that do not choose one: 16, 24 or 32.
        #[flag("srt-pbkeylen", "BYTES")]
        pbkeylen: usize = 16;
        /// A peer silent for this long (ms) is disconnected; libsrt's default is 5000.
        #[flag("srt-idle-timeout-ms", "MS")]
        peer_idle_timeout_ms: u64 = 5_000;
    }

    /// Edge mode: a stream asked for here that nobody publishes here is pulled from an
    /// origin (RTMP, RTMPS or HTTP-FLV) and played from this server by every protocol; one
    /// pull per stream, however many viewers, stopped a while after the last one leaves.
    /// An origin that fails is replaced by the next, and players continue. [[apps]]
    /// entries may name their own origins.
    [edge] EdgeSettings in crate::relay {
        /// Origins, tried in order: rtmp://HOST[:PORT], rtmps://HOST[:PORT] or
        /// http(s)://HOST[:PORT] (HTTP-FLV), each optionally with a path prefix; the stream's
        /// app/stream is appended (rtmp://origin:1935 pulls live/cam as
        /// rtmp://origin:1935/live/cam). Repeat the flag for more. Empty: not an edge.
        #[flag("origin", "URL")]
        origins: Vec<String> = Vec::new();
        /// Stop pulling a stream this many ms after its last viewer left.
        #[flag("edge-idle-ms", "MS")]
        idle_ms: u64 = 5_000;
        /// After every origin failed in turn, wait this long before the next round; the wait
        /// doubles each round up to retry_max_ms. Pushes wait the same way between attempts.
        retry_min_ms: u64 = 500;
        /// The longest wait between rounds of attempts (pulls and pushes).
        retry_max_ms: u64 = 8_000;
        /// Failed attempts in a row after which a pull with no viewers gives up (viewers keep
        /// it trying, with backoff).
        max_failures: u32 = 6;
        /// How long an origin has to start sending a stream (connect, handshake, play).
        #[flag("edge-connect-timeout-ms", "MS")]
        connect_timeout_ms: u64 = 5_000;
        /// Streams published here are also pushed to their first rtmp:// or rtmps:// origin
        /// (an edge that takes publishers for its origin).
        #[flag("edge-forward-publish", "BOOL")]
        forward_publish: bool = false;
        /// A PEM file of root certificates trusted, besides the web PKI's, for rtmps:// and
        /// https:// origins and push targets (a private CA). Empty: the web PKI's only.
        #[flag("edge-tls-ca", "FILE")]
        tls_ca: String = "";
        /// Where an edge asks which origin holds a stream before trying its origins in turn:
        /// an http(s) URL, {key} replaced by the stream's app/stream. A 200 answer's body is
        /// the origin's URL (as in origins), tried first; a 404 means no origin has the stream.
        /// Empty: no lookup.
        #[flag("edge-lookup-url", "URL")]
        lookup_url: String = "";
        /// Pulls running at once, at most; a viewer of another stream past it is refused
        /// (always-on pulls are not counted out). 0: no limit.
        max_pulls: usize = 1_000;
    }

    /// A node of a cluster: a directory in Redis or Valkey says which node owns each
    /// stream, so any node takes any publisher and plays any stream, pulling it from its
    /// owner over RTMP (docs/cluster.md).
    [cluster] ClusterSettings in crate::cluster {
        /// The directory: redis://[USER:PASSWORD@]HOST[:PORT][/DB], rediss://... (TLS),
        /// valkey://... or unix:///path. Empty (the default): not a cluster.
        #[flag("cluster", "URL")]
        directory: String = "";
        /// This node's id in the directory. Empty: the host's name and a random suffix, new
        /// at each start.
        #[flag("node-id", "ID")]
        node_id: String = "";
        /// The host name or address other nodes and redirected clients reach this node at,
        /// with each listener's port (in Kubernetes, the pod's IP). Empty: the host's name.
        #[flag("cluster-advertise", "HOST")]
        advertise: String = "";
        /// How long the directory keeps a node's entries without a refresh (each node
        /// refreshes every third of it): how soon a dead node's streams may be taken.
        #[flag("cluster-ttl-ms", "MS")]
        ttl_ms: u64 = 5_000;
        /// The longest a publisher's admission or a lookup waits for the directory; past
        /// it the node goes on as a single server would, and registers later.
        timeout_ms: u64 = 1_000;
        /// The prefix of every key in the directory: clusters may share a Redis.
        prefix: String = "sluice";
        /// A PEM file of root certificates a rediss:// directory's certificate is checked
        /// against, instead of the web PKI's. Empty: the web PKI's.
        tls_ca: String = "";
        /// Past this many connections, new HTTP-FLV, HLS, WHEP and WHIP sessions are sent
        /// to the least loaded other node (307) rather than served here; RTMP and SRT
        /// clients, which follow no redirect, are served. A draining node sends them all.
        /// 0: no limit.
        #[flag("cluster-max-connections", "N")]
        max_connections: usize = 0;
        /// The same past this much media sent to players (Mbit/s, as of the last refresh).
        /// 0: no limit.
        max_egress_mbps: u64 = 0;
    }

    /// Live HLS: streams segmented in memory while asked for, MPEG-TS at /app/stream.m3u8, fMP4 with
    /// Low-Latency HLS at /app/stream/index.m3u8.
    [hls] HlsSettings {
        /// Segment every live stream for HLS ([[apps]] entries may turn it on or off per app).
        #[flag("hls", "BOOL")]
        enabled: bool = true;
        /// HLS target segment duration in ms; segments start at keyframes, so they last at
        /// least one GOP. Files played on demand are segmented by it too.
        #[flag("hls-segment-ms", "MS")]
        segment_ms: u32 = 2_000;
        /// Low-Latency HLS part duration in ms. Players in low-latency mode play
        /// PART-HOLD-BACK, three parts (0.6 s), behind the newest part: hls.js about 0.8 s
        /// behind live at 200 ms, 1.2 s at 300 ms; shorter parts mean more requests.
        #[flag("hls-part-ms", "MS")]
        part_ms: u32 = 200;
        /// Segments listed in a live playlist; three more are kept for slow clients.
        window: usize = 6;
        /// Segment every stream from its first frame, asked for or not (a CDN origin). Off, a
        /// stream is segmented from its first HLS request, starting with the GOPs its ring
        /// keeps (so the first playlist lists them at once), until idle_s after the last one.
        /// [[apps]] entries may set hls_always.
        #[flag("hls-always", "BOOL")]
        always: bool = false;
        /// Segmenting of a stream stops, and its segments are dropped, this many seconds
        /// after its last HLS request (unless always).
        #[flag("hls-idle-s", "S")]
        idle_s: u64 = 60;
        /// "none" or "aes-128": live HLS segments encrypted whole with AES-128 (TS and fMP4;
        /// the fMP4 variant then has no Low-Latency parts). Players get the keys from
        /// /app/stream/key/ID, answered only to viewers that auth.read (or the app's
        /// auth_read) admits, never cached. [[apps]] entries may set hls_encryption.
        #[flag("hls-encryption", "METHOD")]
        encryption: HlsEncryption = HlsEncryption::None;
        /// With encryption, a new key every this many segments (1 to 1000). [[apps]]
        /// entries may set hls_key_rotation.
        key_rotation: u32 = 10;
    }

    /// Snapshots: GET /app/stream.jpg (?width=W) answers a JPEG of the stream's newest
    /// keyframe, made by ffmpeg from what the ring holds, never on the media path.
    [snapshots] SnapshotSettings {
        /// Answer /app/stream.jpg.
        #[flag("snapshots", "BOOL")]
        enabled: bool = true;
        /// A stream's snapshot (of each size asked for) is made at most this often;
        /// requests in between get the last one (Cache-Control max-age says how long).
        #[flag("snapshot-s", "S")]
        interval_s: u64 = 10;
        /// The ffmpeg that decodes keyframes (H.264, H.265) into JPEGs.
        ffmpeg: String = "ffmpeg";
        /// ffmpeg processes at once on the server; more wait their turn.
        max_jobs: usize = 2;
    }

    /// Recording live streams to files below the media root.
    [record] RecordSettings {
        /// Streams to record, as patterns: "live/*" (every stream of app live), "live/cam1"
        /// (one stream), "*/cam*", "*" (every stream); none by default. The flag takes several,
        /// repeated or comma-separated. [[apps]] entries may force recording on or off.
        #[flag("record", "PATTERN", split = ',')]
        streams: Vec<String> = Vec::new();
        /// Where recordings go, relative to media_root (or absolute): a file is
        /// dir/app/stream/stream-YYYYmmdd-HHMMSS.mp4 (the time it starts, in UTC).
        #[flag("record-dir", "DIR")]
        dir: String = "recordings";
        /// Container of recordings: "fmp4" (fragmented MP4, played by /vod/) or "ts" (MPEG-TS).
        #[flag("record-format", "FORMAT")]
        format: record::Format = record::Format::Fmp4;
        /// A recording starts a new file at the first keyframe after this many seconds.
        #[flag("record-rotate-s", "S")]
        rotate_s: u64 = 3600;
        /// A recording writes a fragment at the first keyframe after this many ms (audio-only:
        /// every this many ms; without keyframes: after 4 times this), which bounds what a
        /// crash loses.
        #[flag("record-fragment-ms", "MS")]
        fragment_ms: u64 = 1000;
        /// Bytes of frames waiting for the recording thread; past this (a stalled disk) a
        /// recording drops frames until its next keyframe.
        queue_bytes: usize = 64 << 20;
        /// Recordings older than this many days (by their end) are removed, oldest first;
        /// 0 keeps them forever. [[apps]] entries may set their own.
        #[flag("record-keep-days", "DAYS")]
        keep_days: u64 = 0;
        /// Every recording together holds at most this many bytes: past it, the oldest
        /// files of any stream are removed; 0: no limit. [[apps]] entries may set a limit
        /// of their own streams' bytes besides.
        #[flag("record-keep-bytes", "BYTES")]
        keep_bytes: u64 = 0;
        /// The file system of the record dir keeps at least this many bytes free: below
        /// it, the oldest recordings of any stream are removed; 0: no limit. A file being
        /// recorded or read (played on demand, downloaded) is never removed: it goes on a
        /// later pass (every minute, and when a file is complete).
        #[flag("record-min-free-bytes", "BYTES")]
        min_free_bytes: u64 = 0;
    }

    /// How players (viewers) are written to and when they are given up on.
    [players] PlayersSettings {
        /// Merged writes: a player's socket is written at most once per this many ms, with
        /// every frame since; 0 writes each frame at once (lowest latency, more CPU).
        /// [[apps]] entries may set their own.
        #[flag("merge-ms", "MS")]
        merge_ms: u64 = 200;
        /// Kernel send buffer per player socket, in bytes; small so a slow player's lag shows
        /// in the ring, where the skip policy sees it, instead of parking megabytes in the
        /// kernel.
        #[flag("player-send-buffer", "BYTES")]
        send_buffer: usize = 256 << 10;
        /// A player this many ms behind the newest frame skips to the newest keyframe.
        #[flag("player-max-lag-ms", "MS")]
        max_lag_ms: u64 = 3_000;
        /// A player that had to skip more often than this is disconnected.
        #[flag("player-max-skips", "N")]
        max_skips: u32 = 5;
        /// A player of a stream that is not live waits this many ms for a publisher, then gets
        /// not-found (RTMP NetStream.Play.StreamNotFound, HTTP 404).
        #[flag("play-wait-ms", "MS")]
        wait_ms: u64 = 3_000;
    }

    /// How publishers (RTMP, RTSP over TCP) are read.
    [publishers] PublishersSettings {
        /// Merged reads: a publisher's socket is read at most once per this many ms, taking
        /// every frame that arrived meanwhile in one wake-up (fewer wake-ups, reads and
        /// acknowledgements per frame). Adds up to this much latency; never more than the
        /// stream's merge window (players' merge_ms), so an app with merge_ms = 0 reads at
        /// once. 0 reads every frame as it arrives.
        #[flag("publisher-read-merge-ms", "MS")]
        read_merge_ms: u64 = 40;
        /// When a second publisher arrives for a stream that has one: "reject" it, or let
        /// it "takeover" (the first is disconnected; players continue with the new one).
        #[flag("second-publisher", "POLICY")]
        second: SecondPublisher = SecondPublisher::Reject;
        /// Disconnect a publisher whose stream has had no viewers (players or HLS) for this
        /// many seconds; 0 never does.
        #[flag("publisher-no-viewers-s", "SECONDS")]
        no_viewers_s: u64 = 0;
    }

    /// What one stream or connection may hold on to: memory and time.
    [limits] LimitsSettings {
        /// How much recent media each stream keeps (the GOP cache and the slack for slow
        /// players), in ms; at least one GOP is always kept.
        #[flag("ring-ms", "MS")]
        ring_ms: u64 = 10_000;
        /// Upper bound of one stream's ring in bytes, whatever ring_ms says.
        ring_bytes: usize = 64 << 20;
        /// When a publisher drops, its players wait this many ms for it to come back, and
        /// continue with continuous timestamps if it does.
        #[flag("publish-grace-ms", "MS")]
        publish_grace_ms: u64 = 10_000;
        /// A connection that sends nothing this many ms while nothing is due to it (a
        /// publisher without media, a request never completed), or that takes nothing of a
        /// file download this long, is closed.
        idle_timeout_ms: u64 = 30_000;
        /// How long a connection has from its accept to start publishing or playing (RTMP:
        /// handshake, connect, publish or play; RTSP: up to RECORD or PLAY) and a TLS
        /// handshake to complete. A start that trickles in slower (slowloris) is closed,
        /// however often it sends. HTTP bounds each request head by idle_timeout_ms
        /// instead. 0: no bound.
        #[flag("handshake-timeout-ms", "MS")]
        handshake_timeout_ms: u64 = 10_000;
        /// Connections in all, every protocol; more are closed at accept (0: no limit).
        #[flag("max-connections", "N")]
        max_connections: usize = 50_000;
        /// Connections from one address (0: no limit). Load tests from one machine need
        /// more, or 0.
        #[flag("max-connections-per-ip", "N")]
        max_connections_per_ip: usize = 1_000;
        /// Live streams (and streams in their grace window); a publisher of a new one past
        /// it is refused (0: no limit).
        #[flag("max-streams", "N")]
        max_streams: usize = 10_000;
        /// Streams one address may publish at once (0: no limit).
        #[flag("max-publishers-per-ip", "N")]
        max_publishers_per_ip: usize = 100;
        /// Sessions with media over UDP at once (RTSP with RTP over UDP, WebRTC); a SETUP
        /// past it is answered 453 (0: no limit).
        #[flag("max-udp-sessions", "N")]
        max_udp_sessions: usize = 10_000;
        /// On SIGTERM or SIGINT: how long connections get to end cleanly (streams end,
        /// players are told, owed bytes are written) before the rest are dropped.
        /// Recordings are completed after that either way.
        #[flag("shutdown-grace-ms", "MS")]
        shutdown_grace_ms: u64 = 5_000;
        /// A drain (POST /api/v1/drain, or SIGTERM with drain_on_sigterm) takes no new
        /// publishers or players, answers /readyz with 503, marks the node draining in a
        /// cluster, and waits up to this long (ms) for its connections and UDP sessions to
        /// end before it stops as on SIGTERM.
        #[flag("drain-ms", "MS")]
        drain_ms: u64 = 30_000;
        /// SIGTERM drains first (see drain_ms) instead of stopping at once; a second SIGTERM
        /// or SIGINT stops at once. For Kubernetes: set terminationGracePeriodSeconds above it.
        #[flag("drain-on-sigterm", "BOOL")]
        drain_on_sigterm: bool = false;
    }

    /// Who may publish and play, the same for every protocol (RTMP, RTSP, HTTP-FLV,
    /// WS-FLV, HLS, files). Backends, in order: a signed URL; a JWT (query token=JWT,
    /// Authorization: Bearer, or as the password of any user name); a `[[users]]`
    /// entry's name and password (query user=NAME&pass=PASSWORD, HTTP Basic, RTSP's
    /// challenge); then the HTTP hook, for what those did not settle.
    [auth] AuthSettings in crate::auth {
        /// Publishing needs authorization.
        #[flag("auth-publish", "BOOL")]
        publish: bool = false;
        /// Playing (and downloading files) needs authorization.
        #[flag("auth-read", "BOOL")]
        read: bool = false;
        /// Key of signed URLs: a query expires=UNIX&sign=HEX, where HEX is
        /// HMAC-SHA256(key, "ACTION:PATH:UNIX") and ACTION is publish or read. Empty: none.
        signing_key: String = "";
        /// JWT key: an HMAC secret (16 bytes or more) or a PEM public key (RSA, EC,
        /// Ed25519). Empty: none.
        jwt_key: String = "";
        /// A JWKS URL whose keys verify JWTs (fetched at start and every 5 minutes).
        /// Empty: none.
        jwt_jwks_url: String = "";
        /// The JWT claim listing what a token permits: [{"action": "publish", "path":
        /// "live/*"}, {"action": "read"}] (action publish, read or api; no path: any).
        jwt_claim: String = "sluice";
        /// HTTP(S) URL POSTed a JSON body (action, path, protocol, ip, id, user, password,
        /// token, query) for each request the other backends do not settle; a 2xx answer
        /// allows it. Empty: none.
        #[flag("auth-hook", "URL")]
        hook_url: String = "";
        /// How long the hook may take before the request is refused.
        hook_timeout_ms: u64 = 3_000;
        /// How long the hook's answer to the same question (action, path, protocol,
        /// address, credentials, query) is remembered.
        hook_cache_ms: u64 = 10_000;
    }

    /// Notification hooks: URLs POSTed a JSON body when something ended, without waiting
    /// for or using the answer (a slow or dead receiver delays nothing; events beyond
    /// a queue of 4096 are dropped and logged).
    [hooks] HookSettings in crate::hooks {
        /// When a publisher stops (event, id, protocol, ip, path, bytes_in, bytes_out,
        /// duration_s). Empty: none.
        on_publish_done: String = "";
        /// When a player of a connection-based protocol (RTMP, RTSP, HTTP-FLV, WS-FLV)
        /// stops; HLS has no connection to end. Empty: none.
        on_play_done: String = "";
        /// When a recording's file is complete (event, path, file, duration_s, bytes).
        /// Empty: none.
        on_record_done: String = "";
        /// How long one notification may take.
        timeout_ms: u64 = 5_000;
    }

    /// The HTTP API (`/api/v1/...`) and Prometheus metrics (`/metrics`), on the HTTP and
    /// HTTPS listeners.
    [api] ApiSettings {
        /// Bearer token the API and `/metrics` require (`Authorization: Bearer TOKEN`), from
        /// any address. Empty (the default): there is no secret, and they answer only
        /// clients on a loopback address.
        #[flag("api-token", "TOKEN")]
        token: String = "";
        /// A listener of its own for the API, `/metrics` and the console (plain HTTP, nothing
        /// else is served there), or "off": they stay on the HTTP and HTTPS listeners.
        #[flag("api", "ADDR")]
        listen: Listen = "off";
        /// /metrics also has series per connection (labels id, protocol, peer, role,
        /// stream): bytes, lag, skips. One series per connection: for small servers.
        #[flag("metrics-per-connection", "BOOL")]
        metrics_per_connection: bool = false;
    }
}

/// One `[[apps]]` entry: settings of the streams its `name` matches (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hls_always: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hls_encryption: Option<HlsEncryption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hls_key_rotation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_days: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_publisher: Option<SecondPublisher>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_viewers_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_publish: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_read: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_hook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origins: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_always: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_transport: Option<String>,
}

/// The keys of an `[[apps]]` entry and what they do, for the doc (a test checks them
/// against [`AppConfig`]).
const APP_KEYS: &[(&str, &str)] = &[
    (
        "name",
        "Required. The streams it applies to: a pattern matched against the stream key \
         app/stream, as in record.streams (\"live/*\", \"live/cam1\", \"*/cam*\", \"*\"); \
         a name without \"/\" names apps (\"live\" is \"live/*\").",
    ),
    (
        "hls",
        "true or false: HLS for these streams, whatever hls.enabled says (the [hls] \
         segment settings apply).",
    ),
    (
        "hls_always",
        "true or false: segment these streams for HLS from their first frame, asked for \
         or not (a CDN origin), whatever hls.always says.",
    ),
    (
        "hls_encryption",
        "\"none\" or \"aes-128\": encrypt these streams' HLS segments, or not, whatever \
         hls.encryption says (keys at /app/stream/key/ID, for viewers auth_read admits).",
    ),
    (
        "hls_key_rotation",
        "With encryption, a new key every this many segments, instead of \
         hls.key_rotation.",
    ),
    (
        "record",
        "true or false: record these streams, or not, whatever the record.streams \
         patterns say.",
    ),
    (
        "keep_days",
        "Remove these streams' recordings older than this many days, instead of \
         record.keep_days (0: keep them forever).",
    ),
    (
        "keep_bytes",
        "These streams' recordings together hold at most this many bytes: past it, their \
         oldest files are removed (record.keep_bytes still bounds all recordings).",
    ),
    (
        "merge_ms",
        "The merge window of these streams' players, instead of players.merge_ms.",
    ),
    (
        "second_publisher",
        "\"reject\" or \"takeover\": what a second publisher of these streams gets, instead \
         of publishers.second.",
    ),
    (
        "no_viewers_s",
        "Disconnect these streams' publishers after this many seconds without viewers, \
         instead of publishers.no_viewers_s (0: never).",
    ),
    (
        "auth_publish",
        "true or false: publishing these streams needs authorization, instead of \
         auth.publish.",
    ),
    (
        "auth_read",
        "true or false: playing these streams needs authorization, instead of auth.read.",
    ),
    (
        "auth_hook",
        "The auth hook URL for these streams, instead of auth.hook_url (\"\": none).",
    ),
    (
        "origins",
        "The origins these streams are pulled from when asked for and not published here, \
         instead of edge.origins ([]: none, these streams are never pulled).",
    ),
    (
        "push",
        "URLs these streams are pushed to while published here: RTMP or RTMPS \
         (rtmp://host[:port]/app/stream[?query]; {name} becomes the stream's name, {key} \
         its app/stream), reconnecting with backoff (edge.retry_min_ms to retry_max_ms); or \
         MPEG-TS over UDP or RTP (udp://IP:PORT or rtp://IP:PORT, unicast or a multicast \
         group, options ttl=N, iface=IP, pkts=N TS packets per datagram (default 7), \
         bitrate=BITS for a constant rate filled with null packets; without it paced by \
         the PCR), one stream at a time per address: the first published holds it.",
    ),
    (
        "pull",
        "The URL these streams are pulled from when asked for (rtmp://, rtmps://, \
         http(s):// HTTP-FLV, srt://HOST:PORT?streamid=...&passphrase=..., or a camera's \
         rtsp://user:password@HOST[:PORT]/path), whatever edge.origins says; {name} becomes \
         the stream's name, {key} its app/stream.",
    ),
    (
        "pull_transport",
        "\"tcp\" (the default: RTP interleaved on the RTSP connection) or \"udp\" (RTP to a \
         port pair per track): how an rtsp:// pull receives its media.",
    ),
    (
        "pull_always",
        "true: pull the stream (name must then be one stream, app/stream) from the server's \
         start, and keep pulling it whether watched or not, reconnecting with backoff.",
    ),
];

/// One `[[ingest]]` entry: MPEG-TS sent to a UDP address (unicast or a multicast
/// group), plain or in RTP, published as stream `stream` (see `udp_ingest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    pub stream: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
}

/// How long an ingest waits for a datagram before its publisher leaves (the stream
/// then ends after `limits.publish_grace_ms` unless datagrams come back).
pub const INGEST_IDLE_MS: u64 = 3_000;

impl IngestConfig {
    /// The entry's URL, parsed, once its stream is one stream (app/name).
    pub fn check(&self) -> Result<sluice_media::ts::UdpUrl, ConfigError> {
        let key = &self.stream;
        let parts: Vec<&str> = key.split('/').collect();
        let named = parts.len() == 2
            && parts
                .iter()
                .all(|p| !p.is_empty() && *p != "." && *p != "..")
            && !key.contains('*');
        if !named {
            return Err(ConfigError::Invalid {
                key: "ingest.stream",
                why: format!("{key:?} is not app/name"),
            });
        }
        sluice_media::ts::UdpUrl::parse(&self.url).map_err(|e| ConfigError::Invalid {
            key: "ingest.url",
            why: format!("{}: {e}", self.url),
        })
    }

    /// Silence after which the ingest stops publishing.
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms.unwrap_or(INGEST_IDLE_MS).max(1))
    }
}

/// The keys of an `[[ingest]]` entry and what they do, for the doc (a test checks them
/// against [`IngestConfig`]).
const INGEST_KEYS: &[(&str, &str)] = &[
    (
        "stream",
        "Required. The stream it publishes, app/name; played by every protocol as a \
         published stream is.",
    ),
    (
        "url",
        "Required. Where the TS arrives: udp://ADDR:PORT (TS packets in datagrams, any \
         number per datagram, normally 7) or rtp://ADDR:PORT (TS in RTP, RFC 2250: \
         reordered, losses counted). ADDR is a local address (0.0.0.0 for any; port 0 \
         lets the kernel choose, shown by the API) or a multicast group to join; for a group, ?sources=IP[,IP] joins those sources only \
         (SSM) and &interface=IP|NAME picks the interface to join on (IPv6: by name).",
    ),
    (
        "program",
        "The program number to demux from a multi-program TS; the default is program \
         1 if the TS has it, else its first.",
    ),
    (
        "idle_ms",
        "Silence (ms without a datagram) after which the stream's publisher leaves, and \
         the stream ends after limits.publish_grace_ms unless datagrams come back first; \
         the next datagram publishes it again.",
    ),
];

/// An example `[[ingest]]` entry, for the doc and the README.
const INGEST_EXAMPLE: &str =
    "[[ingest]]\nstream = \"live/feed\"\nurl = \"rtp://239.1.1.1:5004?sources=10.0.0.5\"\n";

/// An example `[[apps]]` entry, for `--print-config`, the doc and the README.
const APP_EXAMPLE: &str = "[[apps]]\nname = \"studio\"\nhls = false\nrecord = true\nmerge_ms = 0\n";

/// Command-line flags: those of the settings table (see [`SettingFlags`]) and a few
/// that only the command line has.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a live streaming media server (RTMP and RTSP in and out, HTTP-FLV, WebSocket-FLV, HLS)."
)]
pub struct Cli {
    /// TOML configuration file; flags override its keys.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the configuration (the defaults, then the file and flags given) as commented
    /// TOML, which --config reads back, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Print the reference of every setting (docs/configuration.md) as Markdown, and exit.
    #[arg(long)]
    pub print_config_doc: bool,
    #[command(flatten)]
    pub settings: SettingFlags,
}

/// The flags of the settings table, as given on the command line. Each overrides its key.
#[derive(Debug, Clone, Default)]
pub struct SettingFlags {
    matches: ArgMatches,
}

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(SettingFlags {
            matches: matches.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.matches = matches.clone();
        Ok(())
    }
}

impl clap::Args for SettingFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let defaults = defaults_table();
        cmd.args(
            SETTINGS
                .iter()
                .filter_map(|s| s.arg(&value_of(&defaults, s).unwrap_or_default())),
        )
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The settings of one stream, from the configuration and its `[[apps]]` entry; fixed
/// when the hub creates the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamSettings {
    /// HLS segmenting, or `None` when HLS is off for this stream.
    pub hls: Option<sluice_hls::HlsConfig>,
    /// Segment from the first frame, asked for or not.
    pub hls_always: bool,
    /// Stop segmenting this long after the last HLS request (unless always).
    pub hls_idle: Duration,
    /// Recording forced on (`Some(true)`) or off (`Some(false)`) by an app entry; `None`
    /// leaves it to the `record.streams` patterns.
    pub record: Option<bool>,
    /// The merge window of the stream's players.
    pub merge: Duration,
    /// A second publisher takes the stream over instead of being refused.
    pub takeover: bool,
    /// Disconnect the publisher after this long without viewers.
    pub no_viewers: Option<Duration>,
}

/// The `[[apps]]` entries, compiled, with the global settings they override: what the
/// hub asks for each new stream.
#[derive(Debug, Clone)]
pub struct Apps {
    entries: Vec<(Pattern, AppConfig)>,
    hls: sluice_hls::HlsConfig,
    hls_enabled: bool,
    hls_always: bool,
    hls_idle: Duration,
    hls_encryption: HlsEncryption,
    hls_key_rotation: u32,
    merge: Duration,
    takeover: bool,
    no_viewers_s: u64,
}

impl Apps {
    /// What the core does for each stream (merge window, takeover, no-viewer timeout).
    pub fn policies(self: &Arc<Self>) -> PerStream<StreamPolicy> {
        let apps = self.clone();
        PerStream::new(move |key| {
            let s = apps.for_stream(key);
            StreamPolicy {
                merge: s.merge,
                takeover: s.takeover,
                no_viewers: s.no_viewers,
            }
        })
    }

    /// HLS of each stream (`None`: off).
    pub fn hls(self: &Arc<Self>) -> PerStream<Option<StreamHls>> {
        let apps = self.clone();
        PerStream::new(move |key| {
            let s = apps.for_stream(key);
            Some(StreamHls {
                config: s.hls?,
                always: s.hls_always,
                idle: s.hls_idle,
            })
        })
    }

    /// Recording forced on or off for each stream by its app entry.
    pub fn record(self: &Arc<Self>) -> PerStream<Option<bool>> {
        let apps = self.clone();
        PerStream::new(move |key| apps.for_stream(key).record)
    }

    /// The settings of a new stream `key` (`app/stream`): the first matching entry's,
    /// the global ones for what it leaves out.
    pub fn for_stream(&self, key: &str) -> StreamSettings {
        let app = self
            .entries
            .iter()
            .find(|(pattern, _)| pattern.matches(key))
            .map(|(_, app)| app);
        let hls_on = app.and_then(|a| a.hls).unwrap_or(self.hls_enabled);
        let encryption = app
            .and_then(|a| a.hls_encryption)
            .unwrap_or(self.hls_encryption);
        let rotation = app
            .and_then(|a| a.hls_key_rotation)
            .unwrap_or(self.hls_key_rotation);
        StreamSettings {
            hls: hls_on.then(|| encryption.apply(self.hls, rotation)),
            hls_always: app.and_then(|a| a.hls_always).unwrap_or(self.hls_always),
            hls_idle: self.hls_idle,
            record: app.and_then(|a| a.record),
            merge: app
                .and_then(|a| a.merge_ms)
                .map_or(self.merge, Duration::from_millis),
            takeover: app
                .and_then(|a| a.second_publisher)
                .map_or(self.takeover, |p| p == SecondPublisher::Takeover),
            no_viewers: Some(Duration::from_secs(
                app.and_then(|a| a.no_viewers_s)
                    .unwrap_or(self.no_viewers_s),
            ))
            .filter(|d| !d.is_zero()),
        }
    }
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}{hint}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
        /// Where a key of the old flat layout went, if that is the trouble.
        hint: String,
    },
    #[error("{key}: {why}")]
    Invalid { key: &'static str, why: String },
}

impl Config {
    /// Defaults, then the file named by `--config`, then the flags.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut config = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                Config::from_toml(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source: Box::new(source),
                    hint: moved_keys(&text),
                })?
            }
            None => Config::default(),
        };
        apply_flags(&mut config, &cli.settings.matches);
        config.validate()?;
        Ok(config)
    }

    /// Parses a TOML document; missing keys keep their defaults, unknown keys are errors.
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if ![20, 40].contains(&self.webrtc.opus_frame_ms) {
            return Err(ConfigError::Invalid {
                key: "webrtc.opus_frame_ms",
                why: format!("{} ms: 20 or 40", self.webrtc.opus_frame_ms),
            });
        }
        let origins = self
            .edge
            .origins
            .iter()
            .chain(self.apps.iter().flat_map(|a| a.origins.iter().flatten()));
        for url in origins {
            if let Err(e) = crate::relay::Origin::parse(url) {
                return Err(ConfigError::Invalid {
                    key: "edge.origins",
                    why: e.to_string(),
                });
            }
        }
        for app in &self.apps {
            if let Some(url) = &app.pull {
                if let Err(e) = crate::relay::Origin::parse_exact(url) {
                    return Err(ConfigError::Invalid {
                        key: "apps.pull",
                        why: e.to_string(),
                    });
                }
            }
            if app.pull_always == Some(true)
                && (app.pull.is_none() || app.name.contains('*') || !app.name.contains('/'))
            {
                return Err(ConfigError::Invalid {
                    key: "apps.pull_always",
                    why: format!(
                        "{:?}: an always-on pull names one stream (app/stream) and its pull URL",
                        app.name
                    ),
                });
            }
        }
        let mut ingest_streams = BTreeSet::new();
        for ingest in &self.ingest {
            ingest.check()?;
            if !ingest_streams.insert(ingest.stream.as_str()) {
                return Err(ConfigError::Invalid {
                    key: "ingest.stream",
                    why: format!("{:?} has two ingests", ingest.stream),
                });
            }
        }
        let pushes = self.apps.iter().flat_map(|a| a.push.iter().flatten());
        for url in pushes {
            if let Err(e) = crate::relay::push::PushTarget::parse(url) {
                return Err(ConfigError::Invalid {
                    key: "apps.push",
                    why: e.to_string(),
                });
            }
        }
        if !self.edge.lookup_url.is_empty() {
            let url = self.edge.lookup_url.replace("{key}", "app/stream");
            if let Err(e) = crate::io::http_client::Target::parse(&url) {
                return Err(ConfigError::Invalid {
                    key: "edge.lookup_url",
                    why: e.to_string(),
                });
            }
        }
        if let Err(e) = self.cluster.check() {
            return Err(ConfigError::Invalid {
                key: "cluster.directory",
                why: e.to_string(),
            });
        }
        if !self.edge.tls_ca.is_empty() {
            if let Err(e) = crate::relay::client_tls(&self.edge.tls_ca) {
                return Err(ConfigError::Invalid {
                    key: "edge.tls_ca",
                    why: e.to_string(),
                });
            }
        }
        if self.edge.retry_min_ms == 0 || self.edge.retry_max_ms < self.edge.retry_min_ms {
            return Err(ConfigError::Invalid {
                key: "edge.retry_min_ms",
                why: "retry_min_ms must be above 0 and at most retry_max_ms".into(),
            });
        }
        if !matches!(self.srt.pbkeylen, 16 | 24 | 32) {
            return Err(ConfigError::Invalid {
                key: "srt.pbkeylen",
                why: format!("{} is not 16, 24 or 32", self.srt.pbkeylen),
            });
        }
        let phrase = self.srt.passphrase.len();
        if phrase != 0 && !(10..=79).contains(&phrase) {
            return Err(ConfigError::Invalid {
                key: "srt.passphrase",
                why: format!("{phrase} characters: SRT takes 10 to 79"),
            });
        }
        if let Some(bad) = self.rtsp.users.iter().find(|u| !u.contains(':')) {
            return Err(ConfigError::Invalid {
                key: "rtsp.users",
                why: format!("{bad:?} is not \"name:password\""),
            });
        }
        if !(128..=(16 << 20)).contains(&self.rtmp.chunk_size) {
            return Err(ConfigError::Invalid {
                key: "rtmp.chunk_size",
                why: "must be between 128 and 16777216".into(),
            });
        }
        for pattern in &self.record.streams {
            if let Err(why) = Pattern::parse(pattern) {
                return Err(ConfigError::Invalid {
                    key: "record.streams",
                    why: why.to_string(),
                });
            }
        }
        if self.record.rotate_s == 0 {
            return Err(ConfigError::Invalid {
                key: "record.rotate_s",
                why: "must be at least 1".into(),
            });
        }
        if !(100..=60_000).contains(&self.record.fragment_ms) {
            return Err(ConfigError::Invalid {
                key: "record.fragment_ms",
                why: "must be between 100 and 60000".into(),
            });
        }
        if self.record.queue_bytes < (1 << 20) {
            return Err(ConfigError::Invalid {
                key: "record.queue_bytes",
                why: "must be at least 1 MiB".into(),
            });
        }
        if self.limits.ring_bytes < (1 << 20) {
            return Err(ConfigError::Invalid {
                key: "limits.ring_bytes",
                why: "must be at least 1 MiB".into(),
            });
        }
        let rotation_range = 1..=sluice_hls::MAX_KEY_ROTATION;
        if !rotation_range.contains(&self.hls.key_rotation) {
            return Err(ConfigError::Invalid {
                key: "hls.key_rotation",
                why: "must be between 1 and 1000 segments".into(),
            });
        }
        for app in &self.apps {
            if let Err(why) = Pattern::app(&app.name) {
                return Err(ConfigError::Invalid {
                    key: "apps.name",
                    why: why.to_string(),
                });
            }
            if app
                .hls_key_rotation
                .is_some_and(|r| !rotation_range.contains(&r))
            {
                return Err(ConfigError::Invalid {
                    key: "apps.hls_key_rotation",
                    why: "must be between 1 and 1000 segments".into(),
                });
            }
        }
        Ok(())
    }

    /// The RTSP session settings, with the users and policy of the configuration.
    pub fn rtsp_session(&self) -> sluice_rtsp::ServerConfig {
        self.rtsp.session()
    }

    /// Which new streams are recorded: an app entry's `record`, else the
    /// `record.streams` patterns.
    pub fn recorded(&self) -> PerStream<bool> {
        let patterns = self.record.streams.iter();
        let patterns = patterns.filter_map(|p| Pattern::parse(p).ok()).collect();
        record::records(patterns, Arc::new(self.apps()).record())
    }

    /// The recorder's settings, or `None` when no stream is to be recorded (no
    /// `record.streams` pattern and no app entry with `record = true`).
    pub fn record_config(&self) -> Option<record::RecordConfig> {
        let patterns: Vec<Pattern> = self
            .record
            .streams
            .iter()
            .filter_map(|p| Pattern::parse(p).ok())
            .collect();
        if patterns.is_empty() && !self.apps.iter().any(|a| a.record == Some(true)) {
            return None;
        }
        let record = &self.record;
        let ticks_per_ms = i64::from(sluice_media::CLOCK_HZ / 1000);
        Some(record::RecordConfig {
            stats: Default::default(),
            patterns,
            force: Arc::new(self.apps()).record(),
            dir: PathBuf::from(&self.media_root).join(&record.dir),
            fragmenter: record::FragmenterConfig {
                format: record.format,
                fragment_ticks: i64::try_from(record.fragment_ms)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(ticks_per_ms),
                rotate_ticks: i64::try_from(record.rotate_s)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1000 * ticks_per_ms),
            },
            queue_bytes: record.queue_bytes,
            notifier: None,
            retention: self.retention(),
            readers: Default::default(),
        })
    }

    /// What recordings retention keeps, from `[record]` and the `[[apps]]` entries.
    pub fn retention(&self) -> record::RetentionConfig {
        let days = |d: u64| {
            (d > 0).then(|| i64::try_from(d.saturating_mul(86_400_000)).unwrap_or(i64::MAX))
        };
        let some = |n: u64| (n > 0).then_some(n);
        let global = days(self.record.keep_days);
        record::RetentionConfig {
            max_bytes: some(self.record.keep_bytes),
            min_free_bytes: some(self.record.min_free_bytes),
            default: record::Keep {
                max_age_ms: global,
                max_bytes: None,
            },
            apps: self
                .apps
                .iter()
                .filter_map(|a| {
                    let keep = record::Keep {
                        max_age_ms: a.keep_days.map_or(global, days),
                        max_bytes: a.keep_bytes.and_then(some),
                    };
                    Some((Pattern::app(&a.name).ok()?, keep))
                })
                .collect(),
        }
    }

    /// Where HLS is encrypted while reading needs no authorization, so that its keys go
    /// to anyone who asks: `[hls]` (streams no entry matches) and the names of such
    /// `[[apps]]` entries. The server warns of them at start.
    pub fn keys_open_to_all(&self) -> Vec<String> {
        let open =
            |encryption: HlsEncryption, read: bool| encryption != HlsEncryption::None && !read;
        let mut found = Vec::new();
        if open(self.hls.encryption, self.auth.read) {
            found.push("[hls]".to_string());
        }
        for app in &self.apps {
            let encryption = app.hls_encryption.unwrap_or(self.hls.encryption);
            if open(encryption, app.auth_read.unwrap_or(self.auth.read)) {
                found.push(format!("[[apps]] {}", app.name));
            }
        }
        found
    }

    /// The `[[apps]]` entries compiled, for the hub.
    pub fn apps(&self) -> Apps {
        Apps {
            entries: self
                .apps
                .iter()
                .filter_map(|a| Some((Pattern::app(&a.name).ok()?, a.clone())))
                .collect(),
            hls: self.hls.segmenting(),
            hls_enabled: self.hls.enabled,
            hls_always: self.hls.always,
            hls_idle: Duration::from_secs(self.hls.idle_s),
            hls_encryption: self.hls.encryption,
            hls_key_rotation: self.hls.key_rotation,
            merge: Duration::from_millis(self.players.merge_ms),
            takeover: self.publishers.second == SecondPublisher::Takeover,
            no_viewers_s: self.publishers.no_viewers_s,
        }
    }

    /// The settings a new stream `key` (`app/stream`) gets.
    pub fn for_stream(&self, key: &str) -> StreamSettings {
        self.apps().for_stream(key)
    }

    /// The admission limits of `[limits]`.
    pub fn limit_settings(&self) -> crate::core::limits::LimitSettings {
        let l = &self.limits;
        crate::core::limits::LimitSettings {
            connections: l.max_connections,
            connections_per_ip: l.max_connections_per_ip,
            streams: l.max_streams,
            publishers_per_ip: l.max_publishers_per_ip,
            udp_sessions: l.max_udp_sessions,
        }
    }

    /// Worker threads to start.
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The settings whose values differ from `other`'s: `section.key` (`key` for the
    /// top-level ones), and `apps` or `users` for those lists. What a reload reports
    /// as needing a restart, less what it applied.
    pub fn changed_keys(&self, other: &Config) -> Vec<String> {
        let (Ok(a), Ok(b)) = (toml::Table::try_from(self), toml::Table::try_from(other)) else {
            return Vec::new();
        };
        let mut changed = Vec::new();
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for key in keys {
            match (a.get(key), b.get(key)) {
                (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                    let inner: std::collections::BTreeSet<&String> =
                        x.keys().chain(y.keys()).collect();
                    changed.extend(
                        inner
                            .into_iter()
                            .filter(|k| x.get(*k) != y.get(*k))
                            .map(|k| format!("{key}.{k}")),
                    );
                }
                (x, y) if x != y => changed.push(key.clone()),
                _ => {}
            }
        }
        changed
    }

    /// The default configuration as a commented TOML document.
    pub fn commented_defaults() -> String {
        Config::default().commented()
    }

    /// This configuration as a commented TOML document, every key with its help, that
    /// [`Config::from_toml`] reads back unchanged.
    pub fn commented(&self) -> String {
        let table = toml::Table::try_from(self).expect("a configuration serializes");
        let mut out = String::from(
            "# Sluice configuration: the defaults, then the file and flags given (sluice --help).\n\
             # Every key is optional; docs/configuration.md gives each one's default.\n",
        );
        let mut section = None;
        for setting in SETTINGS {
            if section != Some(setting.section) {
                section = Some(setting.section);
                if let Some((name, doc)) = SECTIONS.iter().find(|(n, _)| *n == setting.section) {
                    out.push_str(&format!("\n{}\n[{name}]\n", comment(doc)));
                }
            }
            out.push('\n');
            out.push_str(&comment(setting.help));
            if let Some(flag) = setting.flag {
                out.push_str(&format!("\n# Flag: --{} {}", flag.name, flag.value));
            }
            let value = value_of(&table, setting).expect("every setting serializes");
            out.push_str(&format!("\n{} = {value}\n", setting.key));
        }
        out.push_str(
            "\n# Per-app overrides: the first entry whose name matches a new stream applies;\n\
             # what it leaves out keeps the settings above. For example:\n",
        );
        for line in APP_EXAMPLE.lines() {
            out.push_str(&format!("# {line}\n"));
        }
        for app in &self.apps {
            let entry = toml::to_string(app).expect("an app entry serializes");
            out.push_str(&format!("\n[[apps]]\n{entry}"));
        }
        for user in &self.users {
            let entry = toml::to_string(user).expect("a user entry serializes");
            out.push_str(&format!("\n[[users]]\n{entry}"));
        }
        for ingest in &self.ingest {
            let entry = toml::to_string(ingest).expect("an ingest entry serializes");
            out.push_str(&format!("\n[[ingest]]\n{entry}"));
        }
        out
    }

    /// `docs/configuration.md`: every setting with its key, default, flag and help.
    pub fn reference_doc() -> String {
        let defaults = defaults_table();
        let mut out = String::from(
            "# Configuration\n\n\
             <!-- Generated from the settings table in crates/server/src/config.rs by\n     \
             `cargo run -p sluice-server --bin sluice -- --print-config-doc > docs/configuration.md`.\n     \
             Edit the table, not this file: a unit test fails when they differ. -->\n\n\
             Sluice takes its settings from built-in defaults, then the TOML file named by\n\
             `--config FILE`, then command-line flags: each overrides the one before. Every key\n\
             is optional, and a key Sluice does not know is an error naming it. A listener\n\
             address of `off` disables the listener. `sluice --print-config` prints the\n\
             configuration (defaults, file and flags) as commented TOML, which `--config`\n\
             reads back.\n\n\
             ```toml\n\
             workers = 4\n\n\
             [rtmp]\n\
             listen = \"0.0.0.0:1935\"\n\n\
             [hls]\n\
             segment_ms = 1000\n\n\
             [record]\n\
             streams = [\"live/*\"]\n\n",
        );
        out.push_str(APP_EXAMPLE);
        out.push_str("```\n\n## Command line only\n\n");
        let mut cmd = Cli::command();
        cmd.build();
        let setting_flags: BTreeSet<&str> =
            SETTINGS.iter().filter_map(|s| Some(s.flag?.name)).collect();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if setting_flags.contains(long) {
                continue;
            }
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .filter(|_| arg.get_num_args().is_some_and(|n| n.takes_values()))
                .map_or(String::new(), |v| format!(" {v}"));
            let help = arg.get_help().map_or(String::new(), |h| h.to_string());
            out.push_str(&format!(
                "- `--{long}{value}`: {}\n",
                help.trim_end_matches('.')
            ));
        }
        let mut section = None;
        for setting in SETTINGS {
            if section != Some(setting.section) {
                section = Some(setting.section);
                match SECTIONS.iter().find(|(n, _)| *n == setting.section) {
                    Some((name, doc)) => {
                        out.push_str(&format!("\n## `[{name}]`\n\n{}\n\n", markdown(&join(doc))));
                    }
                    None => out.push_str("\n## Top level\n\n"),
                }
                out.push_str("| key | default | flag | meaning |\n|---|---|---|---|\n");
            }
            let default = value_of(&defaults, setting).unwrap_or_default();
            let flag = setting
                .flag
                .map_or(String::new(), |f| format!("`--{} {}`", f.name, f.value));
            out.push_str(&format!(
                "| `{}` | `{default}` | {flag} | {} |\n",
                setting.key,
                markdown(&setting.help())
            ));
        }
        out.push_str(
            "\n## `[[apps]]`\n\n\
             Per-app overrides, none by default. The first entry whose `name` matches a new\n\
             stream is that stream's entry, whole: a key it leaves out keeps the global\n\
             setting (it is not taken from a later entry). A stream keeps what it got while it\n\
             is live.\n\n\
             | key | meaning |\n|---|---|\n",
        );
        for (key, help) in APP_KEYS {
            out.push_str(&format!("| `{key}` | {} |\n", markdown(help)));
        }
        out.push_str("\n```toml\n[[apps]]\nname = \"live/*\"\nmerge_ms = 0\n\n");
        out.push_str(APP_EXAMPLE);
        out.push_str("```\n");
        out.push_str(
            "\n## `[[users]]`\n\n\
             Users of the authorization (`[auth]`), none by default. `password` is a hash, never\n\
             the password: an argon2 PHC string (`$argon2id$...`, as `argon2` or any argon2\n\
             library writes it) or `sha256:` and the hex SHA-256 of the password\n\
             (`printf %s PASSWORD | sha256sum`). `publish` and `read` list the stream patterns\n\
             (as `[[apps]]` names) the user may publish and play; `ips` the address ranges it\n\
             may connect from (any when empty); `api = true` lets it use the HTTP API and\n\
             `/metrics` (HTTP Basic), which then answer other addresses than loopback.\n\n\
             ```toml\n[auth]\npublish = true\n\n[[users]]\nname = \"studio\"\n\
             password = \"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n\
             publish = [\"live/*\"]\nread = [\"*\"]\nips = [\"10.0.0.0/8\", \"127.0.0.1\"]\n```\n",
        );
        out.push_str(
            "\n## `[[ingest]]`\n\n\
             MPEG-TS over UDP, plain or in RTP, from a unicast address or a multicast group,\n\
             published as a stream; none by default. Each entry binds its own socket at start\n\
             (a port in use is an error) and publishes its stream from the first datagram;\n\
             silence ends the publishing, and datagrams after it start it again by themselves.\n\
             `GET /api/v1/ingests` and `/metrics` (`sluice_ingest_*`) show what each counted:\n\
             datagrams, continuity errors, RTP packets lost and reordered; `POST /api/v1/ingests`\n\
             adds one with the same keys (as JSON) until the server stops.\n\n\
             | key | meaning |\n|---|---|\n",
        );
        for (key, help) in INGEST_KEYS {
            out.push_str(&format!("| `{key}` | {} |\n", markdown(help)));
        }
        out.push_str(&format!(
            "\n```toml\n{INGEST_EXAMPLE}\n[[ingest]]\nstream = \"live/cam\"\n\
             url = \"udp://0.0.0.0:5000\"\nidle_ms = 5000\n```\n"
        ));
        out
    }
}

impl LimitsSettings {
    /// How long a handshake that is not a connection's own (TLS, a WebRTC session
    /// waiting for ICE) may take: `handshake_timeout_ms`, or the idle timeout when
    /// that is 0.
    pub fn handshake_bound(&self) -> Duration {
        Duration::from_millis(match self.handshake_timeout_ms {
            0 => self.idle_timeout_ms,
            ms => ms,
        })
    }
}

impl RtspSettings {
    /// How long an RTSP session lives without a request or RTCP.
    pub fn session_timeout(&self) -> Duration {
        Duration::from_secs(self.session_timeout_s.max(1))
    }

    /// The RTSP session settings, with the users and policy of the configuration.
    pub fn session(&self) -> sluice_rtsp::ServerConfig {
        let users: std::collections::HashMap<String, String> = self
            .users
            .iter()
            .filter_map(|u| u.split_once(':'))
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect();
        sluice_rtsp::ServerConfig {
            auth: (!users.is_empty()).then(|| sluice_rtsp::AuthConfig::new("sluice", users)),
            session_timeout: self.session_timeout(),
            auth_policy: match self.auth {
                RtspAuth::All => sluice_rtsp::AuthPolicy::All,
                RtspAuth::Publish => sluice_rtsp::AuthPolicy::Publish,
            },
            ..sluice_rtsp::ServerConfig::default()
        }
    }
}

/// The settings of the features, assembled from their sections and `[[apps]]`.
impl Config {
    /// What the authorization is made of: `[auth]`, `[[users]]`, the `[[apps]]`
    /// entries' auth keys and `api.token`.
    pub fn auth_config(&self) -> crate::auth::AuthConfig {
        crate::auth::AuthConfig {
            settings: self.auth.clone(),
            users: self.users.clone(),
            apps: self
                .apps
                .iter()
                .map(|a| crate::auth::AppAuthConfig {
                    name: a.name.clone(),
                    publish: a.auth_publish,
                    read: a.auth_read,
                    hook: a.auth_hook.clone(),
                })
                .collect(),
            api_token: self.api.token.clone(),
        }
    }

    /// What the pulls and pushes are made of: `[edge]` and the `[[apps]]` entries'
    /// origins, pulls and pushes.
    pub fn relay_config(&self) -> crate::relay::RelayConfig {
        crate::relay::RelayConfig {
            edge: self.edge.clone(),
            apps: self
                .apps
                .iter()
                .map(|a| crate::relay::AppRelayConfig {
                    name: a.name.clone(),
                    origins: a.origins.clone(),
                    push: a.push.clone(),
                    pull: a.pull.clone(),
                    pull_always: a.pull_always,
                    pull_transport: a.pull_transport.clone(),
                })
                .collect(),
        }
    }
}

impl HttpSettings {
    /// Where the HTTPS certificate comes from.
    pub fn cert_source(&self) -> crate::io::tls::CertSource {
        crate::io::tls::CertSource {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            self_signed: self.tls_self_signed,
        }
    }
}

impl HlsSettings {
    /// How a stream with HLS on is segmented.
    pub fn segmenting(&self) -> sluice_hls::HlsConfig {
        sluice_hls::HlsConfig {
            target_duration_ms: self.segment_ms,
            part_duration_ms: self.part_ms,
            window: self.window,
            keep_extra: 3,
            low_latency: true,
            encryption: sluice_hls::Encryption::None,
        }
    }
}

/// Help text for a Markdown table cell: quoted values become code (so `*` in a
/// pattern is not emphasis), and `|` cannot end the cell.
fn markdown(text: &str) -> String {
    text.split('"')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("`\"{part}\"`")
            } else {
                part.replace('|', "\\|")
            }
        })
        .collect()
}

/// Doc comment lines as TOML comment lines.
fn comment(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| format!("#{}", l.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn defaults_table() -> toml::Table {
    toml::Table::try_from(Config::default()).expect("the defaults serialize")
}

/// A setting's value in a serialized configuration, as TOML.
fn value_of(table: &toml::Table, setting: &Setting) -> Option<String> {
    let value = if setting.section.is_empty() {
        table.get(setting.key)?
    } else {
        table.get(setting.section)?.get(setting.key)?
    };
    Some(value.to_string())
}

/// Where keys of the old flat layout (`merge_ms = 50` at the top level) went, if the
/// document has any: a hint for the parse error.
fn moved_keys(text: &str) -> String {
    let Ok(table) = text.parse::<toml::Table>() else {
        return String::new();
    };
    let mut hints = Vec::new();
    for key in table.keys() {
        let known = key == "apps"
            || key == "users"
            || SECTIONS.iter().any(|(name, _)| name == key)
            || SETTINGS
                .iter()
                .any(|s| s.section.is_empty() && s.key == key);
        if known {
            continue;
        }
        let moved = SETTINGS.iter().find(|s| {
            !s.section.is_empty()
                && (s.flag.is_some_and(|f| f.name.replace('-', "_") == *key)
                    || format!("{}_{}", s.section, s.key) == *key
                    || s.key == key)
        });
        if let Some(s) = moved {
            hints.push(format!("`{key}` is now `{}` in [{}]", s.key, s.section));
        }
    }
    if hints.is_empty() {
        String::new()
    } else {
        format!("(settings are grouped by section: {})", hints.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_defaults_parse_back_to_defaults() {
        let text = Config::commented_defaults();
        assert_eq!(Config::from_toml(&text).unwrap(), Config::default());
    }

    #[test]
    fn a_printed_configuration_parses_back_unchanged() {
        let config = Config::from_toml(
            "workers = 3\n[rtsp]\nusers = [\"a:b\", \"c:d,e\"]\nbatch = false\n\
             [players]\nmerge_ms = 0\n[record]\nstreams = [\"live/*\"]\n\
             [[apps]]\nname = \"studio\"\nhls = false\n[[apps]]\nname = \"*\"\nmerge_ms = 50\n",
        )
        .unwrap();
        assert_eq!(config.apps.len(), 2);
        assert_eq!(Config::from_toml(&config.commented()).unwrap(), config);
    }

    #[test]
    fn listeners_are_addresses_or_off_refused_with_their_key() {
        // A default that did not parse would turn into `off` unseen.
        let d = Config::default();
        let on = [d.rtmp.listen, d.rtsp.listen, d.http.listen, d.http.https];
        assert!(on
            .iter()
            .chain([&d.webrtc.udp, &d.srt.listen])
            .all(|l| l.is_on()));
        assert_eq!([d.rtmp.rtmps, d.webrtc.tcp, d.api.listen], [Listen::Off; 3]);
        assert_eq!(d.rtsp.rtp_ports, RtpPorts::Range(30000, 30199));
        let why = Config::from_toml("[rtsp]\nrtp_ports = \"1-2\"\n")
            .unwrap_err()
            .to_string();
        assert!(why.contains("rtp_ports") && why.contains("A even"), "{why}");
        let why = Config::from_toml("[srt]\nlisten = \"8890\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("listen = \"8890\"") && why.contains("neither an address"),
            "{why}"
        );
        let flag = Cli::try_parse_from(["sluice", "--rtmp", "localhost"]).unwrap_err();
        assert!(flag.to_string().contains("neither an address"), "{flag}");
    }

    #[test]
    fn every_key_is_in_the_table_once() {
        let table = defaults_table();
        let mut keys = BTreeSet::new();
        for (key, value) in &table {
            match value.as_table() {
                Some(section) => keys.extend(section.keys().map(|k| format!("{key}.{k}"))),
                None => {
                    keys.insert(key.clone());
                }
            }
        }
        let table_keys: BTreeSet<String> = SETTINGS.iter().map(Setting::path).collect();
        assert_eq!(keys, table_keys);
        assert_eq!(SETTINGS.len(), table_keys.len(), "a key twice");
        let flags: BTreeSet<&str> = SETTINGS.iter().filter_map(|s| Some(s.flag?.name)).collect();
        assert_eq!(
            flags.len(),
            SETTINGS.iter().filter(|s| s.flag.is_some()).count()
        );
        for s in SETTINGS {
            assert!(!s.help().is_empty(), "{} has no help", s.key);
            // Quoted values become code in the doc: a stray quote would garble it.
            assert_eq!(s.help().matches('"').count() % 2, 0, "{} quotes", s.key);
        }
    }

    #[test]
    fn udp_push_urls_are_checked_at_start() {
        let ok = "[[apps]]\nname = \"tv/one\"\npush = [\"udp://239.1.1.1:1234?ttl=4&bitrate=4000000\", \"rtp://127.0.0.1:5004\"]\n";
        assert!(Config::from_toml(ok).unwrap().validate().is_ok());
        let bad = "[[apps]]\nname = \"tv\"\npush = [\"udp://127.0.0.1:5000?pkts=9\"]\n";
        match Config::from_toml(bad).unwrap().validate() {
            Err(ConfigError::Invalid { key, why }) => {
                assert_eq!(key, "apps.push");
                assert_eq!(why, "bad push URL: pkts=\"9\": expected 1 to 7 TS packets");
            }
            other => panic!("{other:?}"),
        }
        let unicast_ttl = "[[apps]]\nname = \"tv\"\npush = [\"udp://10.0.0.1:5000?ttl=2\"]\n";
        assert!(Config::from_toml(unicast_ttl).unwrap().validate().is_err());
    }

    #[test]
    fn publisher_policies_per_app() {
        let c = Config::from_toml(
            "[publishers]\nno_viewers_s = 30\n[[apps]]\nname = \"studio\"\nsecond_publisher = \"takeover\"\nno_viewers_s = 0\n",
        )
        .unwrap();
        assert!(c.validate().is_ok());
        let studio = c.for_stream("studio/a");
        assert!(studio.takeover);
        assert_eq!(studio.no_viewers, None);
        let live = c.for_stream("live/a");
        assert!(!live.takeover);
        assert_eq!(live.no_viewers, Some(Duration::from_secs(30)));
        let bad = Config::from_toml("[[apps]]\nname = \"x\"\nsecond_publisher = \"both\"\n");
        let why = bad.unwrap_err().to_string();
        assert!(why.contains("expected `reject` or `takeover`"), "{why}");
    }

    #[test]
    fn retention_comes_from_record_and_the_apps() {
        let c = Config::from_toml(
            "[record]\nstreams = [\"*\"]\nkeep_days = 7\nkeep_bytes = 1000\n\
             [[apps]]\nname = \"cctv\"\nkeep_bytes = 100\n\
             [[apps]]\nname = \"legal\"\nkeep_days = 0\n",
        )
        .unwrap();
        let r = c.retention();
        assert_eq!((r.max_bytes, r.min_free_bytes), (Some(1000), None));
        let week = Some(7 * 86_400_000);
        let keep = |key: &str| r.groups()[r.group(key)];
        assert_eq!(
            keep("cctv/cam"),
            record::Keep {
                max_age_ms: week,
                max_bytes: Some(100)
            }
        );
        assert_eq!(keep("legal/cam"), record::Keep::default(), "forever");
        assert_eq!(keep("live/cam").max_age_ms, week);
        assert!(Config::default().retention().is_off());
    }

    #[test]
    fn app_keys_are_documented() {
        let full = AppConfig {
            name: "x".into(),
            hls: Some(true),
            hls_always: Some(true),
            hls_encryption: Some(HlsEncryption::Aes128),
            hls_key_rotation: Some(3),
            record: Some(true),
            keep_days: Some(1),
            keep_bytes: Some(1),
            merge_ms: Some(1),
            second_publisher: Some(SecondPublisher::Takeover),
            no_viewers_s: Some(1),
            auth_publish: Some(true),
            auth_read: Some(false),
            auth_hook: Some(String::new()),
            origins: Some(vec!["rtmp://origin".into()]),
            push: Some(vec!["rtmp://target/app/{name}".into()]),
            pull: Some("srt://cam:9000?streamid={name}".into()),
            pull_always: Some(true),
            pull_transport: Some("udp".into()),
        };
        let table = toml::Table::try_from(full).unwrap();
        let keys: Vec<&str> = table.keys().map(String::as_str).collect();
        let mut documented: Vec<&str> = APP_KEYS.iter().map(|(k, _)| *k).collect();
        documented.sort_unstable();
        assert_eq!(keys, documented);
    }

    #[test]
    fn ingest_keys_are_documented_and_checked() {
        let full = IngestConfig {
            stream: "live/feed".into(),
            url: "udp://127.0.0.1:5000".into(),
            program: Some(2),
            idle_ms: Some(1),
        };
        let table = toml::Table::try_from(full.clone()).unwrap();
        let keys: Vec<&str> = table.keys().map(String::as_str).collect();
        let mut documented: Vec<&str> = INGEST_KEYS.iter().map(|(k, _)| *k).collect();
        documented.sort_unstable();
        assert_eq!(keys, documented);
        let text = format!("[[ingest]]\n{}", toml::to_string(&full).unwrap());
        let parsed = Config::from_toml(&text).unwrap();
        assert_eq!(parsed.ingest, [full]);
        parsed.validate().unwrap();
        for (bad, key) in [
            (
                "stream = \"feed\"\nurl = \"udp://127.0.0.1:5000\"",
                "ingest.stream",
            ),
            (
                "stream = \"live/a\"\nurl = \"udp://239.0.0.1:0\"",
                "ingest.url",
            ),
            (
                "stream = \"live/a\"\nurl = \"rtp://1.2.3.4:5?sources=1.1.1.1\"",
                "ingest.url",
            ),
        ] {
            let c = Config::from_toml(&format!("[[ingest]]\n{bad}\n")).unwrap();
            match c.validate() {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let twice = "[[ingest]]\nstream = \"live/a\"\nurl = \"udp://127.0.0.1:5000\"\n\
                     [[ingest]]\nstream = \"live/a\"\nurl = \"udp://127.0.0.1:5001\"\n";
        assert!(Config::from_toml(twice).unwrap().validate().is_err());
    }

    /// The long flags of a help text: the first `--word` of each line that starts with `-`.
    fn help_flags(help: &str) -> BTreeSet<String> {
        help.lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-'))
            .filter_map(|l| {
                l.split([' ', ',', '=', '[', '<'])
                    .find(|w| w.starts_with("--"))
            })
            .map(str::to_string)
            .collect()
    }

    /// The flags the doc names: every `` `--word ``.
    fn doc_flags(doc: &str) -> BTreeSet<String> {
        doc.split("`--")
            .skip(1)
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .unwrap_or(rest.len());
                format!("--{}", &rest[..end])
            })
            .collect()
    }

    /// The keys the doc lists: `section.key` for each table row under a `[section]`
    /// heading (the top level's without a section; `[[apps]]` rows left out).
    fn doc_keys(doc: &str) -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        let mut section = Some(String::new());
        for line in doc.lines() {
            if let Some(heading) = line.strip_prefix("## ") {
                section = match heading.trim_matches('`') {
                    "Top level" => Some(String::new()),
                    h if h.starts_with("[[") => None,
                    h if h.starts_with('[') => Some(h.trim_matches(['[', ']']).to_string()),
                    _ => None,
                };
            } else if let (Some(section), Some(row)) = (&section, line.strip_prefix("| `")) {
                let key = row.split('`').next().unwrap_or_default();
                keys.insert(if section.is_empty() {
                    key.to_string()
                } else {
                    format!("{section}.{key}")
                });
            }
        }
        keys
    }

    #[test]
    fn help_print_config_and_the_doc_agree() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == Config::reference_doc(),
            "docs/configuration.md is not what the settings table gives: run \
             `cargo run -p sluice-server --bin sluice -- --print-config-doc > docs/configuration.md`"
        );

        let help = Cli::command().render_long_help().to_string();
        assert_eq!(help_flags(&help), doc_flags(&committed));
        for setting in SETTINGS.iter().filter(|s| s.flag.is_some()) {
            assert!(help.contains(&setting.help()[..20]), "{} help", setting.key);
        }

        let printed = Config::from_toml(&Config::commented_defaults()).unwrap();
        let printed = toml::Table::try_from(printed).unwrap();
        let mut printed_keys = BTreeSet::new();
        for (key, value) in &printed {
            match value.as_table() {
                Some(t) => printed_keys.extend(t.keys().map(|k| format!("{key}.{k}"))),
                None => {
                    printed_keys.insert(key.clone());
                }
            }
        }
        let text = Config::commented_defaults();
        for key in &printed_keys {
            let bare = key.rsplit('.').next().unwrap_or(key);
            assert!(text.contains(&format!("\n{bare} = ")), "{key} not printed");
        }
        assert_eq!(printed_keys, doc_keys(&committed));
    }

    #[test]
    fn flags_override_file() {
        let dir = std::env::temp_dir().join(format!("sluice-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.toml");
        std::fs::write(
            &path,
            "[players]\nmerge_ms = 50\n[http]\nlisten = \"off\"\n[hls]\nenabled = false\n",
        )
        .unwrap();
        let cli = Cli::parse_from([
            "sluice",
            "--config",
            path.to_str().unwrap(),
            "--merge-ms",
            "0",
            "--tls-self-signed",
            "--hls",
            "--rtsp-batch",
            "false",
        ]);
        let config = Config::load(&cli).unwrap();
        assert_eq!(config.players.merge_ms, 0);
        assert_eq!(config.http.listen, Listen::Off);
        assert_eq!(config.rtmp.listen.to_string(), "0.0.0.0:1935");
        assert!(config.http.tls_self_signed);
        assert!(config.hls.enabled);
        assert!(!config.rtsp.batch);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_flag_the_tests_and_benches_use_still_parses() {
        let cli = Cli::parse_from([
            "sluice",
            "--rtmp",
            "127.0.0.1:0",
            "--rtsp",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--https",
            "127.0.0.1:0",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--log",
            "warn",
            "--workers",
            "2",
            "--merge-ms",
            "50",
            "--player-max-lag-ms",
            "1000",
            "--player-max-skips",
            "3",
            "--player-send-buffer",
            "65536",
            "--play-wait-ms",
            "300",
            "--publish-grace-ms",
            "1500",
            "--ring-ms",
            "5000",
            "--media-root",
            "/tmp/m",
            "--record",
            "live/*",
            "--record-rotate-s",
            "1",
            "--record-fragment-ms",
            "500",
            "--record-format",
            "ts",
            "--record-dir",
            "rec",
            "--rtp-ports",
            "0",
            "--rtsp-user",
            "alice:s3cret",
            "--rtsp-auth",
            "all",
            "--rtsp-batch",
            "false",
            "--hls",
            "false",
            "--hls-segment-ms",
            "1000",
            "--hls-part-ms",
            "200",
        ]);
        let c = Config::load(&cli).unwrap();
        assert_eq!(c.rtmp.listen.to_string(), "127.0.0.1:0");
        assert_eq!(c.http.tls_cert, "c.pem");
        assert_eq!(c.workers, 2);
        assert_eq!(c.players.max_lag_ms, 1000);
        assert_eq!(c.players.max_skips, 3);
        assert_eq!(c.players.send_buffer, 65536);
        assert_eq!(c.players.wait_ms, 300);
        assert_eq!(c.limits.publish_grace_ms, 1500);
        assert_eq!(c.limits.ring_ms, 5000);
        assert_eq!(c.record.format, record::Format::Ts);
        assert_eq!(c.rtsp.users, ["alice:s3cret"]);
        assert_eq!(c.rtsp.auth, RtspAuth::All);
        assert!(!c.hls.enabled);
        assert_eq!(c.hls.segment_ms, 1000);
        assert_eq!(c.hls.part_ms, 200);
        assert!(!c.http.tls_self_signed);
    }

    #[test]
    fn record_patterns_from_file_and_flags() {
        let config =
            Config::from_toml("[record]\nstreams = [\"live/*\", \"*\"]\nrotate_s = 60\n").unwrap();
        assert_eq!(config.record.streams, ["live/*", "*"]);
        assert!(config.validate().is_ok());
        let cli = Cli::parse_from(["sluice", "--record", "live/*,app/cam", "--record", "x/y"]);
        assert_eq!(
            Config::load(&cli).unwrap().record.streams,
            ["live/*", "app/cam", "x/y"]
        );
        let cli = Cli::parse_from(["sluice", "--rtsp-user", "a:b,c", "--rtsp-user", "d:e"]);
        assert_eq!(Config::load(&cli).unwrap().rtsp.users, ["a:b,c", "d:e"]);
        let cli = Cli::parse_from(["sluice", "--record", "live"]);
        assert!(matches!(
            Config::load(&cli),
            Err(ConfigError::Invalid {
                key: "record.streams",
                ..
            })
        ));
        // A value outside a setting's choices is refused where it is read: by the flag
        // parser, naming the choices, and by the file's.
        let err = Cli::try_parse_from(["sluice", "--record-format", "avi"]).unwrap_err();
        assert!(
            err.to_string().contains("[possible values: fmp4, ts]"),
            "{err}"
        );
        let err = Config::from_toml("[record]\nformat = \"avi\"\n").unwrap_err();
        assert!(err.to_string().contains("expected `fmp4` or `ts`"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_addresses_are_errors() {
        let err = Config::from_toml("[rtmp]\nlisten = \"x\"\nchunk = 1\n").unwrap_err();
        assert!(err.to_string().contains("chunk"), "{err}");
        assert!(Config::from_toml("rtmpp = \"x\"").is_err());
        assert!(Config::from_toml("[[apps]]\nname = \"x\"\nhsl = true\n").is_err());
        assert!(
            Config::from_toml("[[apps]]\nhls = true\n").is_err(),
            "no name"
        );
        // The flag's parser refuses it, before any configuration is made.
        assert!(Cli::try_parse_from(["sluice", "--rtmp", "nowhere"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "--workers", "many"]).is_err());
        assert!(Cli::try_parse_from(["sluice", "--hls", "maybe"]).is_err());
    }

    #[test]
    fn keys_of_the_old_flat_layout_say_where_they_went() {
        let hint = moved_keys("merge_ms = 50\nrtsp_session_timeout_s = 2\nring_bytes = 1\nx = 1\n");
        assert!(
            hint.contains("`merge_ms` is now `merge_ms` in [players]"),
            "{hint}"
        );
        assert!(
            hint.contains("`rtsp_session_timeout_s` is now `session_timeout_s` in [rtsp]"),
            "{hint}"
        );
        assert!(
            hint.contains("`ring_bytes` is now `ring_bytes` in [limits]"),
            "{hint}"
        );
        assert!(!hint.contains("`x`"), "{hint}");
        assert_eq!(moved_keys("workers = 1\n[rtmp]\nlisten = \"off\"\n"), "");
    }

    #[test]
    fn changed_keys_name_each_setting_that_differs() {
        let a = Config::default();
        let mut b = a.clone();
        assert!(a.changed_keys(&b).is_empty());
        b.rtmp.chunk_size = 8192;
        b.limits.max_streams = 7;
        b.workers = 3;
        b.apps.push(AppConfig {
            name: "live".into(),
            ..AppConfig::default()
        });
        assert_eq!(
            a.changed_keys(&b),
            ["apps", "limits.max_streams", "rtmp.chunk_size", "workers"]
        );
    }

    #[test]
    fn a_bad_app_name_is_refused() {
        let cli = Cli::parse_from(["sluice"]);
        let mut config = Config::load(&cli).unwrap();
        config.apps.push(AppConfig {
            name: "live/".into(),
            ..AppConfig::default()
        });
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Invalid {
                key: "apps.name",
                ..
            })
        ));
    }

    #[test]
    fn apps_encrypt_hls_without_low_latency_and_rotations_are_bounded() {
        let config = Config::from_toml(
            "[hls]\nkey_rotation = 4\n\
             [[apps]]\nname = \"paid\"\nhls_encryption = \"aes-128\"\n\
             [[apps]]\nname = \"paid2\"\nhls_encryption = \"aes-128\"\nhls_key_rotation = 2\n",
        )
        .unwrap();
        assert!(config.validate().is_ok());
        let paid = config.for_stream("paid/cam").hls.expect("HLS on");
        assert_eq!(
            paid.encryption,
            sluice_hls::Encryption::Aes128 { rotation: 4 }
        );
        assert!(!paid.low_latency, "parts are not encrypted");
        assert!(paid.validate(sluice_hls::Variant::Fmp4).is_ok());
        let paid2 = config.for_stream("paid2/cam").hls.expect("HLS on");
        assert_eq!(
            paid2.encryption,
            sluice_hls::Encryption::Aes128 { rotation: 2 }
        );
        let free = config.for_stream("live/cam").hls.expect("HLS on");
        assert_eq!(free.encryption, sluice_hls::Encryption::None);
        assert!(free.low_latency);

        let all = Config::from_toml("[hls]\nencryption = \"aes-128\"\n").unwrap();
        assert!(all.for_stream("live/cam").hls.unwrap().encryption != sluice_hls::Encryption::None);
        assert!(Config::from_toml("[hls]\nencryption = \"aes-256\"\n").is_err());
        for bad in [
            "[hls]\nkey_rotation = 0\n",
            "[hls]\nkey_rotation = 1001\n",
            "[[apps]]\nname = \"x\"\nhls_key_rotation = 0\n",
        ] {
            assert!(Config::from_toml(bad).unwrap().validate().is_err(), "{bad}");
        }
        assert_eq!(
            config.keys_open_to_all(),
            ["[[apps]] paid", "[[apps]] paid2"],
            "keys for anyone: reading needs no authorization"
        );
        let guarded = Config::from_toml(
            "[hls]\nencryption = \"aes-128\"\n[auth]\nread = true\n\
             [[apps]]\nname = \"open\"\nauth_read = false\n",
        )
        .unwrap();
        assert_eq!(guarded.keys_open_to_all(), ["[[apps]] open"]);
        assert!(Cli::try_parse_from(["sluice", "--hls-encryption", "aes-128"]).is_ok());
        assert!(Cli::try_parse_from(["sluice", "--hls-encryption", "rot13"]).is_err());
    }

    #[test]
    fn the_first_matching_app_wins_and_falls_back_to_the_globals() {
        let config = Config::from_toml(
            "[players]\nmerge_ms = 200\n[hls]\nenabled = true\n\
             [[apps]]\nname = \"live/studio\"\nhls = false\n\
             [[apps]]\nname = \"live\"\nmerge_ms = 0\nrecord = true\n\
             [[apps]]\nname = \"*\"\nrecord = false\nmerge_ms = 500\n",
        )
        .unwrap();
        let studio = config.for_stream("live/studio");
        assert_eq!(studio.hls, None);
        assert_eq!(
            studio.merge,
            Duration::from_millis(200),
            "not the later entry's"
        );
        assert_eq!(studio.record, None, "not the later entry's");
        let cam = config.for_stream("live/cam1");
        assert_eq!(cam.hls, Some(config.hls.segmenting()));
        assert_eq!(cam.merge, Duration::ZERO);
        assert_eq!(cam.record, Some(true));
        let other = config.for_stream("other/x");
        assert_eq!(other.merge, Duration::from_millis(500));
        assert_eq!(other.record, Some(false));
        assert!(other.hls.is_some());
    }

    #[test]
    fn apps_turn_hls_on_when_it_is_off_and_nothing_matches_the_globals() {
        let config = Config::from_toml(
            "[hls]\nenabled = false\nsegment_ms = 1000\n[[apps]]\nname = \"tv\"\nhls = true\n",
        )
        .unwrap();
        let tv = config.for_stream("tv/one");
        assert_eq!(tv.hls.map(|h| h.target_duration_ms), Some(1000));
        let live = config.for_stream("live/one");
        assert_eq!(live.hls, None);
        assert_eq!(live.record, None);
        assert_eq!(live.merge, Duration::from_millis(200));
        assert_eq!(
            Config::default().for_stream("live/one").merge,
            Duration::from_millis(200)
        );
    }

    #[test]
    fn an_app_recording_starts_the_recorder_without_patterns() {
        assert!(Config::default().record_config().is_none());
        let config = Config::from_toml("[[apps]]\nname = \"live\"\nrecord = true\n").unwrap();
        let record = config.record_config().unwrap();
        assert!(record.patterns.is_empty());
        let off = Config::from_toml("[[apps]]\nname = \"live\"\nrecord = false\n").unwrap();
        assert!(off.record_config().is_none());
    }
}
