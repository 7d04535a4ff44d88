//! How late a worker's event loop runs its tasks: a probe task asks to wake every
//! [`TICK`] and notes how late it woke, the worst and how often past [`LATE`].
//!
//! Why: a worker's tasks share one thread and take turns, so one task that runs long
//! without yielding (the fan-out writing thousands of players, say) delays every other
//! connection of the worker. A task's lateness is that delay, seen from outside. The
//! figures are logged every [`REPORT`] when a tick was late, and at shutdown.
//!
//! The probe costs one timer wake-up per tick and worker.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the probe asks to wake: a worker delayed less than this can be missed.
const TICK: Duration = Duration::from_millis(10);
/// A wake-up this late is late: a player's write or a request waited this long too.
const LATE: Duration = Duration::from_millis(10);
/// How often the figures are logged, when a tick was late.
const REPORT: Duration = Duration::from_secs(10);

/// Wake-ups counted over some time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub ticks: u64,
    /// Ticks later than [`LATE`].
    pub late: u64,
    /// The latest wake-up.
    pub worst: Duration,
}

impl Figures {
    fn note(&mut self, lateness: Duration) {
        self.ticks += 1;
        self.late += u64::from(lateness >= LATE);
        self.worst = self.worst.max(lateness);
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
    /// Starts probing the current worker (a local task).
    pub fn start(worker: usize) -> Rc<DelayProbe> {
        let probe = Rc::new(DelayProbe::default());
        tokio::task::spawn_local(probe.clone().run(worker));
        probe
    }

    async fn run(self: Rc<Self>, worker: usize) {
        let mut report = Instant::now() + REPORT;
        loop {
            let due = Instant::now() + TICK;
            tokio::time::sleep_until(due).await;
            let now = Instant::now();
            let lateness = now.saturating_duration_since(due);
            self.note(lateness);
            if lateness >= LATE {
                tracing::debug!(worker, late_ms = lateness.as_secs_f64() * 1e3, "late tick");
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

    #[test]
    fn a_task_that_does_not_yield_shows_as_lateness() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let probe = DelayProbe::start(0);
            tokio::time::sleep(TICK * 3).await;
            // Hold the thread, as a long flush loop would.
            std::thread::sleep(Duration::from_millis(60));
            tokio::time::sleep(TICK * 3).await;
            let total = probe.total();
            assert!(total.ticks >= 2, "{total:?}");
            assert!(total.late >= 1, "{total:?}");
            assert!(total.worst >= Duration::from_millis(40), "{total:?}");
        });
    }
}
