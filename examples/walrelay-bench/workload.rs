//! The rows: one outbox table that suits every system (Debezium's columns plus the `seq` and
//! `published_at` a polling relay needs, and its partial index), the backlog load, and the
//! single-row transactions of the steady phase.
//!
//! Event ids encode their number, `GGGGGGGG-0000-4000-8000-NNNNNNNNNNNN` (hex), so a consumer can
//! tell which events arrived without keeping the rows: group 0 is the backlog, group 1 the
//! steady phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};
use walrelay::lsn::Lsn;

use crate::measure::now_us;
use crate::support::{services, TestDb};

pub const AGGREGATE_TYPES: [&str; 4] = ["Order", "Customer", "Shipment", "Payment"];
pub const BACKLOG_GROUP: u32 = 0;
pub const STEADY_GROUP: u32 = 1;
/// Ids of the pgoutput-alone latency floor (same table as walrelay's steady phase).
pub const FLOOR_GROUP: u32 = 2;
/// The steady phase of --baseline-bin's binary: same table as walrelay's, ids of its own.
pub const BASELINE_STEADY_GROUP: u32 = 3;

/// The row for event `g` (a bigint expression), as a SELECT list; `group` picks the id range.
pub fn row_sql(g: &str, group: u32, aggregates: u32) -> String {
    row_exprs(g, group, aggregates).join(", ")
}

/// The row's column expressions: id, aggregatetype, aggregateid, type, payload (jsonb).
fn row_exprs(g: &str, group: u32, aggregates: u32) -> [String; 5] {
    [
        format!("(lpad(to_hex({group}), 8, '0') || '-0000-4000-8000-' || lpad(to_hex({g}), 12, '0'))::uuid"),
        format!("(ARRAY['Order','Customer','Shipment','Payment'])[1 + {g} % 4]"),
        format!("'agg-' || lpad(({g} % {aggregates})::text, 5, '0')"),
        "'EventHappened'".to_string(),
        format!(
            "format('{{\"orderId\": %s, \"customerId\": \"customer-%s\", \"amount\": %s, \"currency\": \"EUR\", \"items\": [{{\"sku\": \"SKU-%s\", \"qty\": %s, \"price\": 19.99}}, \
{{\"sku\": \"SKU-%s\", \"qty\": 1, \"price\": 4.5}}], \"shippingAddress\": {{\"street\": \"%s Main Street\", \
\"city\": \"Berlin\", \"zip\": \"%s\", \"country\": \"DE\"}}}}', \
         {g}, lpad(({g} % {aggregates})::text, 5, '0'), round(({g} % 100000) / 100.0, 2), lpad(({g} % 997)::text, 5, '0'), \
         1 + {g} % 5, lpad(({g} % 991)::text, 5, '0'), {g} % 1000, 10000 + {g} % 90000)::jsonb"
        ),
    ]
}

/// The single-row INSERT of event `$1` with every row of one aggregate type (so one topic).
pub fn insert_one_type_sql(group: u32, aggregates: u32, aggregate_type: &str) -> String {
    let [id, _, aggregate_id, event_type, payload] = row_exprs("g", group, aggregates);
    format!(
        "INSERT INTO outbox ({COLUMNS}) SELECT {id}, '{aggregate_type}', {aggregate_id}, \
         {event_type}, {payload} FROM (SELECT $1::bigint AS g) s"
    )
}

/// The same event as a transactional logical decoding message (prefix `outbox`), one per row of
/// `generate_series($1, $2)`: the table-less outbox. The payload travels as its jsonb text in a
/// JSON string, so each record is byte for byte the row's (docs/table-less-outbox.md).
pub fn message_statement(aggregates: u32) -> String {
    let [id, aggregate_type, aggregate_id, event_type, payload] =
        row_exprs("g", BACKLOG_GROUP, aggregates);
    format!(
        "SELECT pg_logical_emit_message(true, 'outbox', json_build_object('id', {id}, \
         'aggregatetype', {aggregate_type}, 'aggregateid', {aggregate_id}, 'type', {event_type}, \
         'payload', ({payload})::text)::text) FROM generate_series($1::bigint, $2::bigint) g"
    )
}

const COLUMNS: &str = "id, aggregatetype, aggregateid, type, payload";

