//! How late a worker's event loop runs its tasks: a probe task notes how long it waited
//! for its turn while the worker had work, the worst and how often past [`LATE`].
//!
//! Why: a worker's tasks share one thread and take turns, so one task that runs long
//! without yielding (the fan-out writing thousands of players, say) delays every other
//! connection of the worker. A task's lateness is that delay, seen from outside. The
//! figures are logged every [`REPORT`] when a wait was late, and at shutdown.
//!
//! How, without waking an idle worker: a worker that sleeps runs a woken task at once,
//! so waits only build up while it has work. The runtime's park hooks ([`Hooks`]) wake
//! the dormant probe when the worker wakes; the probe notes how long it took to get its
//! turn, then yields, and notes each pass over the worker's ready tasks until a pass
//! is shorter than [`BUSY`]; then it sleeps until the worker next wakes, or [`QUIET`]
//! at most (a worker that never sleeps is still looked at). The earlier probe woke the
//! worker every 10 ms with a timer of its own: 100 wake-ups a second, which on a 2-core
//! VM cost a minimal C fan-out server about a fifth more CPU per GB delivered
//! (docs/performance.md, 2026-11-27).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A wait this long is late: a player's write or a request waited this long too.
const LATE: Duration = Duration::from_millis(10);
/// A pass over the ready tasks shorter than this: the worker is not busy, the probe
/// waits for its next wake-up.
const BUSY: Duration = Duration::from_millis(1);
/// A park shorter than this is no sleep (see [`Hooks::unparked`]).
const SLEPT: Duration = Duration::from_micros(200);
/// The longest the probe waits for a worker that never sleeps.
const QUIET: Duration = Duration::from_millis(100);
/// How often the figures are logged, when a wait was late.
const REPORT: Duration = Duration::from_secs(10);

/// Waits noted over some time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Waits noted.
    pub ticks: u64,
    /// Waits of [`LATE`] or longer.
    pub late: u64,
    /// The longest wait.
    pub worst: Duration,
}

impl Figures {
    fn note(&mut self, lateness: Duration) {
        self.ticks += 1;
        self.late += u64::from(lateness >= LATE);
        self.worst = self.worst.max(lateness);
    }
}

/// What a worker's runtime hooks share with its probe: they run on the worker's
/// thread, but the runtime wants them `Send`.
#[derive(Debug)]
pub struct Hooks {
    /// The probe waits for the worker to wake.
    dormant: AtomicBool,
    wake: Notify,
    /// When the worker last woke the probe, in ns since `epoch`.
    woke_at: AtomicU64,
    /// When the worker last went to sleep, in ns since `epoch`.
    parked_at: AtomicU64,
    epoch: std::time::Instant,
}

impl Hooks {
    pub fn new() -> Arc<Hooks> {
        Arc::new(Hooks {
            dormant: AtomicBool::new(false),
            wake: Notify::new(),
            woke_at: AtomicU64::new(0),
            parked_at: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        })
    }

