//! The audit `walrelay run` makes on its own (`[audit]`): its counts reach `/metrics`, a loss
//! shows as missing, and the row of a transaction that stayed open across audits is still
//! judged.

use super::*;

/// `[audit]` inside `walrelay run`: the relay audits its trailing window every 2 s, the last
/// audit's counts reach `/metrics`, and events a skipped slot lost show there as missing, with a
/// warning in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_inside_run_exports_the_last_audits_counts_and_a_loss_as_missing() {
    use crate::support::process::{http_get, metric};
    let s = Setup::new("audit_in_run").await;
    let port = crate::support::free_port();
    let extra = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\n[audit]\ninterval = \"2s\"\nwindow = \"1h\"\nsettle = \"0s\"\n"
    );
    let config = s.config_with("", "", &extra);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 30).await;
    assert!(s.read_ids("Order", &written).await.len() >= 30, "{}", relay.log());
    let gauge = |text: &str, result: &str| {
        metric(text, &format!("walrelay_audit_events{{result=\"{result}\"}}")).unwrap_or(-1.0)
    };
    let counted =
        crate::support::wait_until("an audit counts the 30", Duration::from_secs(30), || async {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            gauge(&text, "delivered_once") + gauge(&text, "duplicated") == 30.0
        })
        .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(
        counted,
        "{}\n{}",
        text.lines().filter(|l| l.contains("audit")).collect::<Vec<_>>().join("\n"),
        relay.log()
    );
    assert_eq!(metric(&text, "walrelay_audit_interval_seconds"), Some(2.0), "{text}");
    assert!(metric(&text, "walrelay_audit_last_success_seconds").unwrap_or(0.0) > 0.0, "{text}");

    let lost = lose(&s, relay, 20).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let missing = crate::support::wait_until(
        "an audit counts the 20 missing",
        Duration::from_secs(30),
        || async {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            gauge(&text, "missing") == 20.0
        },
    )
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(
        missing,
        "lost {}: {}\n{}",
        lost.len(),
        text.lines().filter(|l| l.contains("audit")).collect::<Vec<_>>().join("\n"),
        relay.log()
    );
    let log = relay.log();
    assert!(log.contains("audit: the last 1h is not clean"), "{log}");
    assert!(
        log.contains(&lost[0]) || lost.iter().any(|id| log.contains(id.as_str())),
        "the warning names a lost event: {log}"
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    crate::common::release_slot(&s).await;
}

/// `[audit]` every second over a 3 s window: a transaction that stays open across several
/// audits writes a row whose timestamp (its start) is older than any window when it commits.
/// The in-run audit still judges it (it reaches back to the transactions it saw open), where it
/// used to fall between windows and never be judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_inside_run_judges_the_row_of_a_transaction_committed_long_after_it_began() {
    use crate::support::process::{http_get, metric};
    let s = Setup::new("audit_long_txn").await;
    let port = crate::support::free_port();
    let extra = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\n[audit]\ninterval = \"1s\"\nwindow = \"3s\"\nsettle = \"1s\"\n"
    );
    let config = s.config_with("", "", &extra);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let last_audit = || async {
        let text = http_get(port, "/metrics").await.unwrap_or_default();
        metric(&text, "walrelay_audit_last_success_seconds").unwrap_or(0.0)
    };
    let ran = crate::support::wait_until("a first audit runs", Duration::from_secs(30), || async {
        last_audit().await > 0.0
    })
    .await;
    assert!(ran, "no audit ran: {}", relay.log());
    let client = s.db.connect().await;
    client.batch_execute("BEGIN").await.unwrap();
    let row = client
        .query_one(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'Order', 'o-1', 'Late', '{}') RETURNING id::text",
            &[],
        )
        .await
        .unwrap();
    let id: String = row.get(0);
    // Open across audits that finish 6 s apart: the row's timestamp is older than the window.
    let began = last_audit().await;
    let later = crate::support::wait_until(
        "audits run while it is open",
        Duration::from_secs(30),
        || async { last_audit().await >= began + 6.0 },
    )
    .await;
    assert!(later, "no audit ran: {}", relay.log());
    client.batch_execute("COMMIT").await.unwrap();
    assert!(!s.read_ids("Order", std::slice::from_ref(&id)).await.is_empty(), "{}", relay.log());
    let judged = crate::support::wait_until(
        "an audit judges the late row",
        Duration::from_secs(30),
        || async {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            metric(&text, "walrelay_audit_events{result=\"delivered_once\"}") == Some(1.0)
        },
    )
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    let audits: Vec<&str> = text.lines().filter(|l| l.starts_with("walrelay_audit")).collect();
    assert!(judged, "{id} was never judged: {audits:#?}\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    crate::common::release_slot(&s).await;
}
