//! `sluice-bench`: N players of one protocol, or N publishers, against any server,
//! with figures: connect time, first keyframe, bytes, lag and stalls, errors, and the
//! server's CPU and memory when given its PID.
//!
//! A run: connections start at the ramp rate; once all have started, `--warmup`
//! passes, then the measurement window runs to `ramp + --duration`. Every player
//! stops at that instant, and the process exits within a few seconds after it
//! whatever the server does (a watchdog thread enforces it).
//!
//! Files: `target` (URLs), `scan` (sans-IO FLV/WebSocket/RTMP-chunk scanners), `rtsp`
//! (what the RTSP players ask of `sluice_rtsp::ClientSession`, and RTP counts),
//! `rtsp_record` (what the RTSP publishers ask of it, and their ANNOUNCE SDP),
//! `load/` (players per protocol, publishers), `tls` (the rustls client of https:// and
//! wss:// players), `figures` (per-player figures, lag, percentiles), `procfs` (server
//! CPU/RSS), `report` (table and JSON).

mod figures;
mod hls;
mod load;
mod procfs;
mod report;
mod rtsp;
mod rtsp_record;
mod scan;
mod stamp;
mod stamp_scan;
mod target;
mod tls;
mod ts_scan;

use clap::{Args, Parser, Subcommand, ValueEnum};
use figures::{Live, PlayerRow, Spread};
use indicatif::{ProgressBar, ProgressStyle};
use load::publish::{Ingest, PublishCtx, PublisherRow};
use load::publish_rtsp::RtspClip;
use load::Ctx;
use procfs::Sample;
use report::{error_counts, Report, RtpTotals, ServerFigures};
use rtsp::Lower;
use sluice_bench::player::Protocol;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use target::Target;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// Time given to tasks to finish after the run's end before the process gives up on them.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

#[derive(Parser, Debug)]
#[command(
    name = "sluice-bench",
    version,
    about = "Load generator for live streaming servers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run N players of one protocol.
    Play(PlayArgs),
    /// Run N publishers looping an FLV clip.
    Publish(PublishArgs),
}

#[derive(Args, Debug)]
struct PlayArgs {
    /// Protocol of the players.
    #[arg(long, value_enum)]
    protocol: Protocol,
    /// rtmp://host[:port]/app/stream, http://host:port/path.flv or ws://host:port/path.flv;
    /// for hls and ll-hls, the media playlist: http://host:port/app/stream.m3u8 (TS) or
    /// http://host:port/app/stream/index.m3u8 (fMP4, Low-Latency); for rtsp and rtsp-udp,
    /// rtsp://host:port/app/stream. https:// and wss:// play the same over TLS
    /// (HTTP/1.1; give --ca or --insecure).
    #[arg(long)]
    url: String,
    /// TLS: verify the server's certificate against the certificates of this PEM file
    /// and the URL's host.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// TLS: accept any server certificate (self-signed benchmarking).
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// Fraction of players that read slowly (0..1).
    #[arg(long, default_value_t = 0.0)]
    slow_fraction: f64,
    /// Slow players read at this multiple of the stream's bitrate.
    #[arg(long, default_value_t = 0.1)]
    slow_rate: f64,
    #[command(flatten)]
    common: Common,
}

/// Protocols a publisher can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PublishProtocol {
    /// RTMP publish.
    Rtmp,
    /// RTSP ANNOUNCE and RECORD, RTP interleaved on the RTSP connection.
    Rtsp,
    /// RTSP ANNOUNCE and RECORD, RTP over UDP to the server's ports.
    RtspUdp,
    /// SRT caller (`m=publish`), MPEG-TS in 1316-byte payloads.
    Srt,
}

