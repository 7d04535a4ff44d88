//! The `sluice` binary: parse flags, start the workers, stop on Ctrl-C or SIGTERM.

use clap::Parser;
use sluice_server::{Cli, Config, Server};

#[cfg(all(target_os = "linux", not(feature = "system-alloc")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if cli.print_config_doc {
        print!("{}", Config::reference_doc());
        return std::process::ExitCode::SUCCESS;
    }
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if cli.print_config {
        print!("{}", config.commented());
        return std::process::ExitCode::SUCCESS;
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: a log file or journal gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.log_format == sluice_server::config::LogFormat::Json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    sluice_server::count_panics();
    let workers = config.worker_count();
    // Caught from before the listening line: a script that reads it and stops the
    // server at once gets a graceful stop (recordings completed), not the default kill.
    let signals = Signals::catch();
    let server = match Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // A reload reads the same file with the same flags again.
    server.reload_from(Box::new(move || Config::load(&cli)));
    // One line a script can read the bound ports from (useful with port 0).
    let addr = |a: Option<std::net::SocketAddr>| a.map_or("off".into(), |a| a.to_string());
    println!(
        "sluice listening rtmp={} rtmps={} rtsp={} http={} https={} api={} webrtc={} \
         webrtc_tcp={} srt={} workers={workers}",
        addr(server.rtmp),
        addr(server.rtmps),
        addr(server.rtsp),
        addr(server.http),
        addr(server.https),
        addr(server.api),
        addr(server.webrtc),
        addr(server.webrtc_tcp),
        addr(server.srt),
    );
    let drain_on_sigterm = server.config().limits.drain_on_sigterm;
    signals.wait(&server, drain_on_sigterm);
    tracing::info!("shutting down");
    server.stop();
    std::process::ExitCode::SUCCESS
}

/// SIGTERM and SIGINT (Ctrl-C), caught as soon as this is made.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn catch() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("signal runtime");
        let guard = rt.enter();
        let term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
        drop(guard);
        Signals { rt, term, int, hup }
    }

    /// Returns when the server is to stop: at SIGTERM or SIGINT (or one that arrived
    /// since [`Signals::catch`]), or once a drain (the API's, or SIGTERM's with
    /// `drain_on_sigterm`) is over; a signal during a drain ends it at once. Each SIGHUP
    /// meanwhile reloads.
    fn wait(mut self, server: &Server, drain_on_sigterm: bool) {
        self.rt.block_on(async {
            loop {
                tokio::select! {
                    _ = self.term.recv() => {
                        if !drain_on_sigterm {
                            return;
                        }
                        break;
                    }
                    _ = self.int.recv() => return,
                    _ = self.hup.recv() => server.reload(),
                    _ = server.drain_requested() => break,
                }
            }
            let (term, int) = (&mut self.term, &mut self.int);
            server
                .drain(async {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                })
                .await;
        });
    }
}
