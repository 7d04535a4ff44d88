//! What a connection's task holds for its whole life: a player's task is most of the
//! memory a player costs (RSS per player, `bench/memory.sh`), and a future is as large
//! as the largest state any of its awaits can be in. So what a connection awaits once
//! (authorization, a DESCRIBE, routing a request) is boxed, and its task is made so
//! that it holds its connection once (see `rtmp::task`).

use super::{run, Worker};
use crate::config::Config;

/// Bytes a connection's task may take. Measured (debug build): RTMP 1872, RTSP 2360,
/// HTTP 1528; before the boxing and the task's shape, the RTSP task was about 4 KB and
/// held twice (13 KB in a release build).
const BOUND: usize = 3 * 1024;

#[test]
fn each_connection_task_stays_small() {
    run(|| async {
        let worker = Worker::new(Config::default());
        for (protocol, bytes) in worker.task_sizes() {
            eprintln!("{protocol}: {bytes} bytes");
            assert!(
                bytes <= BOUND,
                "a {protocol} connection's task takes {bytes} bytes (bound {BOUND}): \
                 box what it awaits only once, and spawn its future as it is"
            );
        }
    });
}