#[derive(Args, Debug)]
struct PublishArgs {
    /// Protocol of the publishers.
    #[arg(long, value_enum, default_value = "rtmp")]
    protocol: PublishProtocol,
    /// rtmp://host[:port]/app/stream, or for rtsp and rtsp-udp rtsp://host[:port]/app/stream;
    /// `{i}` in the stream name becomes the publisher's index, and without it `-i` is
    /// appended when -n > 1. SRT: srt://host:port?streamid=publish:app/stream (with
    /// -n > 1 the stream id needs `{i}`).
    #[arg(long)]
    url: String,
    /// The FLV file to loop (RTSP: its H.264/H.265 and AAC/Opus/G.711 tracks; SRT: its
    /// H.264/H.265 and AAC).
    #[arg(long)]
    clip: PathBuf,
    /// Send each tag when its timestamp is due (the default).
    #[arg(long, overrides_with = "no_realtime")]
    realtime: bool,
    /// Send as fast as the server takes it.
    #[arg(long, overrides_with = "realtime")]
    no_realtime: bool,
    /// Do not stamp the wall clock into H.264 frames (by default each frame gets an
    /// SEI NAL unit with the send time, for players' publish-to-play latency).
    #[arg(long)]
    no_stamp: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct Common {
    /// Number of players or publishers.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    n: usize,
    /// Connections started per second (`200/s`, `200`), or `all` at once.
    #[arg(long, default_value = "500/s", value_parser = parse_ramp)]
    ramp: Ramp,
    /// How long to run after the ramp (`30s`, `500ms`, `2m`; bare number: seconds).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Leave this long after the ramp out of the measurement window.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    warmup: Duration,
    /// Write the report, with per-player rows, to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Sample this process's CPU and RSS (/proc/PID).
    #[arg(long)]
    server_pid: Option<u32>,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
}

/// Connections per second; `None` for all at once.
#[derive(Debug, Clone, Copy)]
struct Ramp(Option<f64>);

fn parse_ramp(s: &str) -> Result<Ramp, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("all") || s == "0" {
        return Ok(Ramp(None));
    }
    let n = s.strip_suffix("/s").unwrap_or(s);
    match n.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(Ramp(Some(r))),
        _ => Err(format!("bad ramp {s:?}: expected e.g. 200/s or all")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("bad duration unit {u:?} in {s:?}")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("bad duration {s:?}"))
}

impl Common {
    /// Time from the first to the last connection start.
    fn ramp_time(&self) -> Duration {
        match self.ramp.0 {
            Some(rate) => Duration::from_secs_f64(self.n.saturating_sub(1) as f64 / rate),
            None => Duration::ZERO,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let common = match &cli.cmd {
        Cmd::Play(a) => &a.common,
        Cmd::Publish(a) => &a.common,
    };
    if common.warmup >= common.duration && !common.duration.is_zero() {
        eprintln!("sluice-bench: --warmup must be shorter than --duration");
        return ExitCode::from(2);
    }
    // The hard bound: whatever happens, the process is gone a few seconds after the end.
    let bound = common.ramp_time() + common.duration + CLOSE_GRACE + Duration::from_secs(5);
    std::thread::spawn(move || {
        std::thread::sleep(bound);
        eprintln!("sluice-bench: hard time bound reached, exiting");
        std::process::exit(3);
    });
    let runtime = if common.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(common.threads)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.cmd {
            Cmd::Play(a) => run_play(a).await,
            Cmd::Publish(a) => run_publish(a).await,
        }
    });
    // Tasks past their grace are not waited for.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(report) => {
            print!("{}", report.table());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluice-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// The run's instants, fixed before the first connection.
struct Plan {
    start: Instant,
    window_start: Instant,
    end: Instant,
}

impl Plan {
    fn new(c: &Common) -> Plan {
        let start = Instant::now();
        let ramp_end = start + c.ramp_time();
        Plan {
            start,
            window_start: ramp_end + c.warmup,
            end: ramp_end + c.duration,
        }
    }
}

/// What [`drive`] measured around the tasks.
struct Measured<R> {
    rows: Vec<R>,
    bytes_total: u64,
    bytes_window: u64,
    window_s: f64,
    server: Option<ServerFigures>,
}

/// Starts `n` tasks at the ramp rate, shows progress, marks the window, samples the
/// server, and collects the rows.
async fn drive<R: Send + 'static>(
    c: &Common,
    plan: &Plan,
    live: &Arc<Live>,
    mut spawn: impl FnMut(usize) -> JoinHandle<R>,
) -> Measured<R> {
    let ticks = procfs::clock_ticks();
    let t = |at: Instant| (at - plan.start).as_secs_f64();
    let probe = move |at: Instant| -> Option<Sample> {
        c.server_pid
            .and_then(|pid| procfs::sample(pid, t(at), ticks))
    };
    let before = probe(Instant::now());
    if c.server_pid.is_some() && before.is_none() {
        eprintln!(
            "sluice-bench: cannot read /proc/{} (server figures left out)",
            c.server_pid.unwrap_or(0)
        );
    }
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = c.server_pid.map(|pid| {
        let samples = samples.clone();
        let start = plan.start;
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                let now = Instant::now();
                if let Some(s) = procfs::sample(pid, (now - start).as_secs_f64(), ticks) {
                    samples.lock().expect("sampler lock").push(s);
                }
            }
        })
    });
    let progress = progress(c, live.clone(), plan.end);
    let mut handles = Vec::with_capacity(c.n);
    for i in 0..c.n {
        if let Some(rate) = c.ramp.0 {
            let at = plan.start + Duration::from_secs_f64(i as f64 / rate);
            if at >= plan.end {
                break;
            }
            sleep_until(at).await;
        }
        handles.push(spawn(i));
    }
    sleep_until(plan.window_start).await;
    let window_start = Instant::now();
    let bytes_start = live.bytes.load(Ordering::Relaxed);
    let start_sample = probe(window_start);
    sleep_until(plan.end).await;
    let window_end = Instant::now();
    let bytes_end = live.bytes.load(Ordering::Relaxed);
    let end_sample = probe(window_end);
    if let Some(s) = sampler {
        s.abort();
    }
    let mut rows = Vec::with_capacity(handles.len());
    let deadline = plan.end + CLOSE_GRACE;
    for h in handles {
        let abort = h.abort_handle();
        match tokio::time::timeout_at(deadline, h).await {
            Ok(Ok(row)) => rows.push(row),
            Ok(Err(e)) => eprintln!("sluice-bench: a task failed: {e}"),
            Err(_) => abort.abort(),
        }
    }
    progress.finish_and_clear();
    let bytes_window = bytes_end - bytes_start;
    let server = match (c.server_pid, before, start_sample, end_sample) {
        (Some(pid), Some(b), Some(s), Some(e)) => {
            let samples = std::mem::take(&mut *samples.lock().expect("sampler lock"));
            Some(ServerFigures::new(pid, b, s, e, samples, bytes_window, c.n))
        }
        _ => None,
    };
    Measured {
        rows,
        bytes_total: live.bytes.load(Ordering::Relaxed),
        bytes_window,
        window_s: (window_end - window_start).as_secs_f64(),
        server,
    }
}

