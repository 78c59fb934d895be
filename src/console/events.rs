//! `/api/v1/events/<id>`: where one event is ([`crate::audit::lookup`]), as JSON, behind the
//! lookups' rate limit and one at a time: each costs a PostgreSQL query and a Kafka read.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::{json, Value};

use super::{error, ok, percent_decode, Console};
use crate::audit::lookup::{Lookup, Outcome};
use crate::audit::ReadFrom;
use crate::duration::rfc3339;
use crate::http::Reply;

/// How long a lookup may take: within the endpoint's connection timeout (10 s).
const WITHIN: Duration = Duration::from_secs(8);
/// Lookups at once, then one more every [`EVERY`]: an operator pasting ids never meets the
/// bound, a script looping over them does.
pub(super) const BURST: u32 = 5;
pub(super) const EVERY: Duration = Duration::from_secs(2);

impl Console {
    /// `GET /api/v1/events/<id>`: `raw` is the path's last part, still percent-encoded.
    pub(super) async fn lookup(&self, raw: &str) -> Reply {
        let id = percent_decode(raw);
        let Some(id) =
            id.filter(|i| !i.is_empty() && i.len() <= 200 && !i.chars().any(char::is_control))
        else {
            return error(StatusCode::BAD_REQUEST, "not an event id: give the id as it is in the outbox table (at most 200 characters)");
        };
        if let Err(wait) = self.lookup_rate.take() {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "at most {BURST} lookups at once, then one every {} s: try again in {secs} s",
                    EVERY.as_secs()
                ),
            );
            r.headers_mut().insert(hyper::header::RETRY_AFTER, secs.into());
            return r;
        }
        let Ok(_one) = tokio::time::timeout(WITHIN, self.lookups.acquire()).await else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "another lookup is running: try again in a few seconds",
            );
        };
        let looked =
            tokio::time::timeout(WITHIN, crate::audit::lookup::lookup(&self.config, &id, WITHIN))
                .await;
        match looked {
            Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, &format!("the lookup took longer than {} s", WITHIN.as_secs())),
            Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, &e.chain()),
            Ok(Ok(Outcome::NotAnId(why))) => error(StatusCode::BAD_REQUEST, &why),
            Ok(Ok(Outcome::Absent)) => error(StatusCode::NOT_FOUND, &format!("event {id} is in no outbox table (purged by retention, never committed, or a logical message, which no table keeps)")),
            Ok(Ok(Outcome::Unroutable { id, table, reason })) => ok(self.unroutable(id, table, reason)),
            Ok(Ok(Outcome::Routed(found))) => ok(self.routed(found)),
        }
    }

    /// What the lookup knows of an event it found in Kafka or not.
    fn routed(&self, found: Lookup) -> Value {
        // Confirmed once the slot passed its commit: compared by commit time, which replay
        // reads exactly with track_commit_timestamp on. Without it: an event in Kafka while
        // the relay has nothing read and unconfirmed was confirmed with what it read.
        let positions = self.metrics.positions();
        let caught_up = positions.oldest_unconfirmed_commit.is_none()
            && positions.last_confirmed_commit.is_some();
        let confirmed = match (found.exact, positions.last_confirmed_commit) {
            (true, Some(last)) => Value::Bool(found.commit_micros <= last),
            _ if found.found.is_some() && caught_up => Value::Bool(true),
            _ => Value::Null,
        };
        // `kafka` is where the sink holds it (`in` names what was read: Kafka or JetStream);
        // `found` is null when the sink's messages cannot be read back, so nothing is known.
        let kafka = match (&found.found, found.read_from.map(ReadFrom::name)) {
            (Some(f), read_from) => json!({
                "found": true,
                "in": read_from,
                "topic": found.topic,
                "partition": f.partition,
                "offset": f.offset,
                "timestamp": f.timestamp_ms.map(|ms| rfc3339(ms * 1000)),
            }),
            (None, Some(read_from)) => {
                json!({ "found": false, "in": read_from, "searched": found.searched })
            }
            (None, None) => json!({
                "found": null,
                "in": self.config.delivery.sink.name(),
                "searched": found.searched,
            }),
        };
        let note = (!found.exact && confirmed.is_null()).then_some("the commit time is the row's timestamp column (track_commit_timestamp is off), and the relay has events not yet confirmed: whether this one is, is not known");
        json!({
            "id": found.id,
            "row": { "table": found.table, "created": rfc3339(found.commit_micros) },
            "expected": { "topic": found.topic, "partition": found.partition, "key": found.key },
            "unroutable": null,
            "kafka": kafka,
            "confirmed": confirmed,
            "note": note,
        })
    }

    /// What the lookup knows of an event whose row the router refuses: its table, why, and
    /// where the live relay put it instead (no topic is searched: it routes to none).
    fn unroutable(&self, id: String, table: String, reason: String) -> Value {
        let dead_letter = self.config.dead_letter.as_ref().map(|d| d.topic.clone());
        let note = match &dead_letter {
            Some(topic) => format!("the router refuses this row, so the relay dead-lettered it to {topic} with this reason; replay and the audit list it as unroutable"),
            None => "the router refuses this row, and without [dead_letter] the relay stops at it: fix the row or the router, as its log says".to_string(),
        };
        json!({
            "id": id,
            "row": { "table": table, "created": null },
            "expected": null,
            "unroutable": { "reason": reason, "dead_letter_topic": dead_letter },
            "kafka": null,
            "confirmed": null,
            "note": note,
        })
    }
}
