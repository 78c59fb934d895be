//! Retention against the real services: `walrelay purge` and `[retention]` in `walrelay run`
//! delete only rows whose events the slot has confirmed — in bounded batches, or by dropping
//! whole old partitions — and keep everything else for a later run.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{ids, Setup};
use crate::support::postgres::TestDb;
use crate::support::process::{http_get, metric, walrelay_async, RelayProcess, Run};
use crate::support::{free_port, wait_until};

/// Inserts `n` outbox rows into `table` in one transaction, written `age` ago (an SQL interval,
/// or a negative one for the future); returns their ids.
async fn insert(db: &TestDb, table: &str, n: i64, age: &str) -> Vec<String> {
    let rows = db
        .connect()
        .await
        .query(
            &format!(
                "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload, created_at) \
                 SELECT gen_random_uuid(), 'Order', 'o-' || g, 'Aged', '{{}}'::jsonb, now() - $2::text::interval \
                 FROM generate_series(1, $1::bigint) g RETURNING id::text"
            ),
            &[&n, &age],
        )
        .await
        .unwrap_or_else(|e| panic!("insert into {table}: {e}"));
    rows.iter().map(|r| r.get(0)).collect()
}

async fn count(db: &TestDb, table: &str) -> i64 {
    let client = db.connect().await;
    client.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.unwrap().get(0)
}

async fn purge(config: &str, args: &[&str]) -> (Run, Duration) {
    let started = Instant::now();
    let mut all = vec!["purge"];
    all.extend_from_slice(args);
    let run = walrelay_async(&all, Some(config)).await;
    (run, started.elapsed())
}

