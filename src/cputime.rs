//! CPU time of the calling thread, for benchmark figures that stay
//! meaningful on a busy machine (wall time there includes waiting for a
//! core).

use std::time::Duration;

/// CPU time consumed so far by the calling thread (zero if the clock is
/// unavailable).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant the kernel always supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Resource usage of the calling thread so far: CPU time in user and in
/// kernel mode, and minor page faults.  On a VM the kernel share of a
/// memory-hungry benchmark is mostly zeroing freshly faulted pages, whose
/// cost depends on the host; benchmarks print it separately.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in kernel mode.
    pub system: Duration,
    /// Minor page faults.
    pub minor_faults: u64,
}

impl ThreadUsage {
    /// Usage accumulated since `earlier`.
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }

    /// Adds `other` to this usage.
    pub fn add(&mut self, other: &ThreadUsage) {
        self.user += other.user;
        self.system += other.system;
        self.minor_faults += other.minor_faults;
    }
}

/// This thread's [`ThreadUsage`] (all zero if unavailable).
pub fn thread_usage() -> ThreadUsage {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_THREAD is supported
    // by every Linux this runs on.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return ThreadUsage::default();
    }
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0).saturating_mul(1000),
        )
    };
    ThreadUsage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        minor_faults: u64::try_from(ru.ru_minflt).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thread_usage_counts_faults_of_fresh_memory() {
        let before = super::thread_usage();
        // 64 MiB touched page by page: every page is a fresh fault.
        let mut v = vec![0u8; 64 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        let used = super::thread_usage().since(&before);
        assert!(used.minor_faults > 0, "{used:?}");
        assert!(
            used.user + used.system > std::time::Duration::ZERO,
            "{used:?}"
        );
    }

    #[test]
    fn cpu_time_advances_with_work() {
        let before = super::thread_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(super::thread_cpu_time() > before);
    }
}
