//! What retention costs, on the same machine in the same invocation: `walrelay purge` (the
//! library call the binary makes) deleting the backlog walrelay just drained from a plain outbox,
//! 5,000 rows a batch, and dropping one old partition of a partitioned outbox holding as many
//! rows. walrelay runs meanwhile, as in production: a purge waits for the slot to confirm the
//! WAL position it starts from, and an idle relay confirms it from the next keepalive.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use walrelay::config::Config;
use walrelay::retention::{self, Options, Outcome};

use crate::kafka::create_topics;
use crate::support::{free_port, services, unique, TestDb};
use crate::systems::{keep_log, start_walrelay, walrelay_config, PLAIN_OUTBOX};
use crate::workload;

/// One purge, measured from its connection to its report, less its wait for the slot.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Purged {
    /// `plain` (rows deleted in batches) or `partition` (one partition dropped).
    pub what: String,
    pub rows: u64,
    pub seconds: f64,
    pub rows_per_s: f64,
    /// Partition drops: how long the outbox was locked (DETACH to COMMIT).
    pub locked_ms: Option<f64>,
    pub ok: bool,
}

/// Purges every row of `db`'s outbox that walrelay relayed (all of them: the cut-off is now),
/// with walrelay streaming from `slot`.
pub async fn plain(db: &TestDb, slot: &str, publication: &str) -> Purged {
    let before = count(db, "outbox").await;
    let (report, seconds) = with_walrelay(db, slot, publication, Duration::ZERO).await;
    let rows = report.as_ref().map_or(0, |r| r.rows());
    let ok = report.is_some() && rows == before;
    if !ok {
        eprintln!("[bench] purge deleted {rows} of {before} rows");
    }
    Purged {
        what: "plain".into(),
        rows,
        seconds,
        rows_per_s: rows as f64 / seconds,
        locked_ms: None,
        ok,
    }
}

/// A partitioned outbox with `n` rows in a partition older than a day and none in the current
/// one; the purge drops the old one.
pub async fn partition(n: u64, aggregates: u32) -> Purged {
    let db = services().pg.create_database("bench_part").await;
    let (publication, slot) = (unique("part_pub"), unique("part_slot"));
    db.execute(&format!(
        "CREATE TABLE outbox (id uuid NOT NULL, aggregatetype varchar(255) NOT NULL, \
           aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, \
           created_at timestamptz NOT NULL DEFAULT now()) PARTITION BY RANGE (created_at);
         DO $$ BEGIN
           EXECUTE format('CREATE TABLE outbox_old PARTITION OF outbox FOR VALUES FROM (MINVALUE) TO (%L)', now() - interval '1 day');
           EXECUTE format('CREATE TABLE outbox_current PARTITION OF outbox FOR VALUES FROM (%L) TO (MAXVALUE)', now() - interval '1 day');
         END $$;
         INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at)
           SELECT {}, now() - interval '2 days' FROM generate_series(1, {n}::bigint) g;
         CREATE PUBLICATION \"{publication}\" FOR TABLE outbox WITH (publish = 'insert', publish_via_partition_root = true);",
        workload::row_sql("g", workload::BACKLOG_GROUP, aggregates)
    ))
    .await;
    // VACUUM can't run in the batch above (one implicit transaction).
    db.execute("VACUUM ANALYZE outbox").await;
    // Created after the load: the rows predate it, so there is nothing to relay, and an idle
    // walrelay confirms the current position from the first keepalive.
    db.connect()
        .await
        .query_one("SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot])
        .await
        .expect("create slot");
    let (report, seconds) =
        with_walrelay(&db, &slot, &publication, Duration::from_secs(86_400)).await;
    workload::drop_db(&db).await;
    let dropped = report.as_ref().and_then(|r| r.tables.first()).and_then(|t| t.dropped.first());
    let rows = dropped.map_or(0, |d| d.rows);
    Purged {
        what: "partition".into(),
        rows,
        seconds,
        rows_per_s: rows as f64 / seconds,
        locked_ms: dropped.and_then(|d| d.locked).map(|l| l.as_secs_f64() * 1e3),
        ok: rows == n,
    }
}

/// Starts walrelay on `slot`, purges rows older than `older_than` once it streams, stops it.
async fn with_walrelay(
    db: &TestDb,
    slot: &str,
    publication: &str,
    older_than: Duration,
) -> (Option<retention::Report>, f64) {
    crate::fresh::broker();
    let prefix = unique("purge");
    create_topics(crate::fresh::bootstrap(), &prefix).await;
    let text = walrelay_config(db, slot, publication, &prefix, free_port(), PLAIN_OUTBOX);
    let config = Config::parse(&text).expect("walrelay config");
    let mut relay = start_walrelay(&text);
    let watch = db.connect().await;
    let streaming = Instant::now();
    while streaming.elapsed() < Duration::from_secs(60) {
        let active = watch
            .query_opt("SELECT active FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
            .await
            .ok()
            .flatten()
            .is_some_and(|r| r.get::<_, bool>(0));
        if active {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opts = Options {
        older_than,
        column: "created_at".into(),
        dry_run: false,
        confirm_wait: Duration::from_secs(120),
        before_join: false,
    };
    let (_keep, stop) = watch::channel(false);
    let outcome = retention::purge(&config, &opts, &stop).await;
    relay.terminate();
    keep_log(&format!("{prefix}-purge"), &relay.log());
    match outcome {
        // The purge's own work: without the wait for walrelay to relay what the earlier
        // phases wrote and confirm the position the purge started from.
        Ok(Outcome::Purged(report)) => {
            eprint!("[bench] {}", report.render());
            let seconds = (report.elapsed - report.waited).as_secs_f64();
            (Some(report), seconds)
        }
        other => {
            eprintln!("[bench] purge did not go through: {other:?}");
            (None, f64::NAN)
        }
    }
}

async fn count(db: &TestDb, table: &str) -> u64 {
    let c = db.connect().await;
    let n: i64 = c.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.unwrap().get(0);
    n as u64
}
