//! Reading back what the fault tests' writers committed, and judging it: the phase that shows a
//! relay delivers before a fault is injected, the read-back after the fault, and the one failure
//! message for lost or reordered events, so every fault test reports the same diagnostics.

use std::collections::HashSet;
use std::time::Duration;

use super::kafka::Join;
use super::process::RelayProcess;
use super::writer::{
    collect_deliveries, collect_deliveries_by, verify, Delivered, Event, Verdict, Writer,
    WriterConfig, WriterReport,
};

/// How long a read-back after a fault goes on past the last wanted record: a relay that
/// replays after a fault can deliver duplicates after the last new event, and they count.
pub const QUIET: Duration = Duration::from_millis(500);

/// What a read-back found: the events the writers committed (in report order), every delivery
/// read from Kafka (duplicates included) and the verdict on them.
pub struct ReadBack {
    pub events: Vec<Event>,
    pub got: Vec<Delivered>,
    pub verdict: Verdict,
}

/// Reads `topics` until every event of `reports` arrived and then `quiet` more without a new
/// record (trailing duplicates count too), or until `deadline`; judges what arrived against
/// everything the reports committed together.
pub async fn read_back(
    bootstrap: &str,
    topics: &[String],
    reports: &[&WriterReport],
    quiet: Duration,
    deadline: Duration,
) -> ReadBack {
    read_back_by(Join::for_broker(), bootstrap, topics, reports, quiet, deadline).await
}

/// [`read_back`], the reader joining as `join` says.
pub async fn read_back_by(
    join: Join,
    bootstrap: &str,
    topics: &[String],
    reports: &[&WriterReport],
    quiet: Duration,
    deadline: Duration,
) -> ReadBack {
    let events: Vec<Event> = reports.iter().flat_map(|r| r.events.iter().cloned()).collect();
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries_by(join, bootstrap, topics, &want, quiet, deadline).await;
    let verdict = verify(&events, &got);
    ReadBack { events, got, verdict }
}

/// Runs `cfg`'s writer to its `max_events` and asserts that all of it reached Kafka in order
/// within 30 s. The phase before a fault: the fault then hits a relay known to be delivering,
/// so a later loss is the fault's and not a relay that never started.
pub async fn write_and_await_delivery(
    bootstrap: &str,
    cfg: WriterConfig,
    relay: &RelayProcess,
) -> WriterReport {
    let topics = cfg.topics();
    let report = Writer::spawn(cfg).join().await;
    let got = collect_deliveries(
        bootstrap,
        &topics,
        &report.ids(),
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .await;
    assert_no_loss_in_order(&verify(&report.events, &got), &relay.log());
    report
}

/// Panics unless every committed event arrived, each aggregate in commit order and nothing
/// unexpected: with the counts, the lost ids, the reordered aggregates and `context` (the relay's
/// log, server logs: whatever tells the cause).
#[track_caller]
pub fn assert_no_loss_in_order(v: &Verdict, context: &str) {
    assert!(
        v.ok(),
        "{}\nlost: {:?}\nreordered: {:?}\n{context}",
        v.summary(),
        v.lost_ids,
        v.reordered_detail
    );
}
