//! Relay connections in the driver, on the harness: a pull's RTMP client session is
//! a connection of the worker, and its own start timeout, on the driver's timer, ends
//! it when the origin never answers.

use super::Worker;
use crate::config::Config;
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// The pull's connect timeout: long, so that only a clock that jumps gets there.
const CONNECT: Duration = Duration::from_secs(120);

#[test]
fn a_pull_from_an_origin_that_never_answers_the_handshake_times_out_on_the_driver_clock() {
    // The clock runs until the pull has connected (a real TCP connect), then pauses.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tokio::task::LocalSet::new().block_on(&runtime, async {
        // An origin that takes the connection and never says a word.
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = origin.local_addr().unwrap().port();
        let mut config = Config::default();
        config.edge.origins = vec![format!("rtmp://127.0.0.1:{port}")];
        config.edge.connect_timeout_ms = CONNECT.as_millis() as u64;
        config.edge.max_failures = 1;
        // Unwatched, it would stop for that first.
        config.edge.idle_ms = 4 * CONNECT.as_millis() as u64;
        let worker = Worker::new(config);
        let relays = worker.ctx.relays().unwrap().clone();
        let clients = worker.ctx.clients().clone();
        assert!(relays.ensure("live/cam"));
        let (_silent, _) = timeout(Duration::from_secs(10), origin.accept())
            .await
            .expect("the pull connects")
            .unwrap();
        // The pull's session is one of the worker's connections, as the API lists them.
        let pulls = || {
            clients
                .snapshot(0)
                .iter()
                .filter(|c| c.protocol == "rtmp-pull")
                .count()
        };
        timeout(Duration::from_secs(10), async {
            while pulls() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the pull's connection is registered");
        tokio::time::pause();
        let paused = Instant::now();
        timeout(CONNECT * 2, async {
            while relays.pull_of("live/cam").is_some() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the pull gives up");
        // Its own start timeout ended it, on the virtual clock, not a read that failed.
        let waited = paused.elapsed();
        let near = CONNECT - Duration::from_secs(10)..CONNECT + Duration::from_secs(1);
        assert!(near.contains(&waited), "{waited:?}");
        assert_eq!(pulls(), 0);
        assert!(
            clients
                .ended()
                .contains(&(("rtmp-pull", "handshake_timeout"), 1)),
            "{:?}",
            clients.ended()
        );
    });
}
