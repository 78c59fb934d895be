//! `walrelay replay` against the real services: each selection (time window, ids, aggregate),
//! both orders, the rate limit, the dry run and bad input, and a replay beside a running relay.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::common::{ids, Setup};
use crate::support::kafka::{self, Consumed};
use crate::support::postgres::{connect, PrivatePostgres, TestDb};
use crate::support::process::{walrelay_async, Run};
use crate::support::servers::Server;
use crate::support::slot::{slot_active_pid, slot_confirmed};
use crate::support::{scratch_dir, services};

/// Inserts `n` rows of `aggregate_type` in one transaction, written `minutes_ago` minutes ago
/// plus one second per row (so the timestamp order is the insert order), aggregate ids
/// `a-0`…`a-4` in turn; returns their ids in that order.
pub(crate) async fn insert_aged(
    db: &TestDb,
    aggregate_type: &str,
    n: i64,
    minutes_ago: i64,
) -> Vec<String> {
    let rows = db
        .connect()
        .await
        .query(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at) \
             SELECT gen_random_uuid(), $1, 'a-' || (g % 5), 'Aged', jsonb_build_object('n', g), \
             now() - make_interval(mins => $3::int) + make_interval(secs => g) \
             FROM generate_series(1, $2::bigint) g ORDER BY g RETURNING id::text",
            &[&aggregate_type, &n, &(minutes_ago as i32)],
        )
        .await
        .unwrap_or_else(|e| panic!("insert aged rows: {e}"));
    rows.iter().map(|r| r.get(0)).collect()
}

pub(crate) async fn replay(config: &str, args: &[&str]) -> Run {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    walrelay_async(&all, Some(config)).await
}

fn replayed(records: &[Consumed]) -> Vec<&Consumed> {
    records.iter().filter(|r| r.header("walrelay.replay").is_some()).collect()
}

/// The replay id the first stdout line announces.
fn replay_id(run: &Run) -> String {
    run.stdout
        .strip_prefix("replay ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no replay id in: {run}"))
        .to_string()
}

