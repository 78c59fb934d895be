//! What `walrelay replay` costs, beside the live drain of the same rows: the library call the
//! binary makes re-publishes the first `--replay-events` retained rows of the backlog walrelay
//! just drained (by `created_at`, on an index over `(created_at, id)` as docs/operations.md
//! advises), through the same router, to topics of its own.

use std::fmt::Write;
use std::time::{Duration, Instant};

use walrelay::config::Config;
use walrelay::metrics::Metrics;
use walrelay::replay::{Options, Replay};
use walrelay::snapshot::{Selection, TimeBound};

use crate::fresh::bootstrap;
use crate::kafka::create_topics;
use crate::report::{thousands, Stat};
use crate::support::{free_port, unique, TestDb};
use crate::systems::{walrelay_config, PLAIN_OUTBOX};
use crate::Rep;

/// One replay, timed from its connection (the snapshot and the count included) to the broker's
/// last acknowledgement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Replayed {
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// The index the bench created first, and how long that took.
    pub index_seconds: f64,
    /// walrelay's drain of the same backlog from its slot, in the same repetition.
    pub live_drain_events_per_s: Option<f64>,
    pub ok: bool,
    /// The topics' prefix and the window's end, for the audit of what was sent.
    #[serde(skip)]
    pub prefix: String,
    #[serde(skip)]
    pub until: Option<String>,
}

/// Replays the first `limit` rows (by `created_at`) of `db`'s outbox.
pub async fn retained(
    db: &TestDb,
    slot: &str,
    publication: &str,
    limit: u64,
    live_drain_events_per_s: Option<f64>,
) -> Replayed {
    let client = db.connect().await;
    let started = Instant::now();
    client
        .batch_execute("CREATE INDEX IF NOT EXISTS outbox_created_id ON outbox (created_at, id); ANALYZE outbox")
        .await
        .expect("create the replay index");
    let index_seconds = started.elapsed().as_secs_f64();
    // The window's end: the created_at after the first `limit` rows (rows of one load
    // transaction share it, so the window holds whole transactions).
    let until: Option<String> = client
        .query_opt(
            "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
             FROM outbox ORDER BY created_at, id OFFSET $1 LIMIT 1",
            &[&(limit as i64)],
        )
        .await
        .expect("find the window's end")
        .map(|r| r.get(0));
    let prefix = unique("rp");
    crate::fresh::broker();
    create_topics(bootstrap(), &prefix).await;
    let text = walrelay_config(db, slot, publication, &prefix, free_port(), PLAIN_OUTBOX);
    let config = Config::parse(&text).expect("the bench's walrelay config");
    let opts = Options {
        selection: Selection {
            since: Some(TimeBound::Ago(Duration::from_secs(7 * 86_400))),
            until: until.clone().map(TimeBound::At),
            ..Selection::default()
        },
        ..Options::default()
    };
    let started = Instant::now();
    let outcome = match Replay::open(&config, opts).await {
        Ok(replay) => replay.run(Metrics::new(), &mut |_| {}).await,
        Err(e) => Err(e),
    };
    let seconds = started.elapsed().as_secs_f64();
    let (events, ok) = match outcome {
        Ok(summary) => (summary.events, true),
        Err(e) => {
            eprintln!("[bench] replay failed: {}", e.chain());
            (0, false)
        }
    };
    let r = Replayed {
        events,
        seconds,
        events_per_s: events as f64 / seconds,
        index_seconds,
        live_drain_events_per_s,
        ok,
        prefix,
        until,
    };
    eprintln!(
        "[bench] replay: {} events in {:.2} s ({:.0} events/s; live drain {:?} events/s); index built in {:.2} s",
        r.events, r.seconds, r.events_per_s, r.live_drain_events_per_s.map(f64::round), r.index_seconds
    );
    r
}

/// The replay table (medians over the repetitions), or nothing when no replay ran.
pub fn render(reps: &[Rep]) -> String {
    let runs: Vec<&Replayed> = reps.iter().flat_map(|r| r.replays.iter()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let stat = |f: fn(&Replayed) -> Option<f64>| Stat::of(runs.iter().filter_map(|r| f(r)));
    let ratio = stat(|r| Some(r.events_per_s / r.live_drain_events_per_s?));
    let mut o = String::new();
    let _ = writeln!(o, "\n### Replay: `walrelay replay` re-publishing retained rows, beside walrelay's live drain of the same rows\n");
    let _ = writeln!(o, "| events | replay events/s | live drain events/s | replay × live drain | replay seconds | index (created_at, id) built in s | done |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    let _ = writeln!(
        o,
        "| {} | {} | {} | {} | {} | {} | {} |",
        stat(|r| Some(r.events as f64)).show(thousands),
        stat(|r| Some(r.events_per_s)).show(thousands),
        stat(|r| r.live_drain_events_per_s).show(thousands),
        ratio.show(|x| format!("{x:.2}")),
        stat(|r| Some(r.seconds)).show(|x| format!("{x:.2}")),
        stat(|r| Some(r.index_seconds)).show(|x| format!("{x:.2}")),
        if runs.iter().all(|r| r.ok) { "yes" } else { "**NO**" },
    );
    o
}
