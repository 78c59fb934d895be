//! Deploying as docs/operations.md says: a publication created ahead of its slot draws no
//! warning from `check` or from the first start, while a slot lost later is named as a loss; and
//! `teardown` of one relay's slot keeps the publication another relay's slot decodes with.

use std::time::Duration;

use crate::common::Setup;
use crate::support::process::{walrelay_async, RelayProcess};
use crate::support::unique;

/// The `CREATE PUBLICATION` statement operations.md's Deploying section recommends, for
/// `publication`.
fn documented_publication(publication: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("CREATE PUBLICATION walrelay FOR TABLE public.outbox"))
        .expect("operations.md recommends a CREATE PUBLICATION");
    line.replace("CREATE PUBLICATION walrelay", &format!("CREATE PUBLICATION \"{publication}\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_created_as_operations_md_recommends_draws_no_warning_but_a_lost_slot_does() {
    let s = Setup::new("deploy_ahead").await;
    // The relay creates its slot itself, as a first deployment does.
    s.db.execute(&format!("SELECT pg_drop_replication_slot('{}')", s.slot)).await;
    let sql = documented_publication(&s.publication);
    s.db.execute(&sql).await;

    let check = walrelay_async(&["check"], Some(&s.config())).await;
    let publication: Vec<&str> = check
        .stdout
        .lines()
        .filter(|l| l.contains(&format!("publication {}", s.publication)))
        .collect();
    println!("check after `{sql}`:\n{}", publication.join("\n"));
    assert!(!publication.is_empty(), "{check}");
    assert!(publication.iter().all(|l| l.starts_with("ok ")), "{check}");

    let mut relay = RelayProcess::start(&s.config());
    // The slot reads as active while the relay's replication connection creates it, before the
    // relay says what it created: wait for the saying.
    let said = relay.wait_for_log("created ahead of it", Duration::from_secs(30)).await;
    s.wait_streaming(&mut relay).await;
    let first = relay.log();
    assert!(said, "{first}");
    assert_eq!(relay.terminate(), Some(0), "{first}");
    let warned: Vec<&str> = first.lines().filter(|l| l.contains(" WARN ")).collect();
    println!(
        "first start: {} WARN line(s); {}",
        warned.len(),
        first.lines().find(|l| l.contains("created ahead")).unwrap_or("-")
    );
    assert!(warned.is_empty(), "{first}");
    assert!(first.contains("for a publication created ahead of it"), "{first}");

    // The slot is lost (dropped while no relay runs): the next start names the loss.
    s.db.execute(&format!("SELECT pg_drop_replication_slot('{}')", s.slot)).await;
    let mut relay = RelayProcess::start(&s.config());
    let named = relay.wait_for_log("created replication slot again", Duration::from_secs(30)).await;
    let line = relay.log().lines().find(|l| l.contains("again")).unwrap_or_default().to_string();
    println!("after the slot was lost: {line}");
    assert!(named && line.contains(" WARN ") && line.contains("walrelay audit"), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_of_one_relays_slot_keeps_the_publication_another_relays_slot_decodes_with() {
    let s = Setup::new("deploy_two").await;
    // Two relays, one publication: each records its slot in the publication as it starts.
    let second = unique("deploy_two_slot");
    let config_b =
        s.config().replace(&format!("slot = \"{}\"", s.slot), &format!("slot = \"{second}\""));
    for config in [s.config(), config_b.clone()] {
        let run = walrelay_async(&["setup"], Some(&config)).await;
        assert_eq!(run.code, Some(0), "{run}");
    }

    let preview = walrelay_async(&["teardown"], Some(&config_b)).await;
    println!("teardown without --yes: {}", preview.stdout.trim());
    assert!(
        preview.stdout.contains(&format!("publication {} is kept", s.publication)),
        "{preview}"
    );
    let run = walrelay_async(&["teardown", "--yes"], Some(&config_b)).await;
    println!("teardown --yes of the second slot: {}", run.stdout.trim());
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(&format!("dropped replication slot {second}")), "{run}");
    assert!(run.stdout.contains(&format!("kept publication {}", s.publication)), "{run}");
    assert!(run.stdout.contains(&s.slot), "the slot that keeps it is not named: {run}");
    let kept: i64 =
        s.db.connect()
            .await
            .query_one("SELECT count(*) FROM pg_publication WHERE pubname = $1", &[&s.publication])
            .await
            .unwrap()
            .get(0);
    assert_eq!(kept, 1);

    // The last relay's teardown drops it.
    let run = walrelay_async(&["teardown", "--yes"], Some(&s.config())).await;
    println!("teardown --yes of the first slot: {}", run.stdout.trim());
    assert!(run.stdout.contains(&format!("dropped publication {}", s.publication)), "{run}");
}