/// [`purge`] until its output contains `expect` (at most 60 s): the horizon is the cluster's
/// oldest running transaction, and another test on the shared server may hold one open for a
/// moment, which makes a purge keep rows for a later run (as it must). Returns the last run.
async fn purge_until(config: &str, args: &[&str], expect: &str) -> (Run, Duration) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (run, took) = purge(config, args).await;
        if run.stdout.contains(expect) || Instant::now() >= deadline {
            return (run, took);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_relayed_old_rows_of_every_table_keeps_newer_ones_and_dry_run_changes_nothing(
) {
    let s = Setup::new("purge").await;
    s.db.create_outbox("outbox2").await;
    let config = s
        .config()
        .replace("table = \"public.outbox\"", "tables = [\"public.outbox\", \"public.outbox2\"]");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut written = insert(&s.db, "outbox", 12_000, "10 days").await;
    written.extend(insert(&s.db, "outbox", 5, "1 day").await);
    written.extend(insert(&s.db, "outbox2", 7, "30 days").await);
    written.extend(insert(&s.db, "outbox2", 2, "0 days").await);
    let got = s.read("Order", written.len()).await;
    assert_eq!(got.len(), written.len(), "relay log:\n{}", relay.log());

    let (dry, dry_took) = purge_until(
        &config,
        &["--older-than", "7d", "--dry-run"],
        "public.outbox: would delete 12000 rows",
    )
    .await;
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(dry.stdout.contains("public.outbox: would delete 12000 rows in 3 batches"), "{dry}");
    assert!(dry.stdout.contains("public.outbox2: would delete 7 rows in 1 batch"), "{dry}");
    assert_eq!((count(&s.db, "outbox").await, count(&s.db, "outbox2").await), (12_005, 9));

    let (run, took) =
        purge_until(&config, &["--older-than", "7d"], "public.outbox: deleted 12000 rows").await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("public.outbox: deleted 12000 rows in 3 batches"), "{run}");
    assert!(run.stdout.contains("public.outbox2: deleted 7 rows in 1 batch"), "{run}");
    assert!(run.stdout.contains("purge: deleted 12007 rows, dropped 0 partitions"), "{run}");
    assert_eq!((count(&s.db, "outbox").await, count(&s.db, "outbox2").await), (5, 2));
    println!(
        "purge: dry run {} ms, 12,007 rows deleted (two tables, 5,000 per batch) in {} ms\n{}",
        dry_took.as_millis(),
        took.as_millis(),
        run.stdout
    );
    // Nothing left to purge: a second run deletes nothing and says so.
    let (again, _) = purge(&config, &["--older-than", "7d"]).await;
    assert!(again.stdout.contains("public.outbox: deleted 0 rows in 0 batches"), "{again}");
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_an_old_row_written_while_the_relay_was_down_until_the_relay_relayed_it() {
    let s = Setup::new("purgedown").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    insert(&s.db, "outbox", 1, "10 days").await;
    assert_eq!(s.read("Order", 1).await.len(), 1, "relay log:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));

    // Committed while no relay runs, with a created_at far older than the cut-off.
    let late = insert(&s.db, "outbox", 1, "10 days").await;
    let (run, took) = purge(&s.config(), &["--older-than", "7d", "--wait", "2s"]).await;
    println!("relay down: purge gave up after {} ms:\n{}", took.as_millis(), run.stderr);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("nothing purged") && run.stderr.contains("walrelay is down"),
        "{run}"
    );
    assert!(run.stderr.contains("fix: start walrelay"), "{run}");
    assert_eq!(count(&s.db, "outbox").await, 2, "nothing may go while the slot is behind");
    // A dry run with the default --wait (30 s) does not wait for a slot nobody streams from,
    // and still counts what a purge would delete once the slot gets there.
    let (dry, took) = purge(&s.config(), &["--older-than", "7d", "--dry-run"]).await;
    println!("relay down, dry run after {} ms:\n{}{}", took.as_millis(), dry.stdout, dry.stderr);
    assert_eq!(dry.code, Some(1), "{dry}");
    assert!(
        took < Duration::from_secs(15),
        "the dry run waited {took:?} for a slot nobody streams from"
    );
    assert!(dry.stdout.contains("a purge now would delete nothing"), "{dry}");
    assert!(dry.stdout.contains("public.outbox: would delete 2 rows"), "{dry}");
    assert!(dry.stderr.contains("walrelay is down"), "{dry}");
    assert_eq!(count(&s.db, "outbox").await, 2, "a dry run deleted rows");

    let mut relay = s.start_relay();
    let got = s.read("Order", 2).await;
    assert_eq!(ids(&got)[1], late[0], "relay log:\n{}", relay.log());
    let (run, took) =
        purge_until(&s.config(), &["--older-than", "7d"], "public.outbox: deleted 2 rows").await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("public.outbox: deleted 2 rows in 1 batch"), "{run}");
    assert_eq!(count(&s.db, "outbox").await, 0);
    println!("relay back: purge deleted both rows in {} ms", took.as_millis());
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_rows_of_transactions_that_had_not_ended_at_its_snapshot() {
    let s = Setup::new("purgexmin").await;
    s.db.execute("CREATE TABLE side (x int)").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    // A transaction with an xid older than the row's stays open over the first purges: the
    // snapshot's xmin (X0) is then older than the row's xmin, so the row is not known to be
    // relayed by the horizon's rule, even though Kafka has it.
    let open = s.db.connect().await;
    open.batch_execute("BEGIN; INSERT INTO side VALUES (1)").await.unwrap();
    insert(&s.db, "outbox", 1, "10 days").await;
    assert_eq!(s.read("Order", 1).await.len(), 1, "relay log:\n{}", relay.log());

    let (dry, _) = purge(&s.config(), &["--older-than", "7d", "--dry-run"]).await;
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(dry.stdout.contains("public.outbox: would delete 0 rows"), "{dry}");
    assert!(dry.stdout.contains("public.outbox: kept 1 row older than the cut-off"), "{dry}");
    let (run, _) = purge(&s.config(), &["--older-than", "7d"]).await;
    assert!(run.stdout.contains("public.outbox: deleted 0 rows"), "{run}");
    assert_eq!(count(&s.db, "outbox").await, 1);
    println!("open transaction: the row stays\n{}", dry.stdout);

    open.batch_execute("COMMIT").await.unwrap();
    let (run, _) =
        purge_until(&s.config(), &["--older-than", "7d"], "public.outbox: deleted 1 row").await;
    assert!(run.stdout.contains("public.outbox: deleted 1 row in 1 batch"), "{run}");
    assert_eq!(count(&s.db, "outbox").await, 0);
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_drops_a_whole_old_partition_keeps_the_current_one_and_every_event_is_delivered() {
    let s = Setup::new("purgepart").await;
    // Bounds relative to today, so the test never ages.
    s.db.execute(
        "CREATE TABLE poutbox (id uuid NOT NULL, aggregatetype varchar(255) NOT NULL, \
           aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, \
           created_at timestamptz NOT NULL DEFAULT now()) PARTITION BY RANGE (created_at);
         DO $$ DECLARE today timestamptz := date_trunc('day', now()); BEGIN
           EXECUTE format('CREATE TABLE poutbox_old PARTITION OF poutbox FOR VALUES FROM (%L) TO (%L)',
                          today - interval '60 days', today - interval '30 days');
           EXECUTE format('CREATE TABLE poutbox_current PARTITION OF poutbox FOR VALUES FROM (%L) TO (%L)',
                          today - interval '30 days', today + interval '30 days');
         END $$;
         CREATE TABLE poutbox_default PARTITION OF poutbox DEFAULT;",
    )
    .await;
    let config = s.config().replace("table = \"public.outbox\"", "table = \"public.poutbox\"");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut written = insert(&s.db, "poutbox", 3_000, "45 days").await; // poutbox_old
    written.extend(insert(&s.db, "poutbox", 4, "10 days").await); // current, older than 7d
    written.extend(insert(&s.db, "poutbox", 3, "0 days").await); // current
    written.extend(insert(&s.db, "poutbox", 2, "400 days").await); // default
    assert_eq!(s.read("Order", written.len()).await.len(), written.len(), "{}", relay.log());

    let (dry, _) = purge_until(
        &config,
        &["--older-than", "7d", "--dry-run"],
        "would drop partition public.poutbox_old",
    )
    .await;
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(
        dry.stdout.contains("public.poutbox: would drop partition public.poutbox_old (3000 rows)"),
        "{dry}"
    );
    assert_eq!(count(&s.db, "poutbox").await, 3_009);

    let (run, took) =
        purge_until(&config, &["--older-than", "7d"], "dropped partition public.poutbox_old").await;
    println!("partitioned outbox purged in {} ms:\n{}", took.as_millis(), run.stdout);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains(
            "public.poutbox: dropped partition public.poutbox_old (3000 rows; outbox locked "
        ),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("public.poutbox: kept partition public.poutbox_current: its upper bound "),
        "{run}"
    );
    assert!(run.stdout.contains("public.poutbox: kept partition public.poutbox_default: the DEFAULT partition never ages out whole; deleted 2 rows older than the cut-off"), "{run}");
    assert!(
        run.stdout.contains("purge: deleted 2 rows, dropped 1 partition (3000 rows) in "),
        "{run}"
    );
    let client = s.db.connect().await;
    let gone: bool =
        client.query_one("SELECT to_regclass('poutbox_old') IS NULL", &[]).await.unwrap().get(0);
    assert!(gone, "poutbox_old still exists");
    assert_eq!(count(&s.db, "poutbox").await, 7);

    // The relay goes on as before, and every event ever written reached Kafka.
    written.extend(insert(&s.db, "poutbox", 5, "0 days").await);
    let got = s.read("Order", written.len()).await;
    let delivered: BTreeSet<String> = ids(&got).into_iter().collect();
    let expected: BTreeSet<String> = written.iter().cloned().collect();
    assert_eq!(delivered, expected, "relay log:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_in_walrelay_run_purges_on_its_own() {
    let s = Setup::new("purgerun").await;
    let port = free_port();
    let config = s.config_with(
        "",
        "",
        &format!(
            "[http]\nlisten = \"127.0.0.1:{port}\"\n[retention]\nkeep = \"7d\"\ninterval = \"1s\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let started = Instant::now();
    insert(&s.db, "outbox", 100, "8 days").await;
    insert(&s.db, "outbox", 3, "6 days").await;
    assert_eq!(s.read("Order", 103).await.len(), 103, "relay log:\n{}", relay.log());
    let db = &s.db;
    let purged =
        wait_until("the relay purges the old rows", Duration::from_secs(60), || async move {
            count(db, "outbox").await == 3
        })
        .await;
    assert!(purged, "relay log:\n{}", relay.log());
    println!(
        "[retention] keep = 7d, interval = 1s: 100 old rows gone {} ms after they were written",
        started.elapsed().as_millis()
    );
    // The rows are gone when the DELETE commits; the counter follows a moment later.
    let counted = wait_until("the purge is counted", Duration::from_secs(10), || async move {
        let text = http_get(port, "/metrics").await.unwrap_or_default();
        metric(&text, "walrelay_purged_rows_total") == Some(100.0)
    })
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(counted, "{text}");
    assert_eq!(metric(&text, "walrelay_purged_rows_total"), Some(100.0), "{text}");
    assert_eq!(metric(&text, "walrelay_purged_partitions_total"), Some(0.0), "{text}");
    assert!(metric(&text, "walrelay_purge_last_success_seconds").unwrap_or(0.0) > 0.0, "{text}");
    assert!(relay.log().contains("purged outbox rows older than 7d"), "{}", relay.log());
    let stopping = Instant::now();
    assert_eq!(relay.terminate(), Some(0));
    println!("stopped in {} ms with retention running", stopping.elapsed().as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_retention_settings_are_refused_naming_the_key_or_the_column() {
    let s = Setup::new("purgebad").await;
    let with = |lines: &str| s.config_with("", "", &format!("[retention]\n{lines}\n"));
    for (lines, key) in [
        ("keep = \"7\"", "`keep`"),
        ("keep = \"7d\"\ninterval = \"often\"", "`interval`"),
        ("keep = \"7d\"\ncolumn = \"Created-At\"", "`column`"),
        ("keep = \"7d\"\nretain = \"30d\"", "`retain`"),
        ("interval = \"1h\"", "`keep`"),
    ] {
        for command in ["purge", "run"] {
            let run = walrelay_async(&[command], Some(&with(lines))).await;
            assert_eq!(run.code, Some(2), "{command} with {lines}: {run}");
            assert!(run.stderr.contains("[retention]") && run.stderr.contains(key), "{run}");
        }
    }
    println!(
        "refused, e.g.: {}",
        walrelay_async(&["purge"], Some(&with("keep = \"7\""))).await.stderr.trim()
    );
    let run = walrelay_async(&["purge"], Some(&s.config())).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("--older-than"), "{run}");

    // A column that isn't there, or holds no time: refused before anything is deleted, and
    // `check` says the same.
    for (column, problem, fix) in [
        ("written_at", "has no column written_at", "ADD COLUMN written_at timestamptz"),
        ("aggregateid", "is character varying(255)", "timestamptz, timestamp or date"),
    ] {
        let config = with(&format!("keep = \"7d\"\ncolumn = \"{column}\""));
        let run = walrelay_async(&["purge"], Some(&config)).await;
        assert_eq!(run.code, Some(1), "{run}");
        assert!(run.stderr.contains(problem) && run.stderr.contains(fix), "{run}");
        let check = walrelay_async(&["check"], Some(&config)).await;
        assert_eq!(check.code, Some(1), "{check}");
        let fails = check.lines_starting("FAIL retention public.outbox: ");
        assert!(fails.len() == 1 && fails[0].contains(problem), "{check}");
        println!("{}", fails[0]);
    }
    let check = walrelay_async(&["check"], Some(&with("keep = \"7d\""))).await;
    assert_eq!(check.code, Some(0), "{check}");
    assert!(check.stdout.contains("ok   retention public.outbox: keep 7d, purged every 1h (rows whose events the slot confirmed): rows older than the cut-off by created_at (timestamptz) are deleted in batches of 5000"), "{check}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_purge_for_the_same_slot_skips_its_turn() {
    let s = Setup::new("purgebusy").await;
    insert(&s.db, "outbox", 3, "10 days").await;
    // What a purge running elsewhere (the other relay of a pair) holds.
    let other = s.db.connect().await;
    let key = format!("walrelay purge {}", s.slot);
    other.query_one("SELECT pg_advisory_lock(hashtext($1))", &[&key]).await.unwrap();
    let pid: i32 = other.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let (run, _) = purge(&s.config(), &["--older-than", "7d", "--wait", "1s"]).await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains(&format!("another purge for slot {} runs (pid {pid})", s.slot)),
        "{run}"
    );
    assert_eq!(count(&s.db, "outbox").await, 3);
    println!("second purge: {}", run.stderr.trim());
}

/// SIGTERM while `[retention]`'s purge waits for the slot: the broker is out of reach, so an
/// old row the relay read is never acknowledged and the slot stays short of where the purge
/// began. The purge stops with the relay, inside `[limits] shutdown_grace_ms`: exit 0 within the
/// grace period, and nothing was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_purge_waits_for_the_slot_exits_0_within_the_grace_period() {
    const GRACE: Duration = Duration::from_secs(4);
    let s = Setup::new("purgestop").await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    let extra = format!(
        "[limits]\nshutdown_grace_ms = {}\n[retention]\nkeep = \"7d\"\ninterval = \"1s\"\n",
        GRACE.as_millis()
    );
    let mut relay = RelayProcess::start(&s.config_for_bootstrap(&nowhere, "", "", &extra));
    s.wait_streaming(&mut relay).await;
    insert(&s.db, "outbox", 5, "10 days").await;
    // A purge that began after the insert holds the purge lock for as long as it waits for the
    // slot (30 s); one second into it, it waits there.
    let (db, key) = (&s.db, format!("walrelay purge {}", s.slot));
    let key = key.as_str();
    let waiting =
        wait_until("a purge waits for the slot", Duration::from_secs(30), || async move {
            let client = db.connect().await;
            let sql =
                "SELECT count(*) FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a \
                   USING (pid) WHERE l.locktype = 'advisory' AND l.granted \
                   AND l.objid = pg_catalog.hashtext($1)::oid \
                   AND a.backend_start < now() - interval '1 second' \
                   AND a.backend_start > (SELECT max(created_at) FROM outbox) + interval '10 days'";
            client.query_one(sql, &[&key]).await.map(|r| r.get::<_, i64>(0) == 1).unwrap_or(false)
        })
        .await;
    assert!(waiting, "no purge waited for the slot:\n{}", relay.log());
    let asked = Instant::now();
    let code = tokio::task::block_in_place(|| relay.terminate());
    let took = asked.elapsed();
    println!("SIGTERM while a purge waits for the slot: exit {code:?} after {took:.1?}");
    assert_eq!(code, Some(0), "exit after {took:.1?}:\n{}", relay.log());
    assert!(took <= GRACE, "the stop took {took:.1?}, past the grace period:\n{}", relay.log());
    assert_eq!(count(&s.db, "outbox").await, 5, "a purge deleted unacknowledged rows");
}