/// The progress line on stderr: connected, failed, Mbit/s; hidden when stderr is
/// not a terminal or with `--quiet`.
fn progress(c: &Common, live: Arc<Live>, end: Instant) -> ProgressBar {
    if c.quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(c.n as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} connected  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let shown = bar.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        let mut last = (Instant::now(), 0u64);
        while Instant::now() < end {
            every.tick().await;
            let now = Instant::now();
            let bytes = live.bytes.load(Ordering::Relaxed);
            let secs = (now - last.0).as_secs_f64().max(1e-3);
            let mbit = (bytes - last.1) as f64 * 8.0 / secs / 1e6;
            last = (now, bytes);
            shown.set_position(live.connected.load(Ordering::Relaxed));
            shown.set_message(format!(
                "{mbit:.1} Mbit/s  {} failed  {:.0} s left",
                live.failed.load(Ordering::Relaxed),
                end.saturating_duration_since(now).as_secs_f64()
            ));
        }
    });
    bar
}

fn base_report(c: &Common, mode: &'static str, protocol: String, url: &str) -> Report {
    Report {
        tool: "sluice-bench",
        version: env!("CARGO_PKG_VERSION"),
        mode,
        protocol,
        url: url.to_string(),
        count: c.n,
        threads: c.threads.max(1),
        ramp_per_s: c.ramp.0,
        duration_s: c.duration.as_secs_f64(),
        warmup_s: c.warmup.as_secs_f64(),
        window_s: 0.0,
        ok: 0,
        failed: 0,
        errors: Default::default(),
        bytes_total: 0,
        bytes_window: 0,
        mbit_s: 0.0,
        connect_ms: Spread::default(),
        first_keyframe_ms: None,
        publish_latency_ms: None,
        stalls: 0,
        players_with_stalls: 0,
        max_lag_ms: 0.0,
        slow_players: 0,
        rtp: None,
        tls: None,
        server: None,
        players: Vec::new(),
        publishers: Vec::new(),
    }
}

fn fill_measured<R>(r: &mut Report, m: &Measured<R>) {
    r.bytes_total = m.bytes_total;
    r.bytes_window = m.bytes_window;
    r.window_s = m.window_s;
    r.mbit_s = if m.window_s > 0.0 {
        m.bytes_window as f64 * 8.0 / m.window_s / 1e6
    } else {
        0.0
    };
}

