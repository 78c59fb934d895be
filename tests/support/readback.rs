//! Reading back what the fault tests' writers committed, and judging it: the phase that shows a
//! relay delivers before a fault is injected, the read-back after the fault, and the one failure
//! message for lost or reordered events, so every fault test reports the same diagnostics.

use std::collections::HashSet;
use std::time::Duration;

use super::process::RelayProcess;
use super::writer::{
    collect_deliveries, verify, Delivered, Event, Verdict, Writer, WriterConfig, WriterReport,
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
    let events: Vec<Event> = reports.iter().flat_map(|r| r.events.iter().cloned()).collect();
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries(bootstrap, topics, &want, quiet, deadline).await;
    let mut verdict = verify(&events, &got);
    if verdict.lost > 0 {
        let look = second_look(bootstrap, topics, &events, &got).await;
        // A librdkafka client made just after its broker came back can sit without a broker
        // for minutes (see kafka.rs), while one made now reads everything: what a new reader
        // finds from offset 0 is what the broker holds, and that is what is judged.
        let again = collect_deliveries(bootstrap, topics, &want, quiet, deadline / 2).await;
        let second = verify(&events, &again);
        if second.lost < verdict.lost {
            eprintln!(
                "[support] read_back: the first reader came up {} short; a new reader from offset 0 found all but {}: {look}",
                verdict.lost, second.lost
            );
            let mut second = second;
            second.second_look =
                Some(format!("the first reader missed {} records; {look}", verdict.lost));
            return ReadBack { events, got: again, verdict: second };
        }
        verdict.second_look = Some(look);
    }
    ReadBack { events, got, verdict }
}

/// Reads `topics` again with a new reader and says how many of the events missing from `got` it
/// found and where: a reader that missed records, or records that never reached Kafka.
async fn second_look(
    bootstrap: &str,
    topics: &[String],
    events: &[Event],
    got: &[Delivered],
) -> String {
    let seen: HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    let lost: HashSet<String> =
        events.iter().filter(|e| !seen.contains(e.id.as_str())).map(|e| e.id.clone()).collect();
    let again =
        collect_deliveries(bootstrap, topics, &lost, Duration::ZERO, Duration::from_secs(30)).await;
    let found: Vec<&Delivered> = again.iter().filter(|d| lost.contains(&d.id)).collect();
    let found_n = found.iter().map(|d| &d.id).collect::<HashSet<_>>().len();
    let found: Vec<String> = found
        .iter()
        .take(20)
        .map(|d| format!("{} at {}/{}", d.id, d.partition, d.offset))
        .collect();
    // Where the lost events' aggregates start in Kafka: the first offset read of each.
    let lost_aggregates: HashSet<&str> =
        events.iter().filter(|e| lost.contains(&e.id)).map(|e| e.aggregate.as_str()).collect();
    let mut starts: Vec<String> = lost_aggregates
        .iter()
        .filter_map(|a| {
            let first = again.iter().filter(|d| d.aggregate == *a).min_by_key(|d| d.offset)?;
            Some(format!("{a} first read at {}/{} (#{})", first.partition, first.offset, first.seq))
        })
        .collect();
    starts.sort();
    format!(
        "a reader assigned every partition from offset 0 read {} records and found {found_n} of the {} lost{}; {starts:?}",
        again.len(),
        lost.len(),
        if found.is_empty() { String::new() } else { format!(": {found:?}") }
    )
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