async fn read_topic(topic: &str, expected: usize, deadline: Duration) -> Vec<Consumed> {
    kafka::consume(services().broker.bootstrap(), topic, expected, deadline).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_time_window_resends_its_events_with_the_same_id_key_partition_and_value() {
    let s = Setup::new("replaywin").await;
    s.db.execute("CREATE INDEX outbox_created_id ON outbox (created_at, id)").await;
    // The relay creates its publication: rows written before it would not be published.
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let old = insert_aged(&s.db, "Order", 5, 180).await;
    let window = insert_aged(&s.db, "Order", 40, 60).await;
    let newer = insert_aged(&s.db, "Order", 4, 10).await;
    let live = s.read("Order", 49).await;
    assert_eq!(live.len(), 49, "{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0));
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await;

    let run = replay(&s.config(), &["--since", "2h", "--until", "30m"]).await;
    println!("{run}");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(": 40 events (since 2h ago, until 30m ago), by created_at, then id (track_commit_timestamp is off"), "{run}");
    assert!(
        run.stdout.contains("reading public.outbox by index outbox_created_id (created_at, id)"),
        "{run}"
    );
    assert!(run.stdout.contains("sent 40 events to 1 topic(s)"), "{run}");
    let id = replay_id(&run);
    let check = walrelay_async(&["check"], Some(&s.config())).await;
    let line =
        "ok   replay public.outbox: by index outbox_created_id (created_at, id); by created_at";
    assert!(check.stdout.contains(line), "{check}");

    let all = s.read("Order", 89).await;
    let again = replayed(&all);
    assert_eq!(again.len(), 40, "replayed records: {:?}", ids(&all));
    let by_id: HashMap<&str, &Consumed> =
        live.iter().map(|r| (r.header_str("id").unwrap(), r)).collect();
    for r in &again {
        assert_eq!(r.header_str("walrelay.replay"), Some(id.as_str()));
        let event = r.header_str("id").unwrap();
        assert!(window.iter().any(|w| w == event), "{event} is outside the window");
        let original = by_id[event];
        assert_eq!(
            (&r.key, r.partition, &r.value),
            (&original.key, original.partition, &original.value)
        );
    }
    // Per partition (so per key), in the window's order: its rows' timestamp order.
    let mut per_partition: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
    for r in &again {
        per_partition.entry(r.partition).or_default().push(r.header_str("id").unwrap());
    }
    for (partition, got) in per_partition {
        let expected: Vec<&str> =
            window.iter().map(String::as_str).filter(|w| got.contains(w)).collect();
        assert_eq!(got, expected, "partition {partition} out of order");
    }
    assert!(old.iter().chain(&newer).all(|o| !again.iter().any(|r| r.header_str("id") == Some(o))));
    // The slot is the relay's alone: the replay moved nothing.
    assert_eq!(slot_confirmed(&s.db.url, &s.slot).await, confirmed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_by_ids_a_file_of_ids_and_an_aggregate_sends_only_those_to_the_side_topic() {
    let s = Setup::new("replayids").await;
    let orders = insert_aged(&s.db, "Order", 20, 30).await;
    insert_aged(&s.db, "Payment", 5, 30).await;
    let side = format!("{}.rebuild", s.topic_prefix);
    let file = scratch_dir("replayids").join("ids.txt");
    std::fs::write(&file, format!("# ids\n{}\n\n  {}  \n", orders[2], orders[3])).unwrap();

    let args = [
        "--id",
        &orders[0],
        "--id",
        &orders[1],
        "--ids",
        file.to_str().unwrap(),
        "--to-topic",
        &side,
    ];
    let run = replay(&s.config(), &args).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("reading public.outbox by index outbox_pkey (id)"), "{run}");
    let got = read_topic(&side, 4, Duration::from_secs(30)).await;
    let mut got_ids = ids(&got);
    got_ids.sort();
    let mut want: Vec<String> = orders[..4].to_vec();
    want.sort();
    assert_eq!(got_ids, want);

    // Narrowed to one aggregate: aggregate ids a-0…a-4 in turn, so a-1 has 4 of the 20 orders.
    let side2 = format!("{}.rebuild2", s.topic_prefix);
    let args = [
        "--since",
        "1d",
        "--aggregate-type",
        "Order",
        "--aggregate-id",
        "a-1",
        "--to-topic",
        &side2,
    ];
    let run = replay(&s.config(), &args).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("sent 4 events"), "{run}");
    let got = read_topic(&side2, 5, Duration::from_secs(8)).await;
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|r| r.key_str() == Some("a-1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_dry_run_counts_per_topic_and_bad_input_is_refused_with_nothing_sent() {
    let s = Setup::new("replaydry").await;
    insert_aged(&s.db, "Order", 12, 30).await;
    insert_aged(&s.db, "Payment", 3, 30).await;
    let config = s.config();

    let run = replay(&config, &["--since", "1h", "--dry-run"]).await;
    println!("{run}");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("(dry run): would send 15 events to 2 topic(s); nothing was sent"),
        "{run}"
    );
    assert!(run.stdout.contains(&format!("  {}: 12\n", s.topic("Order"))), "{run}");
    assert!(run.stdout.contains(&format!("  {}: 3\n", s.topic("Payment"))), "{run}");

    let check = walrelay_async(&["check"], Some(&config)).await;
    let line = "warn replay public.outbox: no index starts with created_at: a replay by time would read the whole table";
    assert!(check.stdout.contains(line), "{check}");
    assert!(
        check.stdout.contains("fix: CREATE INDEX CONCURRENTLY ON public.outbox (created_at, id)"),
        "{check}"
    );

    let retained = s.config_with("", "", "[retention]\nkeep = \"1h\"\n");
    let tableless = s
        .config_with("", "", "[debezium]\n\"message.prefix.include.list\" = \"outbox\"\n")
        .replace("table = \"public.outbox\"", "tables = []");
    let cases: [(&str, &[&str], &str); 7] = [
        (
            &config,
            &["--since", "1h", "--aggregate-type", "Nope"],
            "no outbox rows match the selection",
        ),
        (
            &config,
            &["--since", "1h", "--column", "nope"],
            "has no column nope, which --column names",
        ),
        (&retained, &["--since", "2h"], "--since reaches before what [retention] keeps"),
        (&config, &["--id", "not-a-uuid"], "\"not-a-uuid\" is not a UUID"),
        (
            &config,
            &["--since", "2026-12-02", "--until", "2026-12-01"],
            "--until (2026-12-01) is not after --since (2026-12-02)",
        ),
        (&config, &["--since", "1h", "--id", "x"], "select rows two ways at once"),
        (&tableless, &["--since", "1h"], "logical decoding messages (the table-less outbox)"),
    ];
    for (config, args, expect) in cases {
        let run = replay(config, args).await;
        println!("{args:?}: {}", run.stderr.trim());
        assert_eq!(run.code, Some(1), "{args:?}: {run}");
        assert!(run.stderr.contains(expect), "{args:?}: {run}");
        assert!(run.stderr.contains("nothing was sent"), "{args:?}: {run}");
    }
    let sent = kafka::consume_topics(
        services().broker.bootstrap(),
        &[&s.topic("Order"), &s.topic("Payment")],
        1,
        Duration::from_secs(4),
    )
    .await;
    assert!(sent.is_empty(), "a refused replay sent {sent:?}");
}

/// Input that is not a duration, a time or a topic name is refused by the command line (exit 2,
/// as every command's bad input), with the one rule for durations `purge` also gives, before
/// anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_what_is_neither_a_duration_nor_a_time_and_an_illegal_topic_with_exit_2() {
    let s = Setup::new("replayargs").await;
    insert_aged(&s.db, "Order", 3, 30).await;
    let config = s.config();
    for bad in ["5x", "1.5h", "90", "yesterday-ish"] {
        for flag in ["--since", "--until"] {
            let run = replay(&config, &[flag, bad, "--dry-run"]).await;
            println!("{flag} {bad}: {}", run.stderr.trim());
            assert_eq!(run.code, Some(2), "{flag} {bad}: {run}");
            assert!(run.stderr.contains(&format!("{bad:?} is not a duration")), "{run}");
            assert!(run.stderr.contains("RFC 3339"), "{run}");
            assert!(!run.stderr.to_lowercase().contains("datestyle"), "{run}");
        }
    }
    let purge =
        walrelay_async(&["purge", "--older-than", "1.5h", "--dry-run"], Some(&config)).await;
    assert_eq!(purge.code, Some(2), "{purge}");
    assert!(purge.stderr.contains("\"1.5h\" is not a duration"), "{purge}");

    let run = replay(&config, &["--since", "1h", "--to-topic", "bad topic!", "--dry-run"]).await;
    println!("--to-topic 'bad topic!': {}", run.stderr.trim());
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("not a legal Kafka topic name: it contains ' '"), "{run}");
    assert!(!run.stdout.contains("would send"), "{run}");

    let run = replay(&config, &["--since", "1h", "--until", "2h", "--dry-run"]).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("--until (2h ago) is not after --since (1h ago)"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_keeps_to_its_rate_and_prints_progress_lines_off_a_terminal() {
    let s = Setup::new("replayrate").await;
    insert_aged(&s.db, "Order", 3_000, 30).await;
    let side = format!("{}.paced", s.topic_prefix);

    let started = Instant::now();
    let run = replay(&s.config(), &["--since", "1h", "--rate", "1000", "--to-topic", &side]).await;
    let took = started.elapsed();
    assert_eq!(run.code, Some(0), "{run}");
    let progress: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("replay: ")).collect();
    println!(
        "3,000 events at --rate 1000: {} ms\n{}\n{}",
        took.as_millis(),
        run.stdout,
        progress.join("\n")
    );
    // 3,000 at 1,000/s: the last one goes out at 2.999 s; the summary's rate is at most 1,000/s.
    assert!(took >= Duration::from_millis(2_900), "{took:?}");
    let rate: u64 = run
        .stdout
        .lines()
        .find_map(|l| l.split(" s (").nth(1)?.split(' ').next()?.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no rate in {run}"));
    assert!((800..=1_010).contains(&rate), "rate {rate}/s");
    assert!(
        !progress.is_empty()
            && progress.last().unwrap().contains("3,000/3,000 events acknowledged (100%)"),
        "{run}"
    );
    assert_eq!(read_topic(&side, 3_000, Duration::from_secs(60)).await.len(), 3_000);
}

/// Two transactions: A inserts first and commits last, B inserts after A and commits before it.
/// Returns (A's id, B's id).
async fn interleaved(db: &TestDb) -> (String, String) {
    let a_client = db.connect().await;
    let b_client = db.connect().await;
    let insert = "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                  VALUES (gen_random_uuid(), 'Order', 'same', 'T', '{}') RETURNING id::text";
    a_client.batch_execute("BEGIN").await.unwrap();
    let a: String = a_client.query_one(insert, &[]).await.unwrap().get(0);
    tokio::time::sleep(Duration::from_millis(20)).await; // B's created_at is later: now() differs
    let b: String = b_client.query_one(insert, &[]).await.unwrap().get(0);
    a_client.batch_execute("COMMIT").await.unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_goes_in_commit_order_with_track_commit_timestamp_and_by_timestamp_without() {
    let private = tokio::task::spawn_blocking(|| {
        let server = Server::selected().expect("a PostgreSQL server");
        PrivatePostgres::start_on("replaycommit", &server, &[("track_commit_timestamp", "on")])
    })
    .await
    .unwrap();
    for (s, commit_order) in [
        (Setup::on(&private.pg, "replaycommit").await, true),
        (Setup::new("replaystart").await, false),
    ] {
        let (a, b) = interleaved(&s.db).await;
        let side = format!("{}.ordered", s.topic_prefix);
        let run = replay(&s.config(), &["--since", "1h", "--to-topic", &side]).await;
        assert_eq!(run.code, Some(0), "{run}");
        let got = ids(&read_topic(&side, 2, Duration::from_secs(30)).await);
        if commit_order {
            assert!(run.stdout.contains("commit order (track_commit_timestamp is on"), "{run}");
            assert_eq!(got, [b.clone(), a.clone()], "B committed first");
        } else {
            assert!(run.stdout.contains("by created_at, then id"), "{run}");
            assert_eq!(got, [a.clone(), b.clone()], "A was written first");
        }
        println!("commit order {commit_order}: {}", run.stdout.lines().next().unwrap_or(""));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_beside_a_running_relay_leaves_its_slot_and_its_events_alone() {
    let s = Setup::new("replaybeside").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let old = insert_aged(&s.db, "Order", 2_000, 60).await;
    assert_eq!(s.read("Order", 2_000).await.len(), 2_000, "{}", s.diagnostics(&relay));
    let pid = slot_active_pid(&s.db.url, &s.slot).await;

    // New events while the replay runs, one transaction each.
    let writer = {
        let url = s.db.url.clone();
        tokio::spawn(async move {
            let client = connect(&url).await.expect("connect");
            let mut ids = Vec::new();
            for _ in 0..300 {
                let row = client
                    .query_one(
                        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                         VALUES (gen_random_uuid(), 'Order', 'live', 'Live', '{}') RETURNING id::text",
                        &[],
                    )
                    .await
                    .expect("insert");
                ids.push(row.get::<_, String>(0));
            }
            ids
        })
    };
    let run = replay(&s.config(), &["--since", "2h", "--until", "20m", "--rate", "2000"]).await;
    let new = writer.await.unwrap();
    println!("{run}");
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("sent 2,000 events"), "{run}");

    let all = s.read("Order", 4_300).await;
    let again = replayed(&all);
    assert_eq!(again.len(), 2_000);
    let live_ids = ids(&all);
    for id in new.iter().chain(&old) {
        assert!(live_ids.contains(id), "the relay lost {id}");
    }
    assert!(relay.is_running(), "{}", s.diagnostics(&relay));
    assert_eq!(slot_active_pid(&s.db.url, &s.slot).await, pid, "the relay keeps its slot");
    assert_eq!(relay.terminate(), Some(0));
}

/// `walrelay replay` on a pseudo-terminal (util-linux `script`), `answer` typed at the prompt.
fn replay_on_a_terminal(config: &str, args: &str, answer: &str) -> (Option<i32>, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let path = scratch_dir("replaytty").join("walrelay.toml");
    std::fs::write(&path, config).unwrap();
    let bin = crate::support::process::walrelay_bin();
    let command = format!("'{}' replay --config '{}' {args}", bin.display(), path.display());
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script(1)");
    // Typed once the question is up; the terminal keeps it until the replay reads it.
    child.stdin.take().unwrap().write_all(answer.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_on_a_terminal_asks_above_ten_thousand_events_and_draws_a_progress_bar() {
    let s = Setup::new("replaytty").await;
    insert_aged(&s.db, "Order", 10_001, 30).await;
    let config = s.config();
    let args = format!("--since 1h --to-topic {}.tty", s.topic_prefix);

    let (code, out) = tokio::task::spawn_blocking({
        let (config, args) = (config.clone(), args.clone());
        move || replay_on_a_terminal(&config, &args, "n\n")
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("send 10,001 events to Kafka? [y/N]"), "{out}");
    assert!(out.contains("replay cancelled: nothing was sent"), "{out}");

    let (code, out) =
        tokio::task::spawn_blocking(move || replay_on_a_terminal(&config, &args, "y\n"))
            .await
            .unwrap();
    let bar = out.rsplit('\r').find(|l| l.starts_with("[#")).unwrap_or_default().to_string();
    println!("last bar drawn: {bar}");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("[##############################] 100% 10,001/10,001 events"), "{out}");
    assert!(out.contains("sent 10,001 events"), "{out}");
}

/// A window holding a row the router refuses (its aggregate type makes an illegal topic name;
/// the live relay dead-lettered it): `replay --dry-run` and `replay` list it as unroutable and
/// go on with the rest, exit 0 (they stopped at it with exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_over_a_dead_lettered_row_lists_it_as_unroutable_and_sends_the_rest() {
    let s = Setup::new("replaypoison").await;
    let good = s.insert_events("Order", "o-1", 3).await;
    let poison = s.db.insert_outbox("outbox", "Bad Topic", "o-2", "E", Some("{}")).await;
    let config = s.config();
    let dry = replay(&config, &["--since", "1h", "--dry-run"]).await;
    assert_eq!(dry.code, Some(0), "{dry}");
    assert!(dry.stdout.contains("would send 3 events"), "{dry}");
    assert!(dry.stdout.contains(&format!("unroutable {poison}")), "{dry}");
    let sent = replay(&config, &["--since", "1h", "--yes"]).await;
    assert_eq!(sent.code, Some(0), "{sent}");
    assert!(sent.stdout.contains(&format!("unroutable {poison}")), "{sent}");
    let got = read_topic(&s.topic("Order"), 3, Duration::from_secs(30)).await;
    assert_eq!(ids(&got), good, "{sent}");
}
