//! A load test of the directory path (`sluice-bench directory`): many nodes, each
//! with its own connection, refreshing the streams they own every third of the TTL
//! and looking streams up, through the same store and scripts the server runs.
//! What one Redis does at a cluster's size is read from it, not guessed.

use super::node;
use super::redis_store::RedisStore;
use super::store::{NodeLoad, Store, StoreError};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub url: String,
    /// Keys go under this prefix (left behind lapse at the TTL).
    pub prefix: String,
    pub nodes: usize,
    /// Streams, spread evenly over the nodes.
    pub streams: usize,
    /// Lookups per second, all nodes together.
    pub lookups_per_s: u64,
    pub ttl: Duration,
    pub duration: Duration,
}

/// What it measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadReport {
    pub claims: u64,
    /// Claims per second, one node after another (each waits for its answer).
    pub claims_per_s: f64,
    pub refreshes: u64,
    /// Streams written by the refreshes (each refresh writes every stream its node owns).
    pub stream_writes: u64,
    pub lookups: u64,
    pub lookups_found: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Operations (refreshes + lookups) per second.
    pub ops_per_s: f64,
    pub refresh_p50_ms: f64,
    pub refresh_p99_ms: f64,
    pub lookup_p50_ms: f64,
    pub lookup_p99_ms: f64,
    /// The Redis server's own CPU over the run (user + system), in cores.
    pub redis_cores: f64,
}

/// What the simulated nodes' tasks count while they run.
#[derive(Debug, Default)]
struct Tally {
    report: LoadReport,
    refresh_ms: Vec<f64>,
    lookup_ms: Vec<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the simulation on the current thread (a current-thread Tokio runtime with a
/// `LocalSet`), then removes what it registered.
pub async fn run(spec: &LoadSpec) -> Result<LoadReport, StoreError> {
    let timeout = Duration::from_secs(5);
    let nodes = spec.nodes.max(1);
    let mut stores = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        stores.push(RedisStore::open(&spec.url, None, &spec.prefix, timeout)?);
    }
    let key = |i: usize| format!("live/s{i}");
    let owned: Vec<Vec<(String, bool)>> = (0..nodes)
        .map(|n| {
            (n..spec.streams)
                .step_by(nodes)
                .map(|i| (key(i), false))
                .collect()
        })
        .collect();
    let ids: Vec<String> = (0..nodes).map(|n| format!("load-{n}")).collect();
    let mut report = LoadReport::default();
    let urls = node::urls("10.0.0.1", &[("rtmp", 1935), ("http", 8080)]);
    let register = |n: usize| {
        let record = node::record(
            &ids[n],
            SystemTime::now(),
            &urls,
            NodeLoad::default(),
            false,
        );
        let (store, owned) = (stores[n].clone(), owned[n].clone());
        async move { store.refresh(&record, &owned, spec.ttl).await }
    };
    let claiming = Instant::now();
    for (n, store) in stores.iter().enumerate() {
        for (k, _) in &owned[n] {
            store.claim(&ids[n], k, false, spec.ttl).await?;
            report.claims += 1;
        }
        // Registered before the first claims lapse, however long claiming takes.
        register(n).await?;
    }
    report.claims_per_s = report.claims as f64 / claiming.elapsed().as_secs_f64();
    for n in 0..nodes {
        register(n).await?;
    }
    let cpu_before = stores[0].server_cpu().await?;
    let started = Instant::now();
    let end = started + spec.duration;
    // The counts go straight into the report; the latencies wait to be sorted.
    let tally = Rc::new(RefCell::new(Tally {
        report,
        refresh_ms: Vec::new(),
        lookup_ms: Vec::new(),
    }));
    let mut tasks = Vec::new();
    for (n, store) in stores.iter().enumerate() {
        // Refreshes: every third of the TTL, the nodes spread over it.
        let (store, owned, id, urls) = (
            store.clone(),
            owned[n].clone(),
            ids[n].clone(),
            urls.clone(),
        );
        let (tally_r, ttl) = (tally.clone(), spec.ttl);
        let offset = ttl / 3 * n as u32 / nodes as u32;
        tasks.push(tokio::task::spawn_local(async move {
            tokio::time::sleep(offset).await;
            let mut tick = tokio::time::interval(ttl / 3);
            while Instant::now() < end {
                tick.tick().await;
                let record =
                    node::record(&id, SystemTime::now(), &urls, NodeLoad::default(), false);
                let t = Instant::now();
                let ok = store.refresh(&record, &owned, ttl).await.is_ok();
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                let tally = &mut *tally_r.borrow_mut();
                if ok {
                    tally.report.refreshes += 1;
                    tally.report.stream_writes += owned.len() as u64;
                    tally.refresh_ms.push(ms);
                } else {
                    tally.report.errors += 1;
                }
            }
        }));
        // Lookups: this node's share of the rate, of random streams.
        let per_node = (spec.lookups_per_s as f64 / nodes as f64).max(0.0);
        if per_node == 0.0 {
            continue;
        }
        let store = stores[n].clone();
        let (tally_l, streams) = (tally.clone(), spec.streams.max(1));
        tasks.push(tokio::task::spawn_local(async move {
            let gap = Duration::from_secs_f64(1.0 / per_node);
            let mut next = tokio::time::Instant::now();
            while Instant::now() < end {
                next += gap;
                tokio::time::sleep_until(next).await;
                let k = format!("live/s{}", rand::random::<u32>() as usize % streams);
                let store = store.clone();
                let tally_l = tally_l.clone();
                // Lookups do not wait for each other, as a node's players do not.
                tokio::task::spawn_local(async move {
                    let t = Instant::now();
                    let found = store.owner(&k).await;
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    let tally = &mut *tally_l.borrow_mut();
                    match found {
                        Ok(f) => {
                            tally.report.lookups += 1;
                            tally.report.lookups_found += u64::from(f.is_some());
                            tally.lookup_ms.push(ms);
                        }
                        Err(_) => tally.report.errors += 1,
                    }
                });
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    // Lookups still in flight finish within the store's timeout.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seconds = started.elapsed().as_secs_f64();
    let Tally {
        mut report,
        refresh_ms: mut r,
        lookup_ms: mut l,
    } = tally.take();
    r.sort_by(f64::total_cmp);
    l.sort_by(f64::total_cmp);
    report.redis_cores = (stores[0].server_cpu().await? - cpu_before) / seconds;
    report.seconds = seconds;
    report.ops_per_s = (report.refreshes + report.lookups) as f64 / seconds;
    report.refresh_p50_ms = percentile(&r, 0.5);
    report.refresh_p99_ms = percentile(&r, 0.99);
    report.lookup_p50_ms = percentile(&l, 0.5);
    report.lookup_p99_ms = percentile(&l, 0.99);
    for (n, store) in stores.iter().enumerate() {
        let keys: Vec<String> = owned[n].iter().map(|(k, _)| k.clone()).collect();
        store.leave(&ids[n], &keys).await?;
    }
    Ok(report)
}
