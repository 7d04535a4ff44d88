//! nginx as a CDN cache in front of Sluice's HTTP listener, configured as
//! `docs/cdn.md` says: `proxy_cache` keyed by the path and the whole query (so
//! `_HLS_msn`, `_HLS_part` and `_HLS_skip` are in the key), a cache lock held longer
//! than a blocking playlist request waits, stale playlists served while one request
//! refreshes them (no cookie handling: Sluice sends no per-viewer cookie). It logs each request with
//! its cache status and whether it went to the origin, for the tests to count.
//!
//! Included by the tests that need it (`#[path = "common/nginx.rs"] mod nginx;`), next
//! to `mod common;`.
#![allow(dead_code)]

use crate::common::{scratch, tools_present, Kill};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// nginx on 127.0.0.1 with its own prefix directory, killed when dropped (one process:
/// no master, so nothing outlives it, even when a test panics).
pub struct NginxCache {
    _child: Kill,
    /// Where viewers connect.
    pub addr: SocketAddr,
    dir: PathBuf,
}

/// One request as nginx logged it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `$upstream_cache_status`: MISS, HIT, EXPIRED, STALE, UPDATING, ... or `-`.
    pub cache: String,
    /// Whether nginx asked the origin (`$upstream_addr` is set).
    pub origin: bool,
    pub status: u16,
    /// The request's path and query.
    pub uri: String,
}

/// A port the kernel had free a moment ago (nginx cannot take port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs nginx with `conf` (written to `dir/nginx.conf`; logs in `dir/logs`) until it
/// listens on `addr`; killed when the result is dropped.
pub fn run(dir: &std::path::Path, conf: &str, addr: SocketAddr) -> Kill {
    std::fs::create_dir_all(dir.join("logs")).expect("nginx logs dir");
    std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
    let child = Kill(
        Command::new("nginx")
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("logs/error.log"))
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx"),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        let error_log = std::fs::read_to_string(dir.join("logs/error.log")).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "nginx did not listen on {addr}: {error_log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

impl NginxCache {
    /// Starts nginx caching `origin`, or `None` (the test skips) when nginx is not
    /// installed and tools are not required.
    pub fn start(name: &str, origin: SocketAddr) -> Option<NginxCache> {
        if !tools_present("nginx", cfg!(have_nginx), &[&["nginx", "-v"]]) {
            return None;
        }
        let dir = scratch(name);
        // A fresh cache each run.
        let _ = std::fs::remove_dir_all(dir.join("cache"));
        for sub in ["logs", "tmp", "cache"] {
            std::fs::create_dir_all(dir.join(sub)).expect("nginx dirs");
        }
        let _ = std::fs::remove_file(dir.join("logs/access.log"));
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 8192;\n\
             error_log {d}/logs/error.log warn;\npid {d}/logs/nginx.pid;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n\
             client_body_temp_path {d}/tmp/body;\nproxy_temp_path {d}/tmp/proxy;\n\
             fastcgi_temp_path {d}/tmp/fastcgi;\nuwsgi_temp_path {d}/tmp/uwsgi;\n\
             scgi_temp_path {d}/tmp/scgi;\n\
             log_format cdn '$upstream_cache_status $upstream_addr $status $request_uri';\n\
             access_log {d}/logs/access.log cdn;\n\
             proxy_cache_path {d}/cache levels=1:2 keys_zone=hls:16m max_size=1g \
             inactive=10m use_temp_path=off;\n\
             upstream sluice {{ server {origin}; keepalive 64; }}\n\
             server {{\n\
             listen {addr};\n\
             location / {{\n{location}}}\n\
             }}\n\
             }}\n",
            d = dir.display(),
            location = LOCATION,
        );
        let child = run(&dir, &conf, addr);
        Some(NginxCache {
            _child: child,
            addr,
            dir,
        })
    }

    /// Every request logged so far.
    pub fn log(&self) -> Vec<Logged> {
        let text = std::fs::read_to_string(self.dir.join("logs/access.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut f = line.splitn(4, ' ');
                let cache = f.next()?.to_string();
                let upstream = f.next()?;
                let status = f.next()?.parse().ok()?;
                let uri = f.next()?.to_string();
                Some(Logged {
                    cache,
                    origin: upstream != "-",
                    status,
                    uri,
                })
            })
            .collect()
    }

    /// nginx's error log (for failure messages).
    pub fn errors(&self) -> String {
        std::fs::read_to_string(self.dir.join("logs/error.log")).unwrap_or_default()
    }
}

/// The `location` of `docs/cdn.md`'s reference configuration, as the tests run it.
pub const LOCATION: &str = "
    proxy_pass http://sluice;
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    proxy_cache hls;
    # The query is part of the key: _HLS_msn, _HLS_part, _HLS_skip.
    proxy_cache_key $uri$is_args$args;
    # One request per object goes to the origin; the others wait for its answer,
    # longer than a blocking playlist request may wait there (3 target durations).
    proxy_cache_lock on;
    proxy_cache_lock_timeout 10s;
    proxy_cache_lock_age 10s;
    # An expired playlist: one request refreshes it, the others get the old one.
    proxy_cache_use_stale updating;
";
