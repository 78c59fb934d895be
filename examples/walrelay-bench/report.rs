//! Medians over the repetitions, the printed table (markdown), the target checks and the JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::measure::{median, min_max};
use crate::systems::Drain;
use crate::{Rep, Settings};

/// Median and range of one figure over the repetitions.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        let (min, max) = min_max(v.iter().copied());
        Stat { median: median(v.iter().copied()), min, max, n: v.len() }
    }

    pub(crate) fn show(&self, f: fn(f64) -> String) -> String {
        if self.n == 0 {
            "–".into()
        } else if self.n == 1 || self.min == self.max {
            f(self.median)
        } else {
            format!("{} [{}–{}]", f(self.median), f(self.min), f(self.max))
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DrainRow {
    pub system: String,
    pub runs: usize,
    pub events_per_s: Stat,
    pub ratio_to_ceiling: Stat,
    /// A table shape's drain against the plain table's, in the same repetition.
    pub ratio_to_walrelay: Stat,
    pub seconds: Stat,
    pub relay_cpu_s: Stat,
    pub relay_cpu_us_per_event: Stat,
    pub peak_rss_mb: Stat,
    pub pg_cpu_s: Stat,
    pub table_mb_before: Stat,
    pub table_mb_after: Stat,
    pub dead_tuples_after: Stat,
    pub outbox_scans: Stat,
    pub foreign_cores: Stat,
    pub delivered_ok: bool,
    pub missing: u64,
    pub duplicates: u64,
    pub malformed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    pub system: String,
    pub rate: u64,
    pub achieved_rate: Stat,
    pub p50_ms: Stat,
    pub p99_ms: Stat,
    pub p999_ms: Stat,
    pub max_ms: Stat,
    /// commit→ack from walrelay's histogram (n = 0 for other systems).
    pub ack_p50_ms: Stat,
    pub ack_p99_ms: Stat,
    pub ack_p999_ms: Stat,
    /// commit→read from walrelay's histogram (until the relay loop read the transaction).
    pub read_p50_ms: Stat,
    pub read_p99_ms: Stat,
    pub read_p999_ms: Stat,
    pub relay_cores: Stat,
    pub pg_cores: Stat,
    pub broker_cores: Stat,
    pub bench_cores: Stat,
    pub machine_cores: Stat,
    pub foreign_cores: Stat,
    pub delivered_ok: bool,
}

/// One retention figure over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionRow {
    pub what: String,
    pub rows: Stat,
    pub seconds: Stat,
    pub rows_per_s: Stat,
    pub locked_ms: Stat,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub drains: Vec<DrainRow>,
    pub latency: Vec<LatencyRow>,
    pub first_record_ms: Stat,
    pub steady_peak_rss_mb: Stat,
    pub retention: Vec<RetentionRow>,
    pub targets: Vec<Target>,
    pub all_delivered: bool,
    /// walrelay against --baseline-bin's binary.
    pub baseline: Option<crate::baseline::Comparison>,
}

pub fn log_drain(d: &Drain) {
    eprintln!(
        "[bench] {}: {:.2} s, {:.0} events/s, relay CPU {:.2} s, RSS {:?} MB, PG CPU {:.2} s, foreign {:.2} cores, delivery {:?}{}",
        d.system,
        d.seconds,
        d.events_per_s,
        d.relay_cpu_s,
        d.peak_rss_mb.map(|x| (x * 10.0).round() / 10.0),
        d.cpu.pg_cpu_s,
        d.cpu.foreign_cores,
        d.delivery.map(|x| (x.distinct, x.missing, x.duplicates, x.malformed)),
        if d.ok { "" } else { "  ** NOT OK **" }
    );
}

fn is_ceiling(system: &str) -> bool {
    system.starts_with("ceiling")
}

pub fn summarize(s: &Settings, reps: &[Rep]) -> Summary {
    // Systems in first-seen order.
    let mut order: Vec<String> = Vec::new();
    for r in reps {
        for d in &r.drains {
            if !order.contains(&d.system) {
                order.push(d.system.clone());
            }
        }
    }
    let ceiling_of =
        |r: &Rep| r.drains.iter().find(|d| is_ceiling(&d.system)).map(|d| d.events_per_s);
    // A table shape's own ceiling ("ceiling, <shape>" beside "walrelay, <shape>"), else the
    // plain table's.
    let ceiling_for = |r: &Rep, system: &str| {
        let own = system.strip_prefix("walrelay, ").map(|shape| format!("ceiling, {shape}"));
        own.and_then(|own| r.drains.iter().find(|d| d.system == own).map(|d| d.events_per_s))
            .or_else(|| ceiling_of(r))
    };
    let mut drains = Vec::new();
    let mut all_delivered = true;
    for sys in &order {
        let runs: Vec<(&Rep, &Drain)> = reps
            .iter()
            .flat_map(|r| r.drains.iter().filter(|d| &d.system == sys).map(move |d| (r, d)))
            .collect();
        let st = |f: &dyn Fn(&Rep, &Drain) -> Option<f64>| {
            Stat::of(runs.iter().filter_map(|(r, d)| f(r, d)))
        };
        let deliveries: Vec<_> = runs.iter().filter_map(|(_, d)| d.delivery).collect();
        let delivered_ok = runs.iter().all(|(_, d)| d.ok);
        all_delivered &= delivered_ok;
        drains.push(DrainRow {
            system: sys.clone(),
            runs: runs.len(),
            events_per_s: st(&|_, d| Some(d.events_per_s)),
            ratio_to_ceiling: st(&|r, d| ceiling_for(r, &d.system).map(|c| d.events_per_s / c)),
            ratio_to_walrelay: st(&|r, d| {
                let plain = r.drains.iter().find(|x| x.system == "walrelay")?;
                d.system.starts_with("walrelay, ").then(|| d.events_per_s / plain.events_per_s)
            }),
            seconds: st(&|_, d| Some(d.seconds)),
            relay_cpu_s: st(&|_, d| Some(d.relay_cpu_s)),
            relay_cpu_us_per_event: st(&|_, d| Some(d.relay_cpu_s * 1e6 / d.events as f64)),
            peak_rss_mb: st(&|_, d| d.peak_rss_mb),
            pg_cpu_s: st(&|_, d| Some(d.cpu.pg_cpu_s)),
            table_mb_before: st(&|_, d| d.table_before.map(|t| t.total_mb)),
            table_mb_after: st(&|_, d| d.table_after.map(|t| t.total_mb)),
            dead_tuples_after: st(&|_, d| d.table_after.map(|t| t.dead_tup as f64)),
            outbox_scans: st(&|_, d| match (d.table_before, d.table_after) {
                (Some(b), Some(a)) => Some((a.scans - b.scans) as f64),
                _ => None,
            }),
            foreign_cores: st(&|_, d| Some(d.cpu.foreign_cores)),
            delivered_ok,
            missing: deliveries.iter().map(|d| d.missing).sum(),
            duplicates: deliveries.iter().map(|d| d.duplicates).sum(),
            malformed: deliveries.iter().map(|d| d.malformed).sum(),
        });
    }

    let mut lat_groups: BTreeMap<(usize, String, u64), Vec<&crate::steady::Latency>> =
        BTreeMap::new();
    let mut steady_order: Vec<String> = Vec::new();
    for r in reps {
        for st in &r.steady {
            all_delivered &= st.delivery.is_some_and(|d| d.complete());
        }
        let runs = r
            .steady
            .iter()
            .map(|st| (&st.system, &st.phases))
            .chain(r.floors.iter().map(|f| (&f.system, &f.phases)));
        for (system, phases) in runs {
            if !steady_order.contains(system) {
                steady_order.push(system.clone());
            }
            let pos = steady_order.iter().position(|x| x == system).unwrap();
            for p in phases {
                lat_groups.entry((pos, system.clone(), p.target_rate)).or_default().push(p);
            }
        }
    }
    let latency: Vec<LatencyRow> = lat_groups
        .into_iter()
        .map(|((_, system, rate), ps)| {
            let st = |f: fn(&crate::steady::Latency) -> f64| Stat::of(ps.iter().map(|p| f(p)));
            let delivered_ok = reps
                .iter()
                .flat_map(|r| r.steady.iter())
                .filter(|s| s.system == system)
                .all(|s| s.delivery.is_some_and(|d| d.complete()))
                && ps.iter().all(|p| p.delivered == p.events);
            LatencyRow {
                system,
                rate,
                achieved_rate: st(|p| p.achieved_rate),
                p50_ms: st(|p| p.p50_ms),
                p99_ms: st(|p| p.p99_ms),
                p999_ms: st(|p| p.p999_ms),
                max_ms: st(|p| p.max_ms),
                ack_p50_ms: st(|p| p.ack.map_or(f64::NAN, |a| a.p50_ms)),
                ack_p99_ms: st(|p| p.ack.map_or(f64::NAN, |a| a.p99_ms)),
                ack_p999_ms: st(|p| p.ack.map_or(f64::NAN, |a| a.p999_ms)),
                read_p50_ms: st(|p| p.read.map_or(f64::NAN, |a| a.p50_ms)),
                read_p99_ms: st(|p| p.read.map_or(f64::NAN, |a| a.p99_ms)),
                read_p999_ms: st(|p| p.read.map_or(f64::NAN, |a| a.p999_ms)),
                relay_cores: st(|p| p.relay_cores),
                pg_cores: st(|p| p.pg_cores),
                broker_cores: st(|p| p.cpu.broker_cpu_s / p.cpu.wall_s),
                bench_cores: st(|p| p.cpu.bench_cpu_s / p.cpu.wall_s),
                machine_cores: st(|p| p.cpu.machine_cores),
                foreign_cores: st(|p| p.cpu.foreign_cores),
                delivered_ok,
            }
        })
        .collect();
    let wr_steady = || reps.iter().flat_map(|r| r.steady.iter()).filter(|s| s.system == "walrelay");
    let first_record_ms = Stat::of(wr_steady().filter_map(|s| s.first_record_ms));
    let steady_peak_rss_mb = Stat::of(wr_steady().filter_map(|s| s.peak_rss_mb));

    // The project's speed and memory targets.
    let mut targets = Vec::new();
    let wr = drains.iter().find(|d| d.system == "walrelay");
    let per_rep_ratio = |f: &dyn Fn(&Rep) -> Option<f64>| Stat::of(reps.iter().filter_map(f));
    let wr_eps = |r: &Rep| r.drains.iter().find(|d| d.system == "walrelay").map(|d| d.events_per_s);
    if let Some(wr) = wr {
        let ceil = per_rep_ratio(&|r| Some(wr_eps(r)? / ceiling_of(r)?));
        targets.push(Target {
            name: "drain vs ceiling".into(),
            target: "≥ 0.90 × ceiling".into(),
            measured: ceil.show(|x| format!("{x:.2}×")),
            met: (ceil.n > 0).then_some(ceil.median >= 0.90),
        });
        let best_polling = |r: &Rep| {
            r.drains
                .iter()
                .filter(|d| d.system.starts_with("polling"))
                .map(|d| d.events_per_s)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        };
        let vs_poll = per_rep_ratio(&|r| Some(wr_eps(r)? / best_polling(r)?));
        targets.push(Target {
            name: "drain vs fastest polling".into(),
            target: "≥ 1.4 × fastest polling configuration".into(),
            measured: vs_poll.show(|x| format!("{x:.2}×")),
            met: (vs_poll.n > 0).then_some(vs_poll.median >= 1.4),
        });
        targets.push(Target {
            name: "peak RSS draining".into(),
            target: format!("≤ 40 MB while draining {} events", s.events),
            measured: wr.peak_rss_mb.show(|x| format!("{x:.1} MB")),
            met: (wr.peak_rss_mb.n > 0).then_some(wr.peak_rss_mb.max <= 40.0),
        });
        targets.push(Target {
            name: "outbox reads / dead tuples".into(),
            target: "0 scans of the outbox, 0 dead tuples".into(),
            measured: format!(
                "{} scans, {} dead tuples",
                wr.outbox_scans.show(|x| format!("{x:.0}")),
                wr.dead_tuples_after.show(|x| format!("{x:.0}"))
            ),
            met: Some(wr.outbox_scans.max == 0.0 && wr.dead_tuples_after.max == 0.0),
        });
    }
    for (rate, limit) in [(2_000u64, 10.0), (20_000, 50.0)] {
        if let Some(l) = latency.iter().find(|l| l.system == "walrelay" && l.rate == rate) {
            // walrelay's own commit→ack when it was read; else the consumer's upper bound.
            let (p99, how) = if l.ack_p99_ms.n > 0 {
                (&l.ack_p99_ms, "commit→ack, walrelay's delivery reports")
            } else {
                (&l.p99_ms, "commit→consumer, an upper bound")
            };
            targets.push(Target {
                name: format!("p99 at {rate}/s"),
                target: format!("≤ {limit} ms commit→ack"),
                measured: format!("{} ({how})", p99.show(|x| format!("{x:.1} ms"))),
                met: (p99.n > 0).then_some(p99.median <= limit),
            });
        }
    }
    if first_record_ms.n > 0 {
        targets.push(Target {
            name: "first record".into(),
            target: "≤ 200 ms after process start".into(),
            measured: first_record_ms.show(|x| format!("{x:.0} ms")),
            met: Some(first_record_ms.median <= 200.0),
        });
    }
    let mut retention = Vec::new();
    for what in ["plain", "partition"] {
        let runs: Vec<&crate::retention::Purged> =
            reps.iter().flat_map(|r| r.retention.iter()).filter(|p| p.what == what).collect();
        if runs.is_empty() {
            continue;
        }
        retention.push(RetentionRow {
            what: what.into(),
            rows: Stat::of(runs.iter().map(|p| p.rows as f64)),
            seconds: Stat::of(runs.iter().map(|p| p.seconds)),
            rows_per_s: Stat::of(runs.iter().map(|p| p.rows_per_s)),
            locked_ms: Stat::of(runs.iter().filter_map(|p| p.locked_ms)),
            ok: runs.iter().all(|p| p.ok),
        });
    }
    if !retention.is_empty() {
        let ok = retention.iter().all(|r| r.ok);
        targets.push(Target {
            name: "retention".into(),
            target: "purge deletes every relayed row; the old partition is dropped".into(),
            measured: if ok { "yes".into() } else { "NO (see the retention table)".into() },
            met: Some(ok),
        });
    }
    targets.push(Target {
        name: "every event delivered".into(),
        target: "all systems, none missing".into(),
        measured: if all_delivered { "yes".into() } else { "NO (see table)".into() },
        met: Some(all_delivered),
    });
    Summary {
        drains,
        latency,
        first_record_ms,
        steady_peak_rss_mb,
        retention,
        targets,
        all_delivered,
        baseline: s.baseline.as_ref().map(|b| crate::baseline::compare(b, &s.rates, reps)),
    }
}

pub(crate) fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

pub fn render(s: &Settings, sum: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n## walrelay-bench on {}: {} events ({} rows/txn, {} aggregate ids, 4 aggregate types), {} repetition(s); median [min–max]\n",
        s.broker,
        thousands(s.events as f64),
        s.rows_per_txn,
        s.aggregates,
        s.repeat
    );
    let _ = writeln!(o, "### Drain the backlog\n");
    let _ = writeln!(
        o,
        "| system | events/s | × ceiling | drain s | relay CPU s | relay µs/event | relay peak RSS MB | PostgreSQL CPU s | outbox MB before→after | dead tuples after | outbox scans | delivered | foreign cores |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for d in &sum.drains {
        let delivered = if is_ceiling(&d.system) {
            "–".to_string()
        } else if d.delivered_ok {
            format!(
                "all{}",
                if d.duplicates > 0 { format!(", {} dup", d.duplicates) } else { String::new() }
            )
        } else {
            format!("**{} missing, {} malformed**", d.missing, d.malformed)
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            d.system,
            d.events_per_s.show(thousands),
            d.ratio_to_ceiling.show(|x| format!("{x:.2}")),
            d.seconds.show(|x| format!("{x:.2}")),
            d.relay_cpu_s.show(|x| format!("{x:.2}")),
            d.relay_cpu_us_per_event.show(|x| format!("{x:.1}")),
            d.peak_rss_mb.show(|x| format!("{x:.1}")),
            d.pg_cpu_s.show(|x| format!("{x:.2}")),
            if d.table_mb_before.n == 0 {
                "–".into()
            } else {
                format!(
                    "{:.0}→{}",
                    d.table_mb_before.median,
                    d.table_mb_after.show(|x| format!("{x:.0}"))
                )
            },
            d.dead_tuples_after.show(thousands),
            d.outbox_scans.show(thousands),
            delivered,
            d.foreign_cores.show(|x| format!("{x:.2}")),
        );
    }
    let shapes: Vec<&DrainRow> = sum.drains.iter().filter(|d| d.ratio_to_walrelay.n > 0).collect();
    if !shapes.is_empty() {
        let _ = writeln!(
            o,
            "\n### Outbox shapes: walrelay draining the same rows from other table shapes\n"
        );
        let _ = writeln!(o, "| shape | events/s | × plain table | × its ceiling | its ceiling events/s | relay µs/event | PostgreSQL CPU s | relay peak RSS MB | delivered |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
        for d in shapes {
            let ceiling = d.system.replacen("walrelay", "ceiling", 1);
            let own = sum.drains.iter().find(|c| c.system == ceiling);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                d.system.trim_start_matches("walrelay, "),
                d.events_per_s.show(thousands),
                d.ratio_to_walrelay.show(|x| format!("{x:.2}")),
                d.ratio_to_ceiling.show(|x| format!("{x:.2}")),
                own.map_or("–".into(), |c| c.events_per_s.show(thousands)),
                d.relay_cpu_us_per_event.show(|x| format!("{x:.1}")),
                d.pg_cpu_s.show(|x| format!("{x:.2}")),
                d.peak_rss_mb.show(|x| format!("{x:.1}")),
                if d.delivered_ok { "all" } else { "**NO**" },
            );
        }
    }
    if !sum.retention.is_empty() {
        let _ = writeln!(
            o,
            "\n### Retention: `walrelay purge` with walrelay streaming (its wait for the slot left out)\n"
        );
        let _ = writeln!(o, "| purge | rows | seconds | rows/s | outbox locked ms | done |");
        let _ = writeln!(o, "|---|---|---|---|---|---|");
        for r in &sum.retention {
            let what = match r.what.as_str() {
                "plain" => "plain outbox: every row walrelay relayed, deleted in 5,000-row batches",
                _ => "partitioned outbox: one old partition dropped (checked, detached, dropped)",
            };
            let _ = writeln!(
                o,
                "| {what} | {} | {} | {} | {} | {} |",
                r.rows.show(thousands),
                r.seconds.show(|x| format!("{x:.2}")),
                r.rows_per_s.show(thousands),
                r.locked_ms.show(|x| format!("{x:.1}")),
                if r.ok { "yes" } else { "**NO**" },
            );
        }
    }
    if !sum.latency.is_empty() {
        let _ = writeln!(
            o,
            "\n### Steady rate: single-row transactions, {} s per rate\n\ncommit → ack: walrelay's `walrelay_commit_to_ack_seconds` histogram (Begin message's commit time → delivery report), read after the warm-up; commit → read: its `walrelay_commit_to_read_seconds` (→ the relay loop read the transaction from the stream). commit → consumer: the writer's commit → a tailing consumer receives the record, for every system (an upper bound of commit → ack).\n",
            s.rate_seconds
        );
        let _ = writeln!(o, "| system | rate/s | achieved/s | commit→ack p50 / p99 / p99.9 ms | commit→read p50 / p99 / p99.9 ms | commit→consumer p50 ms | p99 ms | p99.9 ms | max ms | relay cores | PostgreSQL cores | broker cores | writers (bench) cores | machine busy cores | delivered | foreign cores |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let triple = |a: &Stat, b: &Stat, c: &Stat| {
            if b.n == 0 {
                return "–".to_string();
            }
            let ms = |s: &Stat| s.show(|x| format!("{x:.1}"));
            format!("{} / {} / {}", ms(a), ms(b), ms(c))
        };
        for l in &sum.latency {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                l.system,
                thousands(l.rate as f64),
                l.achieved_rate.show(thousands),
                triple(&l.ack_p50_ms, &l.ack_p99_ms, &l.ack_p999_ms),
                triple(&l.read_p50_ms, &l.read_p99_ms, &l.read_p999_ms),
                l.p50_ms.show(|x| format!("{x:.2}")),
                l.p99_ms.show(|x| format!("{x:.2}")),
                l.p999_ms.show(|x| format!("{x:.2}")),
                l.max_ms.show(|x| format!("{x:.1}")),
                l.relay_cores.show(|x| format!("{x:.2}")),
                l.pg_cores.show(|x| format!("{x:.2}")),
                l.broker_cores.show(|x| format!("{x:.2}")),
                l.bench_cores.show(|x| format!("{x:.2}")),
                l.machine_cores.show(|x| format!("{x:.2}")),
                if l.delivered_ok { "all" } else { "**NO**" },
                l.foreign_cores.show(|x| format!("{x:.2}")),
            );
        }
    }
    if sum.first_record_ms.n > 0 {
        let _ = writeln!(
            o,
            "\nwalrelay first record (process start → its /metrics counts the first acknowledged record, slot already there): {} ms; peak RSS over the steady phase: {} MB",
            sum.first_record_ms.show(|x| format!("{x:.0}")),
            sum.steady_peak_rss_mb.show(|x| format!("{x:.1}"))
        );
    }
    if let Some(c) = &sum.baseline {
        o.push_str(&crate::baseline::render(c));
    }
    let _ = writeln!(o, "\n### Targets\n");
    let _ = writeln!(o, "| target | goal | measured | met |");
    let _ = writeln!(o, "|---|---|---|---|");
    for t in &sum.targets {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**NO**",
            None => "–",
        };
        let _ = writeln!(o, "| {} | {} | {} | {} |", t.name, t.target, t.measured, met);
    }
    o
}

#[derive(Serialize)]
struct JsonOut<'a> {
    benchmark: &'static str,
    unix_time: u64,
    machine: serde_json::Value,
    settings: &'a Settings,
    summary: Summary,
    repetitions: &'a [Rep],
}

pub fn write_json(path: &Path, s: &Settings, reps: &[Rep]) {
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let git = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let out = JsonOut {
        benchmark: "walrelay-bench",
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        machine: serde_json::json!({ "cores": nproc, "loadavg": loadavg.trim(), "git_head": git }),
        settings: s,
        summary: summarize(s, reps),
        repetitions: reps,
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match serde_json::to_string_pretty(&out) {
        Ok(text) => {
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("[bench] cannot write {}: {e}", path.display());
            }
        }
        Err(e) => eprintln!("[bench] JSON: {e}"),
    }
}
