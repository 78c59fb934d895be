//! What most relay tests share: a database with an outbox table, unique slot, publication and
//! topic names, and the walrelay.toml that ties them to the shared broker.

use std::time::Duration;

use crate::support::kafka::{self, Consumed};
use crate::support::postgres::{Postgres, TestDb};
use crate::support::process::RelayProcess;
use crate::support::slot::wait_inactive;
use crate::support::{services, unique};

pub struct Setup {
    pub db: TestDb,
    pub slot: String,
    pub publication: String,
    /// Prepended to every topic this test's relay writes, so tests never share a topic.
    pub topic_prefix: String,
}

impl Setup {
    pub async fn new(name: &str) -> Setup {
        Setup::on(&services().pg, name).await
    }

    /// Like [`Setup::new`] on another PostgreSQL instance.
    pub async fn on(pg: &Postgres, name: &str) -> Setup {
        let db = pg.create_database(name).await;
        let slot = unique(&format!("{name}_slot"));
        // The slot is created before the table and the publication. On this shared, busy
        // cluster a slot created while other databases' transactions run can start from a
        // snapshot another database's decoding saved, which does not know this database's
        // fresh catalog rows: PostgreSQL 15 then decodes the outbox inserts as belonging to no
        // publication and sends nothing. Catalog changes made after the slot exists are decoded
        // by the slot itself and are always seen. (A deployment creates its table long before
        // walrelay; see the notes in docs/architecture.md.)
        db.connect()
            .await
            .query_one("SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot])
            .await
            .unwrap();
        db.create_outbox("outbox").await;
        Setup { db, slot, publication: unique(&format!("{name}_pub")), topic_prefix: unique(name) }
    }

    /// The topic that rows of `aggregate_type` go to under the default replacement.
    pub fn topic(&self, aggregate_type: &str) -> String {
        format!("{}.outbox.event.{aggregate_type}", self.topic_prefix)
    }

    /// A relay configuration; `router` and `kafka` are extra lines for those sections,
    /// `extra` whole extra sections.
    pub fn config_with(&self, router: &str, kafka: &str, extra: &str) -> String {
        self.config_for_bootstrap(services().broker.bootstrap(), router, kafka, extra)
    }

    pub fn config(&self) -> String {
        self.config_with("", "", "")
    }

    pub fn config_for_bootstrap(
        &self,
        bootstrap: &str,
        router: &str,
        kafka: &str,
        extra: &str,
    ) -> String {
        let router = if router.contains("route.topic.replacement") {
            router.to_string()
        } else {
            format!(
                "\"route.topic.replacement\" = \"{}.outbox.event.${{routedByValue}}\"\n{router}",
                self.topic_prefix
            )
        };
        format!(
            r#"
[source]
url = "{url}"
slot = "{slot}"
publication = "{publication}"
status_interval_ms = 200

[outbox]
table = "public.outbox"

[router]
{router}

[kafka]
"bootstrap.servers" = "{bootstrap}"
"linger.ms" = 5
{kafka}

{extra}
"#,
            url = self.db.url,
            slot = self.slot,
            publication = self.publication,
        )
    }

    pub fn start_relay(&self) -> RelayProcess {
        RelayProcess::start(&self.config())
    }

    /// Starts a relay on `config` and waits until it streams from the slot: a fault injected
    /// after this hits a running session, not a relay still connecting.
    pub async fn start_streaming(&self, config: &str) -> RelayProcess {
        let mut relay = RelayProcess::start(config);
        self.wait_streaming(&mut relay).await;
        relay
    }

    /// Waits until the relay's walsender streams from the slot.
    pub async fn wait_streaming(&self, relay: &mut RelayProcess) {
        let (db, slot) = (&self.db, self.slot.as_str());
        let ok = crate::support::wait_until(
            "relay streams from its slot",
            Duration::from_secs(30),
            || async move { db.slot_active(slot).await == Some(true) },
        )
        .await;
        assert!(ok, "relay never started streaming; its log:\n{}", relay.log());
    }

    /// Inserts `n` rows of `aggregate_type`, one transaction each; returns their ids in order.
    pub async fn insert_events(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        n: usize,
    ) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let payload = format!("{{\"n\": {i}}}");
            ids.push(
                self.db
                    .insert_outbox("outbox", aggregate_type, aggregate_id, "Tested", Some(&payload))
                    .await,
            );
        }
        ids
    }

    pub async fn read(&self, aggregate_type: &str, expected: usize) -> Vec<Consumed> {
        self.read_within(aggregate_type, expected, Duration::from_secs(60)).await
    }

    /// For "nothing more arrives" checks: a short deadline, since the wait is the assertion.
    pub async fn read_within(
        &self,
        aggregate_type: &str,
        expected: usize,
        deadline: Duration,
    ) -> Vec<Consumed> {
        let (bootstrap, topic) = (services().broker.bootstrap(), self.topic(aggregate_type));
        let got = kafka::consume(bootstrap, &topic, expected, deadline).await;
        if got.len() < expected {
            // What the broker holds tells records never written from records a reader missed.
            let holdings = kafka::holdings(bootstrap, &topic);
            eprintln!("[support] read {topic}: {} of {expected}; {holdings}", got.len());
        }
        got
    }

    /// Reads `aggregate_type`'s topic until every event of `ids` arrived (at-least-once may
    /// add copies, which a count would take for the rest) or 60 s passed; every record read.
    pub async fn read_ids(&self, aggregate_type: &str, ids: &[String]) -> Vec<Consumed> {
        let mut left: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        let mut got = Vec::new();
        let topic = self.topic(aggregate_type);
        let bootstrap = services().broker.bootstrap();
        kafka::consume_while(bootstrap, &[topic], Duration::from_secs(60), |next| {
            if let kafka::Next::Record(r) = next {
                left.remove(r.event_id().unwrap_or_default().as_str());
                got.push(r);
            }
            !left.is_empty()
        })
        .await;
        got
    }

    /// How many relations the test's publication sends (`pg_publication_tables`).
    pub async fn published_tables(&self) -> i64 {
        self.db
            .connect()
            .await
            .query_one(
                "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The pgoutput bytes of every change the slot would still send (a peek consumes nothing;
    /// the slot must be inactive).
    pub async fn slot_pending(&self) -> Vec<Vec<u8>> {
        let sql = format!(
            "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', '{}')",
            self.publication
        );
        let rows = self.db.connect().await.query(&sql, &[&self.slot]).await.unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    /// Whether the slot still holds a change whose bytes contain `needle` (an event id, say).
    pub async fn slot_holds(&self, needle: &str) -> bool {
        let pending = self.slot_pending().await;
        pending.iter().any(|d| d.windows(needle.len()).any(|w| w == needle.as_bytes()))
    }

    /// The relay's log and the end of PostgreSQL's, for assertion messages.
    pub fn diagnostics(&self, relay: &RelayProcess) -> String {
        let pg = services().pg.log();
        let lines: Vec<&str> = pg.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        let kafka =
            crate::support::kafka::holdings(services().broker.bootstrap(), &self.topic_prefix);
        format!("{kafka}\nrelay log:\n{}\n--- postgres log tail ---\n{tail}", relay.log())
    }
}

/// The `id` header of each record, in order.
pub fn ids(records: &[Consumed]) -> Vec<String> {
    records.iter().map(|r| r.header_str("id").unwrap_or("<no id header>").to_string()).collect()
}

/// A range-partitioned outbox named `outbox` (replacing Setup's plain one) with an old
/// partition (2025) and a current one (2026–2027).
pub async fn partitioned_outbox(s: &Setup) {
    s.db.execute(
        "DROP TABLE outbox;
         CREATE TABLE outbox (
           id uuid NOT NULL,
           aggregatetype varchar(255) NOT NULL,
           aggregateid varchar(255) NOT NULL,
           type varchar(255) NOT NULL,
           payload jsonb,
           created_at timestamptz NOT NULL DEFAULT now(),
           PRIMARY KEY (id, created_at)
         ) PARTITION BY RANGE (created_at);
         CREATE TABLE outbox_2025 PARTITION OF outbox FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         CREATE TABLE outbox_now PARTITION OF outbox FOR VALUES FROM ('2026-01-01') TO ('2028-01-01');",
    )
    .await;
}

/// Drops the test's slot once nothing streams from it: the shared PostgreSQL has one
/// `max_replication_slots` (`support::postgres::SETTINGS`) for the whole suite, and other tests
/// keep theirs.
pub async fn release_slot(s: &Setup) {
    let inactive = wait_inactive(&s.db.url, &s.slot, Duration::from_secs(15)).await;
    if inactive {
        let _ =
            s.db.connect().await.query_one("SELECT pg_drop_replication_slot($1)", &[&s.slot]).await;
    }
}
