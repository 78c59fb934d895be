//! The latency benchmark's table: per shape and rate, medians over the repetitions with their
//! spread.

use super::*;

/// One table: per shape and rate, medians over the repetitions with [min–max].
pub(super) fn render(args: &LatencyArgs, shapes: &[Shape], rows: &[Row]) -> String {
    let mut out = format!(
        "### walrelay-bench latency: {} repetition(s), {} s per rate; median [min–max]\n\n\
         | shape | rate/s | achieved/s | commit→ack p50 ms | commit→ack p99 ms | commit→read p99 ms | pgoutput stream alone commit→read p99 ms | commit→CreateTime p99 ms | broker alone send→ack p50 ms | broker alone p99 ms | dual write commit→ack p50 ms | dual write p99 ms | ack p99 − broker alone p99 ms | ack p99 − dual write p99 ms | missing |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        args.repeat, args.seconds
    );
    for (shape, rate, of) in by_shape_and_rate(args, shapes, rows) {
        let col = |f: &dyn Fn(&Row) -> f64| spread(of.iter().map(|r| f(r)).collect());
        out += &format!(
            "| {} | {rate} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            shape.describe(),
            col(&|r| r.achieved),
            col(&|r| r.ack.map_or(f64::NAN, |q| q.p50_ms)),
            col(&|r| r.ack.map_or(f64::NAN, |q| q.p99_ms)),
            col(&|r| r.read.map_or(f64::NAN, |q| q.p99_ms)),
            col(&|r| r.wal_read.p99_ms),
            col(&|r| r.create_time.p99_ms),
            col(&|r| r.floor.p50_ms),
            col(&|r| r.floor.p99_ms),
            col(&|r| r.dual_write.p50_ms),
            col(&|r| r.dual_write.p99_ms),
            col(&|r| r.ack.map_or(f64::NAN, |q| q.p99_ms) - r.floor.p99_ms),
            col(&|r| r.ack.map_or(f64::NAN, |q| q.p99_ms) - r.dual_write.p99_ms),
            of.iter().map(|r| r.missing).sum::<u64>(),
        );
    }
    out += "\nCPU while the writers ran, cores (median [min–max]; the machine has 2). PostgreSQL counts \
            every backend, and the walsender in walrelay's run; \"benchmark\" is the writers' client \
            side and, in the dual write, its producer. The pgoutput stream alone is the same writers with \
            a bare reader, no Kafka: its PostgreSQL figure less the dual write's is the walsender's.\n\n\
            | shape | rate/s | dual write: PostgreSQL | broker | benchmark | machine | pgoutput stream alone: PostgreSQL | machine | walrelay's run: PostgreSQL | broker | walrelay | benchmark | machine |\n\
            |---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (shape, rate, of) in by_shape_and_rate(args, shapes, rows) {
        let cores = |f: &dyn Fn(&Row) -> (f64, f64)| {
            spread_to(of.iter().map(|r| f(r)).map(|(s, wall)| s / wall).collect(), 2)
        };
        out += &format!(
            "| {} | {rate} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            shape.describe(),
            cores(&|r| (r.dual_write_cpu.pg_cpu_s, r.dual_write_cpu.wall_s)),
            cores(&|r| (r.dual_write_cpu.broker_cpu_s, r.dual_write_cpu.wall_s)),
            cores(&|r| (r.dual_write_cpu.bench_cpu_s, r.dual_write_cpu.wall_s)),
            cores(&|r| (r.dual_write_cpu.machine_cores, 1.0)),
            cores(&|r| (r.wal_read_cpu.pg_cpu_s, r.wal_read_cpu.wall_s)),
            cores(&|r| (r.wal_read_cpu.machine_cores, 1.0)),
            cores(&|r| (r.cpu.pg_cpu_s, r.cpu.wall_s)),
            cores(&|r| (r.cpu.broker_cpu_s, r.cpu.wall_s)),
            cores(&|r| (r.cpu.relay_cpu_s, r.cpu.wall_s)),
            cores(&|r| (r.cpu.bench_cpu_s, r.cpu.wall_s)),
            cores(&|r| (r.cpu.machine_cores, 1.0)),
        );
    }
    let together: Vec<_> = by_shape_and_rate(args, shapes, rows)
        .into_iter()
        .map(|(shape, rate, of)| {
            (shape, rate, of.iter().filter_map(|r| r.beside.clone()).collect::<Vec<_>>())
        })
        .filter(|(_, _, of)| !of.is_empty())
        .collect();
    if together.is_empty() {
        return out;
    }
    out += "\nwalrelay and the dual write together (`--together N`): the same writers into walrelay's \
            database, each also producing every Nth event's record itself when its commit returns, \
            under the same load (walsender, walrelay, broker) at the same time. ms, median [min–max].\n\n\
            | shape | rate/s | N | walrelay commit→ack p50 | walrelay p99 | dual write p50 | dual write p99 | walrelay p99 − dual write p99 | machine cores |\n\
            |---|---|---|---|---|---|---|---|---|\n";
    for (shape, rate, of) in together {
        let col = |f: &dyn Fn(&Beside) -> f64| spread(of.iter().map(f).collect());
        out += &format!(
            "| {} | {rate} | {} | {} | {} | {} | {} | {} | {} |\n",
            shape.describe(),
            of[0].sample,
            col(&|b| b.ack.map_or(f64::NAN, |q| q.p50_ms)),
            col(&|b| b.ack.map_or(f64::NAN, |q| q.p99_ms)),
            col(&|b| b.dual_write.p50_ms),
            col(&|b| b.dual_write.p99_ms),
            col(&|b| b.ack.map_or(f64::NAN, |q| q.p99_ms) - b.dual_write.p99_ms),
            spread_to(of.iter().map(|b| b.cpu.machine_cores).collect(), 2),
        );
    }
    out
}

/// The repetitions of each shape at each rate, in the order asked for; pairs never measured are
/// left out.
fn by_shape_and_rate<'a>(
    args: &LatencyArgs,
    shapes: &[Shape],
    rows: &'a [Row],
) -> Vec<(Shape, u64, Vec<&'a Row>)> {
    let mut groups = Vec::new();
    for &shape in shapes {
        for &rate in &args.rates {
            let of: Vec<&Row> =
                rows.iter().filter(|r| r.shape == shape && r.rate == rate).collect();
            if !of.is_empty() {
                groups.push((shape, rate, of));
            }
        }
    }
    groups
}

/// "median [min–max]" (just the value for one repetition), ms to one decimal.
fn spread(v: Vec<f64>) -> String {
    spread_to(v, 1)
}

/// [`spread`] with `decimals` below 100.
fn spread_to(mut v: Vec<f64>, decimals: usize) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let fmt = |x: f64| {
        if x.abs() >= 100.0 {
            format!("{x:.0}")
        } else {
            format!("{x:.decimals$}")
        }
    };
    match v.len() {
        0 => "–".into(),
        1 => fmt(v[0]),
        n => format!("{} [{}–{}]", fmt(v[n / 2]), fmt(v[0]), fmt(v[n - 1])),
    }
}
