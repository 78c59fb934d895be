//! What the benchmark measures outside the systems themselves: CPU and memory from /proc, the
//! clock, percentiles and medians.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

/// Microseconds since the benchmark started (one monotonic clock for every thread).
pub fn now_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Fields of /proc/PID/stat after the command name: index 0 = state (field 3).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rsplit_once(") ")?.1;
    Some(rest.split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect())
}

/// (ppid, utime+stime, cutime+cstime) in seconds.
fn cpu_of(pid: u32) -> Option<(u32, f64, f64)> {
    // After "state": ppid(4) pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    // utime(14) stime(15) cutime(16) cstime(17); index = field - 4.
    let f = stat_fields(pid)?;
    let t = clk_tck();
    Some((f[0] as u32, (f[10] + f[11]) as f64 / t, (f[12] + f[13]) as f64 / t))
}

/// CPU seconds (user + system) a process has used so far.
pub fn proc_cpu(pid: u32) -> Option<f64> {
    cpu_of(pid).map(|(_, own, _)| own)
}

/// CPU seconds of a process plus its reaped children.
pub fn proc_cpu_with_children(pid: u32) -> Option<f64> {
    cpu_of(pid).map(|(_, own, children)| own + children)
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Peak resident set size (VmHWM) in MB.
pub fn peak_rss_mb(pid: u32) -> Option<f64> {
    status_kb(pid, "VmHWM:").map(|kb| kb as f64 / 1024.0)
}

/// CPU seconds used by the whole PostgreSQL instance: the postmaster, every live child, and the
/// children it has reaped (cutime/cstime), so backends that exit mid-run are still counted.
pub struct PgCpu {
    postmaster: u32,
}

impl PgCpu {
    pub fn new(data_dir: &Path) -> PgCpu {
        let pid = std::fs::read_to_string(data_dir.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
            .expect("postmaster.pid");
        PgCpu { postmaster: pid }
    }

    pub fn total(&self) -> f64 {
        let (_, own, reaped) = cpu_of(self.postmaster).unwrap_or((0, 0.0, 0.0));
        let mut sum = own + reaped;
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for e in entries.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if let Some((ppid, own, _)) = cpu_of(pid) {
                    if ppid == self.postmaster {
                        sum += own;
                    }
                }
            }
        }
        sum
    }
}

/// Busy CPU seconds of the whole machine (all cores) from /proc/stat.
pub fn machine_busy() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().next() else { return 0.0 };
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().unwrap_or(0)).collect();
    // user nice system idle iowait irq softirq steal
    let busy = v.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, x)| *x);
    busy.sum::<u64>() as f64 / clk_tck()
}

/// A point in time with the CPU counters a run is judged by.
#[derive(Clone, Copy)]
pub struct Snap {
    pub at: Instant,
    pub pg: f64,
    pub broker: f64,
    pub bench: f64,
    pub machine: f64,
    pub relay: f64,
}

/// CPU spent between two snapshots.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CpuDelta {
    pub wall_s: f64,
    pub pg_cpu_s: f64,
    pub broker_cpu_s: f64,
    pub relay_cpu_s: f64,
    /// This benchmark's own process: the steady phase's writers' client side, consumers.
    pub bench_cpu_s: f64,
    /// Busy CPU of the whole machine (cores, averaged over the run; 2.0 = saturated here).
    pub machine_cores: f64,
    /// Busy CPU of the machine not used by PostgreSQL, the broker, the relay or this
    /// benchmark: other people's work sharing the machine (cores, averaged over the run).
    pub foreign_cores: f64,
}

pub struct Meter {
    pub pg: PgCpu,
}

impl Meter {
    /// `relay`: the pid of a relay process that is not a child of the benchmark (None: 0).
    pub fn snap(&self, relay: Option<u32>) -> Snap {
        Snap {
            at: Instant::now(),
            pg: self.pg.total(),
            broker: proc_cpu(crate::fresh::pid()).unwrap_or(0.0),
            bench: proc_cpu_with_children(std::process::id()).unwrap_or(0.0),
            machine: machine_busy(),
            relay: relay.and_then(proc_cpu).unwrap_or(0.0),
        }
    }
}

pub fn delta(a: &Snap, b: &Snap) -> CpuDelta {
    let wall = b.at.duration_since(a.at).as_secs_f64();
    let (pg, broker, bench, relay) =
        (b.pg - a.pg, b.broker - a.broker, b.bench - a.bench, b.relay - a.relay);
    let foreign = (b.machine - a.machine) - pg - broker - bench - relay;
    CpuDelta {
        wall_s: wall,
        pg_cpu_s: pg,
        broker_cpu_s: broker,
        relay_cpu_s: relay,
        bench_cpu_s: bench,
        machine_cores: if wall > 0.0 { (b.machine - a.machine) / wall } else { 0.0 },
        foreign_cores: if wall > 0.0 { (foreign / wall).max(0.0) } else { 0.0 },
    }
}

/// The `p`-th percentile (0..=100) of sorted values, nearest-rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median of the finite values (NaN when there are none).
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn min_max(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .filter(|x| x.is_finite())
        .fold((f64::NAN, f64::NAN), |(lo, hi), x| (lo.min(x).min(x), hi.max(x).max(x)))
}
