//! Relay connections in the driver, on the harness: a pull's client session is a
//! connection of the worker, and its own timeouts, on the driver's timer, end it: an
//! RTMP origin that never answers the handshake at the session's start timeout, an
//! HTTP-FLV origin that goes silent after its answer at the silence timeout.

use super::Worker;
use crate::config::Config;
use crate::ops::Clients;
use crate::relay::client::SILENCE;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};

/// The pull's connect timeout: long, so that only a clock that jumps gets there.
const CONNECT: Duration = Duration::from_secs(120);
/// A real wait (before the clock pauses) that should take milliseconds.
const REAL: Duration = Duration::from_secs(10);

/// Runs `body` on a worker's runtime whose clock runs until the test pauses it (a
/// pull's TCP connect is real).
fn run<F: std::future::Future<Output = ()>>(body: impl FnOnce() -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tokio::task::LocalSet::new().block_on(&runtime, body());
}

/// A worker that pulls `live/cam` from `origin`, giving up after one failure, and the
/// origin's end of the pull's connection.
async fn pulling(origin: &str, listener: &TcpListener) -> (Worker, TcpStream) {
    let mut config = Config::default();
    config.edge.origins = vec![origin.to_string()];
    config.edge.connect_timeout_ms = CONNECT.as_millis() as u64;
    config.edge.max_failures = 1;
    // Unwatched, it would stop for that first.
    config.edge.idle_ms = 4 * CONNECT.as_millis() as u64;
    let worker = Worker::new(config);
    assert!(worker.ctx.relays().unwrap().ensure("live/cam"));
    let (conn, _) = timeout(REAL, listener.accept())
        .await
        .expect("the pull connects")
        .unwrap();
    (worker, conn)
}

/// Until the worker's `protocol` client has read `bytes` (it is registered then).
async fn registered(clients: &Rc<Clients>, protocol: &str, bytes: u64) {
    let read = || {
        clients
            .snapshot(0)
            .iter()
            .any(|c| c.protocol == protocol && c.bytes_in >= bytes)
    };
    timeout(REAL, async {
        while !read() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the pull's connection is registered");
}

/// Pauses the clock and waits for the pull to give up: how long that took, virtually.
async fn paused_until_given_up(worker: &Worker) -> Duration {
    tokio::time::pause();
    let paused = Instant::now();
    let relays = worker.ctx.relays().unwrap();
    timeout(CONNECT * 2, async {
        while relays.pull_of("live/cam").is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the pull gives up");
    paused.elapsed()
}

#[test]
fn a_pull_from_an_origin_that_never_answers_the_handshake_times_out_on_the_driver_clock() {
    run(|| async {
        let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = origin.local_addr().unwrap().port();
        let (worker, _silent) = pulling(&format!("rtmp://127.0.0.1:{port}"), &origin).await;
        let clients = worker.ctx.clients().clone();
        registered(&clients, "rtmp-pull", 0).await;
        let waited = paused_until_given_up(&worker).await;
        // Its own start timeout ended it, on the virtual clock, not a read that failed.
        let near = CONNECT - REAL..CONNECT + Duration::from_secs(1);
        assert!(near.contains(&waited), "{waited:?}");
        assert!(
            clients
                .ended()
                .contains(&(("rtmp-pull", "handshake_timeout"), 1)),
            "{:?}",
            clients.ended()
        );
    });
}

#[test]
fn a_pull_from_an_http_flv_origin_that_goes_silent_after_its_answer_ends_at_the_silence() {
    run(|| async {
        let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = origin.local_addr().unwrap().port();
        let (worker, mut conn) = pulling(&format!("http://127.0.0.1:{port}"), &origin).await;
        let mut request = vec![0; 1024];
        let n = timeout(REAL, conn.read(&mut request))
            .await
            .unwrap()
            .unwrap();
        assert!(request[..n].starts_with(b"GET /live/cam.flv HTTP/1.1\r\n"));
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: video/x-flv\r\n\r\n";
        conn.write_all(head).await.unwrap();
        let clients = worker.ctx.clients().clone();
        registered(&clients, "flv-pull", head.len() as u64).await;
        let waited = paused_until_given_up(&worker).await;
        // The session's silence bound, counted from the answer, ended it.
        assert!(waited <= SILENCE + Duration::from_secs(1), "{waited:?}");
        assert!(
            clients.ended().contains(&(("flv-pull", "idle"), 1)),
            "{:?}",
            clients.ended()
        );
    });
}