pub async fn connect(url: &str) -> Client {
    let (client, conn) =
        tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A new database holding an empty outbox table: Debezium's schema (tests/support), plus `seq`
/// and `published_at` and the partial index a polling relay needs.
pub async fn create_db(prefix: &str) -> TestDb {
    let db = services().pg.create_database(prefix).await;
    db.create_outbox("outbox").await;
    db.execute(
        "ALTER TABLE outbox ADD COLUMN seq bigserial, ADD COLUMN published_at timestamptz;
         CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL;",
    )
    .await;
    db
}

pub async fn drop_db(db: &TestDb) {
    let admin = services().pg.connect_to("postgres").await;
    // Slots of this database must go first (they also pin WAL).
    let _ = admin
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1",
            &[&db.name],
        )
        .await;
    if let Err(e) =
        admin.batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", db.name)).await
    {
        eprintln!("[bench] drop database {}: {e}", db.name);
    }
}

/// Publication (INSERTs of the outbox only) and one pgoutput slot per name, before the load.
pub async fn create_publication_and_slots(db: &TestDb, publication: &str, slots: &[&str]) {
    let c = db.connect().await;
    c.batch_execute(&format!(
        "CREATE PUBLICATION \"{publication}\" FOR TABLE outbox WITH (publish = 'insert')"
    ))
    .await
    .expect("create publication");
    for slot in slots {
        c.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[slot])
            .await
            .unwrap_or_else(|e| panic!("create slot {slot}: {e}"));
    }
}

/// Moves `slot` past every row committed so far (once the WAL holding them is flushed, which
/// under `synchronous_commit = off` can lag the commit), so a relay starting on it relays only
/// what comes next. A slot already there stays.
pub async fn skip_slot_to_now(db: &TestDb, slot: &str) {
    let c = db.connect().await;
    let lsn = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.expect("wal lsn").get::<_, Lsn>(0) }
    };
    let now = lsn("SELECT pg_current_wal_insert_lsn()").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while lsn("SELECT pg_current_wal_flush_lsn()").await < now && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.query_one(
        "SELECT pg_replication_slot_advance(slot_name, GREATEST($2::pg_lsn, confirmed_flush_lsn)) \
         FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot, &now],
    )
    .await
    .unwrap_or_else(|e| panic!("advance slot {slot}: {e}"));
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Loaded {
    pub events: u64,
    pub seconds: f64,
    /// `pg_current_wal_insert_lsn()` right after the last load transaction committed: every
    /// reader of the backlog is done once it has passed it.
    pub end_lsn: u64,
    pub wal_bytes: u64,
    pub avg_payload_bytes: f64,
}

/// Inserts events 1..=n, `per_txn` rows per transaction (one `INSERT … SELECT generate_series`
/// statement each), over two connections; then VACUUM ANALYZE and CHECKPOINT, so every system
/// starts from the same clean table.
pub async fn load(db: &TestDb, n: u64, per_txn: u64, aggregates: u32) -> Loaded {
    load_into(db, n, per_txn, aggregates, &["outbox"]).await
}

/// Like [`load`], transaction `t` writing its rows into `tables[t % tables.len()]`.
pub async fn load_into(
    db: &TestDb,
    n: u64,
    per_txn: u64,
    aggregates: u32,
    tables: &[&str],
) -> Loaded {
    let statements: Vec<String> = tables
        .iter()
        .map(|table| {
            format!(
                "INSERT INTO {table} ({COLUMNS}) SELECT {} FROM generate_series($1::bigint, $2::bigint) g",
                row_sql("g", BACKLOG_GROUP, aggregates)
            )
        })
        .collect();
    let mut loaded = load_statements(db, n, per_txn, statements).await;
    let c0 = db.connect().await;
    loaded.avg_payload_bytes = c0
        .query_one(
            &format!("SELECT avg(octet_length(payload::text))::float8 FROM {}", tables[0]),
            &[],
        )
        .await
        .map(|r| r.get::<_, Option<f64>>(0).unwrap_or(0.0))
        .unwrap_or(0.0);
    for table in tables {
        c0.batch_execute(&format!("VACUUM ANALYZE {table}")).await.expect("vacuum");
    }
    c0.batch_execute("CHECKPOINT").await.expect("checkpoint");
    loaded
}