    /// Installs the hooks on the builder of a worker's runtime.
    pub fn install(self: &Arc<Self>, builder: &mut tokio::runtime::Builder) {
        let hooks = self.clone();
        builder.on_thread_park(move || hooks.parked_at.store(hooks.now(), Ordering::Relaxed));
        let hooks = self.clone();
        builder.on_thread_unpark(move || hooks.unparked());
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The worker woke: a dormant probe is woken too (one eventfd write, as the thread
    /// is awake), if the worker slept. A park that returns at once (a task woken by
    /// another, such as a yield, writes the runtime's eventfd) is no wake-up: waking
    /// the probe there would make the next park return at once, and so on.
    fn unparked(&self) {
        let now = self.now();
        let slept = now.saturating_sub(self.parked_at.load(Ordering::Relaxed));
        if slept >= SLEPT.as_nanos() as u64 && self.dormant.swap(false, Ordering::Relaxed) {
            self.woke_at.store(now, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// When the worker last woke the probe.
    fn woke_at(&self) -> Instant {
        let since = Duration::from_nanos(self.woke_at.load(Ordering::Relaxed));
        Instant::from_std(self.epoch + since)
    }
}

/// One worker's scheduling delay.
#[derive(Debug, Default)]
pub struct DelayProbe {
    /// Since the last report.
    recent: Cell<Figures>,
    /// Since the worker started.
    total: Cell<Figures>,
}

impl DelayProbe {
    /// Starts probing the current worker (a local task); `hooks` must be installed on
    /// its runtime.
    pub fn start(worker: usize, hooks: Arc<Hooks>) -> Rc<DelayProbe> {
        let probe = Rc::new(DelayProbe::default());
        tokio::task::spawn_local(probe.clone().run(worker, hooks));
        probe
    }

    async fn run(self: Rc<Self>, worker: usize, hooks: Arc<Hooks>) {
        let mut report = Instant::now() + REPORT;
        // When the probe was ready to run: it waits from then until its turn.
        let mut since = Instant::now();
        // Just woken with the worker: one pass is noted whatever the first wait.
        let mut woken = true;
        loop {
            let now = Instant::now();
            let waited = now.saturating_duration_since(since);
            self.note(waited);
            if waited >= LATE {
                tracing::debug!(worker, late_ms = waited.as_secs_f64() * 1e3, "late turn");
            }
            if now >= report {
                let recent = self.recent.take();
                if recent.late > 0 {
                    tracing::info!(
                        worker,
                        worst_ms = recent.worst.as_secs_f64() * 1e3,
                        late = recent.late,
                        ticks = recent.ticks,
                        "worker was late to run its tasks"
                    );
                }
                report = now + REPORT;
            }
            if woken || waited >= BUSY {
                // One pass over the tasks ready now.
                woken = false;
                since = Instant::now();
                tokio::task::yield_now().await;
                continue;
            }
            // Little to do: wait for the worker's next wake-up.
            let asleep = Instant::now();
            hooks.dormant.store(true, Ordering::Relaxed);
            let quiet = asleep + QUIET;
            tokio::select! {
                // A wake-up older than this wait is a permit left by an earlier one.
                () = hooks.wake.notified() => since = hooks.woke_at().max(asleep),
                () = tokio::time::sleep_until(quiet) => {
                    hooks.dormant.store(false, Ordering::Relaxed);
                    since = quiet;
                }
            }
            woken = true;
        }
    }

    fn note(&self, lateness: Duration) {
        for cell in [&self.recent, &self.total] {
            let mut f = cell.get();
            f.note(lateness);
            cell.set(f);
        }
    }

    /// The figures since the worker started.
    pub fn total(&self) -> Figures {
        self.total.get()
    }

    /// Logs the figures since the worker started (at its end).
    pub fn log_total(&self, worker: usize) {
        let total = self.total();
        tracing::info!(
            worker,
            worst_ms = total.worst.as_secs_f64() * 1e3,
            late = total.late,
            ticks = total.ticks,
            "worker scheduling delay"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's runtime with the probe's hooks, and the probe on it.
    fn on_worker(
        f: impl FnOnce(Rc<DelayProbe>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
    ) {
        let hooks = Hooks::new();
        let mut builder = tokio::runtime::Builder::new_current_thread();
        hooks.install(&mut builder);
        let rt = builder.enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async move {
            let probe = DelayProbe::start(0, hooks);
            f(probe).await;
        });
    }

    #[test]
    fn a_task_that_does_not_yield_shows_as_lateness() {
        on_worker(|probe| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                // Hold the thread, as a long flush loop would.
                std::thread::sleep(Duration::from_millis(60));
                tokio::time::sleep(Duration::from_millis(30)).await;
                let total = probe.total();
                assert!(total.ticks >= 2, "{total:?}");
                assert!(total.late >= 1, "{total:?}");
                assert!(total.worst >= Duration::from_millis(40), "{total:?}");
            })
        });
    }

    #[test]
    fn an_idle_worker_is_not_woken_by_the_probe() {
        on_worker(|probe| {
            Box::pin(async move {
                // Let the probe go dormant, then sleep: the worker wakes for this
                // timer only (and the probe's 100 ms bound, at most three times).
                tokio::time::sleep(Duration::from_millis(20)).await;
                let before = probe.total().ticks;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let noted = probe.total().ticks - before;
                // The old probe's 10 ms timer: 30 turns here.
                assert!(noted <= 15, "{noted} turns noted while idle");
            })
        });
    }
}
