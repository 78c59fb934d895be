//! `process_*` metrics, read from `/proc/self` at scrape time: the names and units of the
//! Prometheus client libraries' process collectors, so dashboards built for those work here.
//!
//! A small reader rather than a crate: five numbers from three files do not justify `procfs`
//! (and its build time). Off Linux there is no `/proc`, and the metrics are simply absent.

/// What one scrape reads; a field is `None` when its source could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// Reads this process's numbers now.
pub fn sample() -> Sample {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| boot_time(&s));
    let mut sample =
        stat.as_deref().map(|s| from_stat(s, boot, ticks(), page_size())).unwrap_or_default();
    sample.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
    sample.max_fds = max_fds();
    sample
}

/// The fields of `/proc/self/stat` (proc(5)). The command name, in parentheses, may itself
/// contain spaces and parentheses, so fields are counted from the last `)`.
fn from_stat(stat: &str, boot_time: Option<u64>, ticks: f64, page: u64) -> Sample {
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Sample::default();
    };
    // rest starts at field 3 (state); field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let cpu = match (field(14), field(15)) {
        (Some(user), Some(system)) => Some((user + system) as f64 / ticks),
        _ => None,
    };
    Sample {
        cpu_seconds: cpu,
        start_time_seconds: field(22)
            .zip(boot_time)
            .map(|(t, boot)| boot as f64 + t as f64 / ticks),
        virtual_bytes: field(23),
        resident_bytes: field(24).map(|pages| pages * page),
        ..Sample::default()
    }
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the Unix epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the C library; it has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn page_size() -> u64 {
    // SAFETY: as above.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

/// The soft limit on open files, which is the one that makes `open` fail.
fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given, which lives for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name_even_with_spaces_in_it() {
        let stat = "4242 (wal relay) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 \
                    9 0 1000 123456789 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0";
        let s = from_stat(stat, Some(1_700_000_000), 100.0, 4096);
        assert_eq!(s.cpu_seconds, Some(3.0));
        assert_eq!(s.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(s.virtual_bytes, Some(123_456_789));
        assert_eq!(s.resident_bytes, Some(300 * 4096));
        assert_eq!(boot_time("cpu 1 2\nbtime 1700000000\nprocesses 9\n"), Some(1_700_000_000));
    }

    #[test]
    fn this_process_has_memory_cpu_open_files_and_a_start_time() {
        let s = sample();
        assert!(s.resident_bytes.unwrap() > 0, "{s:?}");
        assert!(s.open_fds.unwrap() >= 3, "{s:?}");
        assert!(s.max_fds.unwrap() >= s.open_fds.unwrap(), "{s:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let started = s.start_time_seconds.unwrap();
        assert!(
            started <= now.as_secs_f64() + 1.0 && started > now.as_secs_f64() - 86_400.0 * 30.0,
            "{s:?}"
        );
        assert!(s.cpu_seconds.unwrap() >= 0.0, "{s:?}");
    }
}
