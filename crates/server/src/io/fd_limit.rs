//! The process's descriptor limit. Every connection is a descriptor, and the soft
//! limit a server inherits is often 1024 (systemd's default, a login shell's) while
//! the hard limit allows hundreds of thousands: past the soft one `accept` fails with
//! EMFILE and new viewers wait in the backlog until they time out. So the server raises
//! its soft limit to the hard one at start, as nginx (`worker_rlimit_nofile`) and Go's
//! runtime do, and says what it got.

use std::io;

/// The soft and hard limits on open descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    pub soft: u64,
    pub hard: u64,
}

/// The limits in force.
pub fn current() -> io::Result<FdLimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FdLimit {
        soft: r.rlim_cur,
        hard: r.rlim_max,
    })
}

/// Raises the soft limit to the hard one; returns the limits before and after.
pub fn raise() -> io::Result<(FdLimit, FdLimit)> {
    let before = current()?;
    if before.soft >= before.hard {
        return Ok((before, before));
    }
    let r = libc::rlimit {
        rlim_cur: before.hard,
        rlim_max: before.hard,
    };
    // SAFETY: `r` is a valid rlimit, only read by the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((before, current()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_one() {
        let start = current().unwrap();
        // A soft limit below the hard one, as under systemd, so that the raise has work;
        // half the hard one stays far above what the tests beside this one open.
        let low = if start.soft < start.hard {
            start.soft
        } else {
            start.hard / 2
        };
        let r = libc::rlimit {
            rlim_cur: low,
            rlim_max: start.hard,
        };
        // SAFETY: a valid rlimit, only read by the call.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
        let (before, after) = raise().unwrap();
        assert_eq!(before.soft, low);
        assert_eq!(after.soft, start.hard);
        assert_eq!(after.hard, start.hard);
        assert_eq!(current().unwrap(), after);
    }
}
