//! The `sluice` binary: parse flags, start the workers, stop on Ctrl-C or SIGTERM.

use clap::Parser;
use sluice_server::{Cli, Config, Server};

#[cfg(target_os = "linux")]
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let workers = config.worker_count();
    let server = match Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // One line a script can read the bound ports from (useful with port 0).
    let addr = |a: Option<std::net::SocketAddr>| a.map_or("off".into(), |a| a.to_string());
    println!(
        "sluice listening rtmp={} rtsp={} http={} https={} workers={workers}",
        addr(server.rtmp),
        addr(server.rtsp),
        addr(server.http),
        addr(server.https),
    );
    wait_for_signal();
    tracing::info!("shutting down");
    server.stop();
    std::process::ExitCode::SUCCESS
}

fn wait_for_signal() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("signal runtime");
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
}
