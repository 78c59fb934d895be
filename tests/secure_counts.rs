//! What the relay counts on the SASL_SSL node (support::secure_kafka): a record the broker
//! refuses for its size is dead-lettered and counted where it went, not where it was refused.

use std::time::Duration;

use crate::common::Setup;
use crate::kafka_security::{assert_no_password, relay_acls};
use crate::support::process::{http_get, metric, RelayProcess};
use crate::support::secure_kafka::{SecureKafka, RELAY};
use crate::support::{free_port, wait_until};

/// A record the broker refuses for its size (the topic's `max.message.bytes`) is dead-lettered
/// on the SASL_SSL node and counted where it went: `walrelay_records_published_total` of the
/// topic that refused it counts only what that topic holds, the dead-letter topic's counts the
/// dead letter, and `walrelay_table_events_total` leaves it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_record_is_counted_on_the_dead_letter_topic_not_on_the_one_that_refused_it()
{
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_counts").await;
    let (topic, dead) = (s.topic("Order"), format!("{}_dead_letters", s.topic_prefix));
    let small_topic = [("max.message.bytes", "2048")];
    crate::support::kafka::create_topic_with(
        kafka.plaintext_bootstrap(),
        &topic,
        1,
        1,
        &small_topic,
    )
    .await;
    kafka.create_topic(&dead, 1).await;
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    kafka.wait_visible(RELAY, &[&topic, &dead]).await;
    let port = free_port();
    let extra =
        format!("[dead_letter]\ntopic = \"{dead}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n");
    // The broker refuses a whole batch over max.message.bytes: one record a batch.
    let security = format!("{}\"batch.size\" = 2048\n", kafka.kafka_toml(RELAY));
    let mut relay =
        RelayProcess::start(&s.config_for_bootstrap(&kafka.bootstrap(), "", &security, &extra));
    s.wait_streaming(&mut relay).await;
    let big = format!("{{\"blob\": \"{}\"}}", "y".repeat(4096));
    s.db.insert_outbox("outbox", "Order", "o-1", "E", Some(&big)).await;
    s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{}")).await;
    let held = kafka.consume(&[&topic], 1, Duration::from_secs(60)).await;
    let letters = kafka.consume(&[&dead], 1, Duration::from_secs(30)).await;
    let series = |t: &str| format!("walrelay_records_published_total{{topic=\"{t}\"}}");
    let (routed, dead_series) = (series(&topic), series(&dead));
    let (r, d) = (routed.as_str(), dead_series.as_str());
    let counted =
        wait_until("the dead letter is counted", Duration::from_secs(15), || async move {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            metric(&text, d) == Some(1.0) && metric(&text, r) == Some(1.0)
        })
        .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("walrelay_records_published_total")
                || l.starts_with("walrelay_dead_lettered_total")
                || l.starts_with("walrelay_table_events_total")
        })
        .collect();
    println!("{} held by {topic}, {} dead letter(s); {lines:?}", held.len(), letters.len());
    assert_eq!((held.len(), letters.len()), (1, 1), "{}", relay.log());
    assert!(counted, "{lines:?}");
    assert_eq!(metric(&text, "walrelay_dead_lettered_total"), Some(1.0));
    let table = "walrelay_table_events_total{table=\"public.outbox\"}";
    assert_eq!(metric(&text, table), Some(1.0), "{lines:?}");
    let ready = http_get(port, "/readyz").await.unwrap_or_default();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert_no_password(&relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}
