//! `directory-load`: the cluster's directory under a cluster's load (see
//! `sluice_server::cluster::load`): N nodes on their own connections to one Redis,
//! refreshing the streams they own every third of the TTL and looking streams up.
//! Prints one JSON report. `bench/directory.sh` runs it against a fresh redis-server.

use clap::Parser;
use sluice_server::cluster::load::{run, LoadSpec};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "directory-load",
    about = "Load test of the cluster directory on Redis"
)]
struct Args {
    /// The directory (redis://HOST:PORT/DB).
    #[arg(long)]
    redis: String,
    /// Simulated nodes, each with its own connection.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Streams, spread over the nodes.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Lookups per second, all nodes together.
    #[arg(long, default_value_t = 1_000)]
    lookups: u64,
    /// The entries' TTL in ms (refreshes every third of it).
    #[arg(long, default_value_t = 5_000)]
    ttl_ms: u64,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// The keys' prefix (a cluster's own must differ).
    #[arg(long, default_value = "sluice-load")]
    prefix: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let spec = LoadSpec {
        url: args.redis,
        prefix: args.prefix,
        nodes: args.nodes,
        streams: args.streams,
        lookups_per_s: args.lookups,
        ttl: Duration::from_millis(args.ttl_ms),
        duration: Duration::from_secs(args.seconds),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("directory-load: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    match local.block_on(&runtime, run(&spec)) {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("directory-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