/// Runs `statements[t % len]` with `($1, $2)` = the event range of transaction `t`, over two
/// connections; the WAL span they wrote and how long it took.
pub async fn load_statements(db: &TestDb, n: u64, per_txn: u64, statements: Vec<String>) -> Loaded {
    let started = Instant::now();
    let c0 = db.connect().await;
    let start_lsn = current_wal_insert_lsn(&c0).await;
    let next = Arc::new(AtomicU64::new(0));
    let txns = n.div_ceil(per_txn);
    let statements = Arc::new(statements);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (url, statements, next) = (db.url.clone(), statements.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let c = connect(&url).await;
            let mut prepared = Vec::new();
            for sql in statements.iter() {
                prepared.push(c.prepare(sql).await.expect("prepare load"));
            }
            loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                if t >= txns {
                    break;
                }
                let lo = (t * per_txn + 1) as i64;
                let hi = ((t + 1) * per_txn).min(n) as i64;
                let stmt = &prepared[(t % prepared.len() as u64) as usize];
                c.execute(stmt, &[&lo, &hi]).await.expect("load batch");
            }
        }));
    }
    for t in tasks {
        t.await.expect("load task");
    }
    let end_lsn = current_wal_insert_lsn(&c0).await;
    let seconds = started.elapsed().as_secs_f64();
    Loaded {
        events: n,
        seconds,
        end_lsn: u64::from(end_lsn),
        wal_bytes: end_lsn.bytes_since(start_lsn),
        avg_payload_bytes: 0.0,
    }
}

async fn current_wal_insert_lsn(c: &Client) -> Lsn {
    c.query_one("SELECT pg_current_wal_insert_lsn()", &[]).await.expect("lsn query").get(0)
}

/// `(group, n)` from an event id written by [`row_sql`].
pub fn parse_event_id(id: &[u8]) -> Option<(u32, u64)> {
    if id.len() != 36 {
        return None;
    }
    let s = std::str::from_utf8(id).ok()?;
    let group = u32::from_str_radix(&s[..8], 16).ok()?;
    let n = u64::from_str_radix(&s[24..], 16).ok()?;
    Some((group, n))
}

/// The outbox table's state, from the statistics views.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TableStats {
    pub total_mb: f64,
    pub heap_mb: f64,
    pub live_tup: i64,
    pub dead_tup: i64,
    pub tup_upd: i64,
    /// seq_scan + idx_scan: reads of the table.
    pub scans: i64,
    pub autovacuums: i64,
}

pub async fn table_stats(db: &TestDb) -> TableStats {
    try_table_stats(db).await.expect("table stats of outbox")
}

/// Statistics of a plain `outbox` table; `None` for a shape without one (a partitioned table
/// keeps its statistics on the partitions, a message-only outbox has no table).
pub async fn try_table_stats(db: &TestDb) -> Option<TableStats> {
    let c = db.connect().await;
    let r = c
        .query_opt(
            "SELECT pg_total_relation_size('outbox')::float8 / 1048576, \
                    pg_relation_size('outbox')::float8 / 1048576, \
                    n_live_tup, n_dead_tup, n_tup_upd, \
                    coalesce(seq_scan, 0) + coalesce(idx_scan, 0), autovacuum_count \
             FROM pg_stat_user_tables WHERE relname = 'outbox'",
            &[],
        )
        .await
        .ok()??;
    Some(TableStats {
        total_mb: r.get(0),
        heap_mb: r.get(1),
        live_tup: r.get(2),
        dead_tup: r.get(3),
        tup_upd: r.get(4),
        scans: r.get(5),
        autovacuums: r.get(6),
    })
}

/// Table statistics once the statistics collector caught up (PostgreSQL flushes backend
/// counters at most once a second).
pub async fn table_stats_settled(db: &TestDb) -> TableStats {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    table_stats(db).await
}

pub async fn try_table_stats_settled(db: &TestDb) -> Option<TableStats> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    try_table_stats(db).await
}

