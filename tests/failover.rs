//! PostgreSQL failover: a primary and a physical standby that synchronises walrelay's failover
//! slot (PostgreSQL 17+), events written continuously, the primary killed, the standby promoted.
//! walrelay, configured with both hosts and `target_session_attrs=read-write`, carries on from
//! the promoted server: no event lost, duplicates only from what was in flight.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::Setup;
use crate::support::cluster;
use crate::support::postgres::{connect, PrivatePostgres};
use crate::support::process::RelayProcess;
use crate::support::readback::read_back;
use crate::support::servers::{server_with, Capability};
use crate::support::writer::{Writer, WriterConfig};
use crate::support::{services, wait_until};

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The standby holds a synchronised copy of the slot that survives promotion: `synced` and not
/// `temporary` (the sync worker keeps a copy temporary until the primary's slot has moved past
/// the standby's catalog horizon, and drops temporary copies at promotion).
async fn slot_synced_on(standby_url: &str, slot: &str) -> bool {
    let Ok(c) = connect(standby_url).await else { return false };
    c.query_opt(
        "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .ok()
    .flatten()
    .is_some_and(|r| r.get::<_, Option<bool>>(0) == Some(true))
}

/// A test database on `primary`, and the URL (and relay configuration) naming the primary and
/// its standby with `target_session_attrs=read-write`. The slot is left for walrelay to create
/// (as a failover slot on 17+; Setup makes a plain one).
async fn on_primary_and_standby(
    primary: &PrivatePostgres,
    standby: &cluster::Standby,
    name: &str,
) -> (Setup, String, String) {
    let s = Setup::on(&primary.pg, name).await;
    s.db.execute(&format!("SELECT pg_drop_replication_slot('{}')", s.slot)).await;
    let (p1, p2) = (primary.pg.port(), standby.pg.pg.port());
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={p1},{p2} dbname={} user=postgres target_session_attrs=read-write",
        s.db.name
    );
    let config = s.config().replace(&s.db.url, &url);
    (s, url, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_and_standby_promoted_relay_carries_on_with_no_event_lost() {
    let server = server_with(Capability::FailoverSlots).unwrap_or_else(|e| panic!("{e}"));
    let primary = cluster::start_instance("fo_primary", &server, &[]).await;
    let standby = cluster::create_standby(&primary, "fo_standby").await;
    // Commits return once the standby has them (so every acknowledged commit survives the
    // failover), and walrelay is sent no change the standby has not received
    // (synchronized_standby_slots), so the standby's copy of the slot is never behind WAL that
    // walrelay relayed.
    let admin = primary.pg.connect_to("postgres").await;
    for setting in [
        format!("synchronous_standby_names = '\"{}\"'", standby.slot),
        "synchronous_commit = on".to_string(),
        format!("synchronized_standby_slots = '{}'", standby.slot),
    ] {
        // One statement each: ALTER SYSTEM refuses to run inside a transaction block.
        admin.batch_execute(&format!("ALTER SYSTEM SET {setting}")).await.unwrap();
    }
    admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();

    let (s, url, config) = on_primary_and_standby(&primary, &standby, "failover").await;
    let mut w = WriterConfig::new(&url, &s.topic_prefix, &["Order", "Customer"], 8);
    w.rate = Some(300.0);
    w.max_txn = 4;
    w.reconnect_for = Duration::from_secs(120);
    let topics = w.topics();
    // Created before the relay's first record: this test is about the failover. Three runs of
    // it (1 in ~10) lost the first 3-4 records of one partition of a topic Kafka auto-created on
    // the relay's first produce, reported delivered by librdkafka; that is not explained yet and
    // is followed up apart from this test.
    for topic in &topics {
        crate::support::kafka::create_topic(services().broker.bootstrap(), topic, 4).await;
    }
    let mut relay = s.start_streaming(&config).await;
    let failover: bool =
        s.db.connect()
            .await
            .query_one("SELECT failover FROM pg_replication_slots WHERE slot_name = $1", &[&s.slot])
            .await
            .unwrap()
            .get(0);
    assert!(failover, "walrelay created a plain slot on PostgreSQL {}", server.version);

    let writer = Writer::spawn(w);
    let standby_url = standby.pg.pg.url(&s.db.name);
    let (surl, slot) = (standby_url.as_str(), s.slot.as_str());
    // The sync worker naps up to 30 s between rounds and keeps the copy temporary for a round or
    // two: 5–20 s on a quiet machine, longer on a loaded one.
    let sync_started = Instant::now();
    assert!(
        wait_until(
            "the standby holds a synchronised copy of the slot",
            Duration::from_secs(150),
            || async move { slot_synced_on(surl, slot).await }
        )
        .await,
        "slot never synced to the standby\n{}",
        relay.log()
    );
    let synced_after = sync_started.elapsed();
    assert!(writer.wait_committed(300, Duration::from_secs(60)).await);

    // The failover: the primary dies (no shutdown checkpoint), the standby is promoted.
    let before_kill = writer.committed();
    let primary = tokio::task::spawn_blocking(move || {
        primary.stop_immediate().expect("stop the primary");
        primary
    })
    .await
    .unwrap();
    let killed = Instant::now();
    assert!(
        relay.wait_for_log("relay session ended", Duration::from_secs(30)).await,
        "the relay did not notice the primary's death\n{}",
        relay.log()
    );
    let standby = tokio::task::spawn_blocking(move || {
        standby.pg.promote().expect("promote the standby");
        standby
    })
    .await
    .unwrap();
    let promoted_ms = unix_ms();
    let promoted = Instant::now();
    let after = writer.committed();
    let w = &writer;
    assert!(
        wait_until(
            "300 more events written on the promoted server",
            Duration::from_secs(90),
            || async move { w.committed() >= after + 300 }
        )
        .await,
        "the writer did not carry on after the promotion"
    );
    let report = writer.stop().await;
    let (quiet, deadline) = (Duration::from_secs(2), Duration::from_secs(120));
    let read = read_back(services().broker.bootstrap(), &topics, &[&report], quiet, deadline).await;
    let (got, v) = (read.got, read.verdict);
    let first_after = got.iter().filter_map(|d| d.timestamp_ms).filter(|t| *t >= promoted_ms).min();
    let log = relay.log();
    let sessions = log.lines().filter(|l| l.contains("resume_lsn=")).count();
    println!(
        "failover on PostgreSQL {}: {} events committed ({} before the kill, {} reconnects of the writer, {} commits found after reconnecting); {}; slot synced after {:.1?}; primary killed → promoted {:.1?}; promotion → first record {} ms; walrelay sessions {}",
        server.version,
        report.events.len(),
        before_kill,
        report.reconnects,
        report.commits_confirmed_after_reconnect,
        v.summary(),
        synced_after,
        promoted.duration_since(killed),
        first_after.map_or("none".to_string(), |t| (t - promoted_ms).to_string()),
        sessions
    );
    // CI's summary keeps a failure's first lines: what the relay did comes before its log.
    let upper_lsns: Vec<String> = report
        .events
        .iter()
        .filter(|e| v.lost_ids.iter().any(|l| l.starts_with(&e.id)))
        .map(|e| {
            format!(
                "{} in txn {} (WAL insert position after its commit {})",
                e.id, e.txn, report.txns[e.txn].upper_lsn
            )
        })
        .collect();
    let resumes: Vec<&str> =
        log.lines().filter_map(|l| l.split("resume_lsn=").nth(1)).map(str::trim).collect();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(|l| &l[..l.len().min(220)])
        .collect();
    assert!(
        v.ok(),
        "{}\nlost: {:?}; {upper_lsns:?}\nrelay: sessions resumed at {resumes:?}; {} warnings and errors: {:?}\nreordered: {:?}\n{}\n--- old primary's log ---\n{}\n--- promoted standby's log ---\n{}",
        v.summary(),
        v.lost_ids,
        warnings.len(),
        warnings,
        v.reordered_detail,
        log,
        primary.log_tail(60),
        standby.pg.log_tail(60)
    );
    assert_eq!(v.lost, 0);
    assert!(first_after.is_some(), "no record after the promotion\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    drop((primary, standby));
}

/// `walrelay check` against a primary and its standby (both in the URL) says whether the slot
/// survives a failover: on 18 the failover slot, `synchronized_standby_slots` (a warning with the
/// fix while it is empty) and the standby's slot synchronisation; on 15 that there are no
/// failover slots and what a failover loses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_whether_a_standby_keeps_the_slot_through_a_failover() {
    use crate::support::servers::Server;
    for server in [server_with(Capability::FailoverSlots).unwrap(), Server::major(15).unwrap()] {
        let primary = cluster::start_instance("chk_primary", &server, &[]).await;
        let standby = cluster::create_standby(&primary, "chk_standby").await;
        let (s, _, config) = on_primary_and_standby(&primary, &standby, "chkfo").await;
        let p2 = standby.pg.pg.port();
        // The standby must have replayed the test's database before check connects to it.
        assert!(
            cluster::wait_caught_up(&primary.pg, &standby.pg.pg, Duration::from_secs(30)).await
        );
        let run = crate::support::process::walrelay_async(&["check"], Some(&config)).await;
        println!("check on PostgreSQL {} with a standby:\n{}", server.version, run.stdout);
        let standby_line = format!("standby 127.0.0.1:{p2}");
        if server.major >= 17 {
            assert_eq!(run.code, Some(0), "{run}");
            assert!(
                run.stdout.contains(&format!(
                    "ok   slot {} failover: will be created as a failover slot",
                    s.slot
                )),
                "{run}"
            );
            assert!(run.stdout.contains("warn synchronized_standby_slots: is empty"), "{run}");
            assert!(
                run.stdout.contains(&format!(
                    "ALTER SYSTEM SET synchronized_standby_slots = '{}'",
                    standby.slot
                )),
                "{run}"
            );
            // The standby has no copy yet: the slot does not exist.
            assert!(
                run.stdout.contains(&format!(
                    "warn {standby_line}: holds no synchronised copy of slot {}",
                    s.slot
                )),
                "{run}"
            );

            // With the slot created as a failover slot, synchronised, and the primary waiting for
            // the standby: all ok.
            let setup = crate::support::process::walrelay_async(&["setup"], Some(&config)).await;
            assert_eq!(setup.code, Some(0), "{setup}");
            let admin = primary.pg.connect_to("postgres").await;
            admin
                .batch_execute(&format!(
                    "ALTER SYSTEM SET synchronized_standby_slots = '{}'",
                    standby.slot
                ))
                .await
                .unwrap();
            admin.batch_execute("SELECT pg_reload_conf()").await.unwrap();
            // The standby's copy becomes permanent once the slot has moved past the standby's
            // catalog horizon: a relay streams and confirms a few events.
            let mut relay = RelayProcess::start(&config);
            s.wait_streaming(&mut relay).await;
            s.insert_events("Order", "o-1", 3).await;
            assert_eq!(s.read("Order", 3).await.len(), 3, "{}", relay.log());
            let (surl, slot) = (standby.pg.pg.url(&s.db.name), s.slot.clone());
            let (surl, slot) = (surl.as_str(), slot.as_str());
            assert!(
                wait_until(
                    "the standby synchronises the slot",
                    Duration::from_secs(150),
                    || async move { slot_synced_on(surl, slot).await }
                )
                .await,
                "{}",
                relay.log()
            );
            let run = crate::support::process::walrelay_async(&["check"], Some(&config)).await;
            println!("after setup and synchronized_standby_slots:\n{}", run.stdout);
            assert_eq!(run.code, Some(0), "{run}");
            assert!(
                run.stdout.contains(&format!("ok   slot {} failover: a failover slot", s.slot)),
                "{run}"
            );
            assert!(run.stdout.contains("ok   synchronized_standby_slots: "), "{run}");
            assert!(
                run.stdout.contains(&format!("ok   {standby_line}: synchronises slot {}", s.slot)),
                "{run}"
            );
            assert_eq!(relay.terminate(), Some(0));
        } else {
            assert!(run.stdout.contains("warn failover: PostgreSQL 15"), "{run}");
            assert!(run.stdout.contains("has no failover slots"), "{run}");
        }
        drop((primary, standby));
    }
}
