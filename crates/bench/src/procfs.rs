//! The server's CPU time and resident memory, read from `/proc/PID`.

use serde::Serialize;

/// One reading of the server process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the bench started.
    pub t_s: f64,
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Resident set size in KiB.
    pub rss_kib: u64,
}

/// Clock ticks per second of `/proc/PID/stat` times.
pub(crate) fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Reads the process now; `None` once it is gone.
pub(crate) fn sample(pid: u32, t_s: f64, ticks: f64) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Sample {
        t_s,
        cpu_s: cpu_ticks(&stat)? as f64 / ticks,
        rss_kib: rss_kib(&status)?,
    })
}

/// utime + stime from a `/proc/PID/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ")": field 3 (state) is index 0; utime is field 14, stime 15.
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

fn rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_fields() {
        let stat =
            "1234 (my (odd) srv) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 3 0 1000 0";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(
            rss_kib("Name:\tx\nVmRSS:\t   12345 kB\nThreads: 3\n"),
            Some(12345)
        );
        let me = sample(std::process::id(), 0.0, clock_ticks()).expect("own /proc");
        assert!(me.rss_kib > 0);
    }
}