fn write_json(c: &Common, report: &Report) -> Result<(), String> {
    if let Some(path) = &c.json {
        let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Whether player `i` of a run is slow: `fraction` of them, spread evenly.
fn is_slow(i: usize, fraction: f64) -> bool {
    let f = fraction.clamp(0.0, 1.0);
    ((i + 1) as f64 * f).floor() > (i as f64 * f).floor()
}

async fn run_play(a: PlayArgs) -> Result<Report, String> {
    let target = Target::parse(&a.url)?;
    match (&target, a.protocol) {
        (Target::Rtmp { .. }, Protocol::Rtmp) => {}
        (
            Target::Http {
                websocket: false, ..
            },
            Protocol::Flv,
        ) => {}
        (
            Target::Http {
                websocket: true, ..
            },
            Protocol::WsFlv | Protocol::WsFmp4,
        ) => {}
        (
            Target::Http {
                websocket: false, ..
            },
            Protocol::Fmp4,
        ) => {}
        (
            Target::Http {
                websocket: false, ..
            },
            Protocol::Hls | Protocol::LlHls,
        ) => {}
        (Target::Rtsp { .. }, Protocol::Rtsp | Protocol::RtspUdp) => {}
        (Target::Srt { .. }, Protocol::Srt) => {}
        (
            Target::Http {
                websocket: false,
                tls_name: None,
                ..
            },
            Protocol::Whep,
        ) => {}
        (_, p) => return Err(format!("{} is not a URL for --protocol {p:?}", a.url)),
    }
    let tls = match &target {
        Target::Http {
            tls_name: Some(name),
            ..
        } => {
            let verify = match (&a.ca, a.insecure) {
                (_, true) => tls::Verify::Insecure,
                (Some(ca), false) => tls::Verify::Ca(ca.clone()),
                (None, false) => {
                    return Err(format!(
                        "{}: TLS needs --ca FILE (the server's root certificate) or --insecure",
                        a.url
                    ))
                }
            };
            Some(tls::TlsClient::new(&verify, name)?)
        }
        _ => None,
    };
    let c = &a.common;
    let plan = Plan::new(c);
    let live = Arc::new(Live::default());
    let ctx = Arc::new(Ctx {
        target,
        protocol: a.protocol,
        live: live.clone(),
        end: plan.end,
        slow_rate: a.slow_rate,
        tls,
    });
    let m = drive(c, &plan, &live, |i| {
        tokio::spawn(load::play(ctx.clone(), i, is_slow(i, a.slow_fraction)))
    })
    .await;
    let protocol = a
        .protocol
        .to_possible_value()
        .map_or(format!("{:?}", a.protocol), |v| v.get_name().to_string());
    let mut r = base_report(c, "play", protocol, &a.url);
    fill_measured(&mut r, &m);
    let rows: &[PlayerRow] = &m.rows;
    r.ok = rows.iter().filter(|p| p.ok()).count();
    r.failed = rows.len() - r.ok;
    r.errors = error_counts(rows.iter().map(|p| p.error_kind));
    r.connect_ms = Spread::of(rows.iter().filter_map(|p| p.connect_ms));
    r.first_keyframe_ms = Some(Spread::of(rows.iter().filter_map(|p| p.first_keyframe_ms)));
    r.stalls = rows.iter().map(|p| u64::from(p.stalls)).sum();
    r.players_with_stalls = rows.iter().filter(|p| p.stalls > 0).count();
    r.max_lag_ms = rows.iter().map(|p| p.max_lag_ms).fold(0.0, f64::max);
    r.slow_players = rows.iter().filter(|p| p.slow).count();
    r.rtp = RtpTotals::of(rows);
    let latencies = Spread::of(
        rows.iter()
            .flat_map(|p| p.latencies.iter().map(|&v| f64::from(v))),
    );
    r.publish_latency_ms = (latencies.n > 0).then_some(latencies);
    r.tls = ctx.tls.as_ref().and_then(|t| t.agreed());
    r.server = m.server;
    r.players = m.rows;
    for p in &mut r.players {
        p.finish();
    }
    write_json(c, &r)?;
    Ok(r)
}

async fn run_publish(a: PublishArgs) -> Result<Report, String> {
    let clip = sluice_bench::clip::Clip::load(&a.clip)
        .map_err(|e| format!("{}: {e}", a.clip.display()))?;
    let (addr, ingest) = match (Target::parse(&a.url)?, a.protocol) {
        (
            Target::Rtmp {
                addr, app, stream, ..
            },
            PublishProtocol::Rtmp,
        ) => (addr, Ingest::Rtmp { app, stream }),
        (Target::Rtsp { addr, url }, PublishProtocol::Rtsp | PublishProtocol::RtspUdp) => {
            let rtsp = RtspClip::new(&clip).map_err(|e| format!("{}: {e}", a.clip.display()))?;
            for note in &rtsp.notes {
                eprintln!("sluice-bench: {}: {note}", a.clip.display());
            }
            let lower = if a.protocol == PublishProtocol::RtspUdp {
                Lower::Udp
            } else {
                Lower::Tcp
            };
            (
                addr,
                Ingest::Rtsp {
                    url,
                    lower,
                    clip: rtsp,
                },
            )
        }
        (target @ Target::Srt { .. }, PublishProtocol::Srt) => {
            let (addr, config) = load::srt::call_config(&target, None).expect("an srt target");
            if a.common.n > 1 && !config.stream_id.as_ref().is_some_and(|s| s.contains("{i}")) {
                return Err(format!(
                    "{}: with -n > 1 the stream id needs {{i}} (one stream each)",
                    a.url
                ));
            }
            let rtsp = RtspClip::new(&clip).map_err(|e| format!("{}: {e}", a.clip.display()))?;
            let (_, note) = load::publish_srt::muxer(&rtsp)
                .map_err(|e| format!("{}: {e}", a.clip.display()))?;
            for note in rtsp.notes.iter().chain(&note) {
                eprintln!("sluice-bench: {}: {note}", a.clip.display());
            }
            (addr, Ingest::Srt { config, clip: rtsp })
        }
        (_, p) => return Err(format!("{} is not a URL for --protocol {p:?}", a.url)),
    };
    let c = &a.common;
    let plan = Plan::new(c);
    let live = Arc::new(Live::default());
    let ctx = Arc::new(PublishCtx {
        addr,
        ingest,
        clip,
        realtime: !a.no_realtime,
        stamp: !a.no_stamp,
        live: live.clone(),
        end: plan.end,
    });
    let n = c.n;
    let m = drive(c, &plan, &live, |i| {
        tokio::spawn(load::publish::publish(ctx.clone(), i, n))
    })
    .await;
    let protocol = a
        .protocol
        .to_possible_value()
        .map_or(format!("{:?}", a.protocol), |v| v.get_name().to_string());
    let mut r = base_report(c, "publish", protocol, &a.url);
    fill_measured(&mut r, &m);
    let rows: &[PublisherRow] = &m.rows;
    r.ok = rows.iter().filter(|p| p.ok()).count();
    r.failed = rows.len() - r.ok;
    r.errors = error_counts(rows.iter().map(|p| p.error_kind));
    r.connect_ms = Spread::of(rows.iter().filter_map(|p| p.connect_ms));
    r.server = m.server;
    r.publishers = m.rows;
    write_json(c, &r)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ramps() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(parse_ramp("200/s").map(|r| r.0), Ok(Some(200.0)));
        assert_eq!(parse_ramp("50").map(|r| r.0), Ok(Some(50.0)));
        assert_eq!(parse_ramp("all").map(|r| r.0), Ok(None));
        assert!(parse_ramp("-3/s").is_err());
    }

    #[test]
    fn slow_players_are_spread() {
        let slow: Vec<usize> = (0..10).filter(|&i| is_slow(i, 0.3)).collect();
        assert_eq!(slow.len(), 3);
        assert_eq!((0..1000).filter(|&i| is_slow(i, 0.3)).count(), 300);
        assert_eq!((0..10).filter(|&i| is_slow(i, 0.0)).count(), 0);
        assert_eq!((0..10).filter(|&i| is_slow(i, 1.0)).count(), 10);
    }

    #[test]
    fn cli_parses() {
        let cli = Cli::try_parse_from([
            "sluice-bench",
            "play",
            "--protocol",
            "ws-flv",
            "--url",
            "ws://127.0.0.1:8080/live/a.flv",
            "-n",
            "500",
            "--ramp",
            "200/s",
            "--duration",
            "30s",
            "--slow-fraction",
            "0.3",
        ])
        .unwrap();
        let Cmd::Play(p) = cli.cmd else {
            panic!("play")
        };
        assert_eq!(p.protocol, Protocol::WsFlv);
        assert_eq!(p.common.n, 500);
        let cli = Cli::try_parse_from([
            "sluice-bench",
            "publish",
            "--url",
            "rtmp://127.0.0.1/live/cam1",
            "--clip",
            "c.flv",
            "--no-realtime",
        ])
        .unwrap();
        let Cmd::Publish(p) = cli.cmd else {
            panic!("publish")
        };
        assert!(p.no_realtime && !p.realtime);
        assert_eq!(p.protocol, PublishProtocol::Rtmp);
        let cli = Cli::try_parse_from([
            "sluice-bench",
            "publish",
            "--protocol",
            "rtsp-udp",
            "--url",
            "rtsp://127.0.0.1:8554/live/cam{i}",
            "--clip",
            "c.flv",
        ])
        .unwrap();
        let Cmd::Publish(p) = cli.cmd else {
            panic!("publish")
        };
        assert_eq!(p.protocol, PublishProtocol::RtspUdp);
    }
}