/// Result of one fixed-rate phase of single-row transactions.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RatePhase {
    pub target_rate: u64,
    pub first_n: u64,
    pub events: u64,
    pub achieved_rate: f64,
    /// Events whose INSERT statement failed (should be 0).
    pub failed: u64,
}

/// Inserts single-row transactions for events `first_n..first_n + rate * seconds` (steady
/// group) on a fixed schedule (open loop: event i is due at start + i / rate), over `conns`
/// pipelined connections; stores each event's commit time (µs, [`now_us`], taken when COMMIT
/// returned) in `commit_us[n]`.
#[allow(clippy::too_many_arguments)]
pub async fn run_rate(
    db: &TestDb,
    group: u32,
    sync_commit: bool,
    conns: usize,
    rate: u64,
    seconds: f64,
    first_n: u64,
    aggregates: u32,
    commit_us: Arc<Vec<AtomicU64>>,
    on_commit: Option<OnCommit>,
) -> RatePhase {
    let sql = format!(
        "INSERT INTO outbox ({COLUMNS}) SELECT {} FROM (SELECT $1::bigint AS g) s",
        row_sql("g", group, aggregates)
    );
    let mut clients = Vec::new();
    for _ in 0..conns {
        let c = connect(&db.url).await;
        set_sync_commit(&c, sync_commit).await;
        let stmt = c.prepare(&sql).await.expect("prepare steady insert");
        clients.push(Arc::new((c, stmt)));
    }
    let total = (rate as f64 * seconds) as u64;
    let inflight = Arc::new(tokio::sync::Semaphore::new(1024));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut issued = 0u64;
    // Bounded: the loop ends after `total` events, or 3× the planned time.
    while issued < total && start.elapsed().as_secs_f64() < seconds * 3.0 + 5.0 {
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(total);
        while issued < due {
            let n = first_n + issued;
            let permit = inflight.clone().acquire_owned().await.expect("semaphore");
            let cs = clients[(issued as usize) % clients.len()].clone();
            let (commit_us, failed, on_commit) =
                (commit_us.clone(), failed.clone(), on_commit.clone());
            tokio::spawn(async move {
                let g = n as i64;
                let sent = Instant::now();
                match cs.0.execute(&cs.1, &[&g]).await {
                    Ok(_) => {
                        commit_us[n as usize].store(now_us().max(1), Ordering::Relaxed);
                        if let Some(on_commit) = &on_commit {
                            on_commit(n, sent);
                        }
                    }
                    Err(e) => {
                        if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("[bench] steady insert failed: {e} {:?}", e.as_db_error());
                        }
                    }
                }
                drop(permit);
            });
            issued += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Every insert has finished once all permits are back.
    let _all = inflight.acquire_many(1024).await.expect("semaphore");
    let elapsed = start.elapsed().as_secs_f64();
    RatePhase {
        target_rate: rate,
        first_n,
        events: issued,
        achieved_rate: issued as f64 / elapsed,
        failed: failed.load(Ordering::Relaxed),
    }
}

/// Called by a writer as soon as its transaction for event `n` has committed, with the moment it
/// sent that transaction (the dual-write floor produces the event's record there).
pub type OnCommit = Arc<dyn Fn(u64, Instant) + Send + Sync>;

/// Inserts event `n` of `group` in a transaction of its own, committed before return.
pub async fn insert_one(db: &TestDb, sync_commit: bool, group: u32, n: u64, aggregates: u32) {
    let c = connect(&db.url).await;
    set_sync_commit(&c, sync_commit).await;
    let sql = format!(
        "INSERT INTO outbox ({COLUMNS}) SELECT {} FROM (SELECT $1::bigint AS g) s",
        row_sql("g", group, aggregates)
    );
    c.execute(&sql, &[&(n as i64)]).await.expect("insert one");
}

/// The steady phase's writers commit like an application on a default PostgreSQL
/// (`synchronous_commit = on`, WAL flushed at commit); the harness's server default is `off`,
/// under which a commit reaches the WAL readers only when the WAL writer flushes (every
/// `wal_writer_delay` = 200 ms, or per 1 MB).
async fn set_sync_commit(c: &Client, on: bool) {
    let v = if on { "on" } else { "off" };
    c.batch_execute(&format!("SET synchronous_commit = {v}"))
        .await
        .expect("SET synchronous_commit");
}
