//! `--baseline-bin PATH`: another walrelay binary (e.g. the build before a redesign) measured
//! beside the current one on the plain table, in the same repetitions, and each figure's
//! current / baseline ratio.
//!
//! The baseline drains the same backlog from a slot of its own and runs the same steady rates,
//! interleaved with the current binary (the order flips every repetition), so drift on the
//! machine hits both alike. Ratios are taken within a repetition, then their median.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::report::{thousands, Stat};
use crate::Rep;

/// The baseline binary, as the settings record it.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Its rows' system name: "walrelay (baseline 9eafde8)".
    pub system: String,
    /// The path given.
    pub bin: String,
    /// The private copy that runs (see `crate::private_copy`).
    pub copy: PathBuf,
}

impl Baseline {
    pub fn prepare(bin: &Path) -> Baseline {
        assert!(bin.is_file(), "--baseline-bin {} is missing", bin.display());
        Baseline {
            system: format!("walrelay (baseline {})", describe(bin)),
            bin: bin.display().to_string(),
            copy: crate::private_copy(bin, "baseline"),
        }
    }
}

/// The commit checked out where the binary lies (`target/release/walrelay` of a worktree), else
/// its path: what the label needs to say which code ran.
fn describe(bin: &Path) -> String {
    let dir = bin.parent().unwrap_or(Path::new("."));
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| bin.display().to_string())
}

/// One figure of both binaries and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub figure: String,
    pub current: Stat,
    pub baseline: Stat,
    /// current / baseline within each repetition that measured both.
    pub ratio: Stat,
    /// Which way is better: "higher" or "lower".
    pub better: &'static str,
    #[serde(skip)]
    show: fn(f64) -> String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub baseline: String,
    pub bin: String,
    pub figures: Vec<Figure>,
}

/// The figure `get` reads from a repetition for a system name ("walrelay" or the baseline's).
type Get<'a> = Box<dyn Fn(&Rep, &str) -> Option<f64> + 'a>;

pub fn compare(b: &Baseline, rates: &[u64], reps: &[Rep]) -> Comparison {
    let drain = |f: fn(&crate::systems::Drain) -> Option<f64>| -> Get {
        Box::new(move |r: &Rep, sys: &str| r.drains.iter().find(|d| d.system == sys).and_then(f))
    };
    let steady = |f: fn(&crate::systems::SteadyRun) -> Option<f64>| -> Get {
        Box::new(move |r: &Rep, sys: &str| r.steady.iter().find(|d| d.system == sys).and_then(f))
    };
    let phase = |rate: u64, f: fn(&crate::steady::Latency) -> Option<f64>| -> Get {
        Box::new(move |r: &Rep, sys: &str| {
            let st = r.steady.iter().find(|d| d.system == sys)?;
            st.phases.iter().find(|p| p.target_rate == rate).and_then(f)
        })
    };
    fn ms(x: f64) -> String {
        format!("{x:.2}")
    }
    fn one(x: f64) -> String {
        format!("{x:.1}")
    }
    let figure = |figure: String, better: &'static str, show: fn(f64) -> String, get: Get| {
        let of = |sys: &str| Stat::of(reps.iter().filter_map(|r| get(r, sys)));
        let ratio =
            Stat::of(reps.iter().filter_map(|r| Some(get(r, "walrelay")? / get(r, &b.system)?)));
        Figure { figure, current: of("walrelay"), baseline: of(&b.system), ratio, better, show }
    };
    let mut figures = vec![
        figure("drain events/s".into(), "higher", thousands, drain(|d| Some(d.events_per_s))),
        figure(
            "drain relay CPU µs/event".into(),
            "lower",
            one,
            drain(|d| Some(d.relay_cpu_s * 1e6 / d.events as f64)),
        ),
        figure("drain relay peak RSS MB".into(), "lower", one, drain(|d| d.peak_rss_mb)),
    ];
    for &rate in rates {
        let at = thousands(rate as f64);
        let p50 = phase(rate, |p| p.ack.map(|a| a.p50_ms));
        let p99 = phase(rate, |p| p.ack.map(|a| a.p99_ms));
        let cores = phase(rate, |p| Some(p.relay_cores));
        figures.push(figure(format!("commit→ack p50 ms at {at}/s"), "lower", ms, p50));
        figures.push(figure(format!("commit→ack p99 ms at {at}/s"), "lower", ms, p99));
        figures.push(figure(format!("relay cores at {at}/s"), "lower", ms, cores));
    }
    let (rss, first) = (steady(|s| s.peak_rss_mb), steady(|s| s.first_record_ms));
    figures.push(figure("steady relay peak RSS MB".into(), "lower", one, rss));
    figures.push(figure("first record ms".into(), "lower", one, first));
    Comparison { baseline: b.system.clone(), bin: b.bin.clone(), figures }
}

pub fn render(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n### Current / baseline: walrelay against {} on the plain table\n\nBaseline binary {}. \
         The ratio is taken within each repetition (both binaries on the same backlog and broker), \
         then its median: it can differ from the ratio of the two medians.\n",
        c.baseline, c.bin
    );
    let _ = writeln!(o, "| figure | walrelay | baseline | current / baseline | better |");
    let _ = writeln!(o, "|---|---|---|---|---|");
    for f in &c.figures {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            f.figure,
            f.current.show(f.show),
            f.baseline.show(f.show),
            f.ratio.show(|x| format!("{x:.3}")),
            f.better,
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::Drain;

    fn drain(system: &str, events_per_s: f64) -> Drain {
        Drain {
            system: system.into(),
            events: 1000,
            seconds: 1000.0 / events_per_s,
            events_per_s,
            relay_cpu_s: 0.01,
            peak_rss_mb: Some(20.0),
            cpu: Default::default(),
            table_before: None,
            table_after: None,
            delivery: None,
            polling_split: None,
            ok: true,
        }
    }

    fn rep(index: u32, drains: Vec<Drain>) -> Rep {
        Rep {
            index,
            loads: Vec::new(),
            drains,
            steady: Vec::new(),
            floors: Vec::new(),
            retention: Vec::new(),
            replays: Vec::new(),
            audits: Vec::new(),
        }
    }

    #[test]
    fn ratios_pair_the_binaries_within_each_repetition() {
        let b =
            Baseline { system: "walrelay (baseline x)".into(), bin: "x".into(), copy: "x".into() };
        let reps = [
            rep(0, vec![drain("walrelay", 100.0), drain(&b.system, 50.0)]),
            rep(1, vec![drain(&b.system, 400.0), drain("walrelay", 400.0)]),
            // The baseline's drain failed to be recorded: no ratio from this repetition.
            rep(2, vec![drain("walrelay", 1000.0)]),
        ];
        let c = compare(&b, &[2000], &reps);
        let eps = &c.figures[0];
        assert_eq!(eps.figure, "drain events/s");
        assert_eq!((eps.current.n, eps.baseline.n, eps.ratio.n), (3, 2, 2));
        // Ratios 2.0 and 1.0: their median, not 400 / 225.
        assert_eq!((eps.ratio.min, eps.ratio.median, eps.ratio.max), (1.0, 1.5, 2.0));
        let p99 = c.figures.iter().find(|f| f.figure == "commit→ack p99 ms at 2,000/s").unwrap();
        assert_eq!(p99.ratio.n, 0, "no steady phase ran");
        assert!(render(&c).contains("| drain events/s | 400 [100–1,000] | 225 [50–400] | 1.500 [1.000–2.000] | higher |"), "{}", render(&c));
    }
}
