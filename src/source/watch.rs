//! The catalog watch: while a session streams, what the stream depends on is checked again and
//! again — the publication (same OID, still publishing INSERTs, still carrying every outbox
//! table) and the outbox tables (same OIDs) — and each check vouches for a WAL position.
//!
//! Why: when the publication is dropped, or an outbox table leaves it, PostgreSQL 18's pgoutput
//! logs a WARNING and simply stops sending those rows (earlier versions raise an error on the
//! stream). Keepalives then carry the position on past rows that were never sent, and confirming
//! that position would lose them without a trace. So the relay never confirms beyond the position
//! the last successful check vouched for ([`Vouched`]): a check reads the WAL position first and
//! the catalog after it, and the catalog unchanged since the session started means every change
//! before that position was decoded under the same publication and tables. A failed check ends
//! the session with a definite error that says what changed.
//!
//! Checks run every few seconds, and at once (at most every [`MIN_SPACING`]) when the relay has
//! acknowledged more than the last check vouched for, so confirmation trails acknowledgement by
//! one check's round trip.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use super::catalog::OutboxTable;
use super::error::classify_pg;
use super::slot::SERVER_LSN;
use super::tenants::{self, Trigger};
use crate::config::TableName;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// Checks run at least this often while the relay has nothing new to confirm.
pub const EVERY: Duration = Duration::from_secs(5);
/// And at most this often when it has.
pub const MIN_SPACING: Duration = Duration::from_millis(100);

/// The highest WAL position a check vouched for (only grows).
pub type Vouched = watch::Receiver<Lsn>;

/// What the stream depends on, as the catalog has it. Two checks that read the same
/// fingerprint saw the same publication and tables (dropping and recreating any of them, or
/// removing a table and adding it back, changes an OID).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    publication: u32,
    insert: bool,
    via_root: bool,
    all_tables: bool,
    /// `pg_publication_rel` rows of outbox tables, `pg_publication_namespace` rows of their
    /// schemas (PostgreSQL 15+).
    memberships: Vec<u32>,
    /// Outbox tables that exist (a rename keeps the OID, and the fingerprint).
    tables: Vec<u32>,
}

/// The tenants' tables as the last check saw them, so each change is said once: a table the
/// publication does not carry (its rows are not relayed), a table dropped, the event trigger
/// gone, disabled or stale (said as [`tenants::not_guaranteed`] says it everywhere).
#[derive(Default)]
struct Tenants {
    seen: Option<BTreeMap<u32, (TableName, bool)>>,
    trigger: Option<Trigger>,
    checked: Option<Instant>,
}

impl Tenants {
    /// Whether the tenants are due for a check: every [`EVERY`], not at each ask (the list of
    /// a thousand tables is not needed to confirm a position).
    fn due(&self) -> bool {
        self.checked.is_none_or(|at| at.elapsed() >= EVERY)
    }

    fn said(&mut self, now: BTreeMap<u32, (TableName, bool)>, trigger: Trigger, publication: &str) {
        self.checked = Some(Instant::now());
        let before = self.seen.take().unwrap_or_default();
        for (oid, (name, carried)) in &now {
            let was_carried = before.get(oid).map(|(_, c)| *c);
            if !carried && was_carried != Some(false) {
                tenants::warn_uncovered(publication, name);
            }
        }
        for (oid, (name, _)) in &before {
            if !now.contains_key(oid) {
                tracing::warn!(table = %name,
                    "a tenant's outbox table was dropped: its rows committed before the drop are relayed, and the other tenants go on");
            }
        }
        // The session's start said the state it found; the watch says each change from it.
        if self.trigger.is_some_and(|was| was != trigger) {
            if let Some(problem) = trigger.problem(publication) {
                tenants::warn_not_guaranteed(publication, &problem);
            }
        }
        self.seen = Some(now);
        self.trigger = Some(trigger);
    }
}

/// The handles a session keeps: ask for a check now, and read what the checks vouched for.
pub struct Watch {
    pub vouched: Vouched,
    pub ask: Arc<Notify>,
    pub task: tokio::task::JoinHandle<Error>,
}

/// Starts watching. `since` is the slot's confirmed position: vouched for until the first
/// check says more. The task ends only with the error that ends the session.
pub fn start(
    client: Arc<Client>,
    publication: String,
    tables: Vec<OutboxTable>,
    patterns: Option<String>,
    since: Lsn,
    timeout: Duration,
    version_num: i32,
) -> Watch {
    let (tx, vouched) = watch::channel(since);
    let ask = Arc::new(Notify::new());
    let asked = ask.clone();
    let task = tokio::spawn(async move {
        let checker = Checker { client, publication, tables, patterns, timeout, version_num };
        match checker.run(&tx, &asked).await {
            Err(e) => e,
            Ok(never) => match never {},
        }
    });
    Watch { vouched, ask, task }
}

struct Checker {
    client: Arc<Client>,
    publication: String,
    /// The tables by name: the fingerprint's.
    tables: Vec<OutboxTable>,
    /// `[outbox] tables` patterns as PostgreSQL matches them
    /// ([`crate::config::OutboxConfig::pattern_regex`]), for the tenants' tables ([`Tenants`]).
    patterns: Option<String>,
    timeout: Duration,
    version_num: i32,
}

impl Checker {
    async fn run(
        &self,
        vouched: &watch::Sender<Lsn>,
        ask: &Notify,
    ) -> Result<std::convert::Infallible> {
        let mut baseline: Option<Fingerprint> = None;
        let mut renamed: Vec<u32> = Vec::new();
        let mut seen = Tenants::default();
        loop {
            // The position first: everything before it was decoded under the catalog the
            // following statement reads, unless that catalog differs from the baseline.
            let lsn: Lsn = self
                .one_row(
                    "cannot read the server's WAL position",
                    &format!("SELECT {SERVER_LSN}"),
                    &[],
                )
                .await?
                .get(0);
            let (now, names) = self.fingerprint().await?;
            self.covered(&now)?;
            match &baseline {
                None => baseline = Some(now.clone()),
                Some(first) if *first != now => {
                    return Err(changed(first, &now, &self.publication))
                }
                Some(_) => {}
            }
            for (oid, name) in &names {
                let configured = self.tables.iter().find(|t| t.oid == *oid).map(|t| &t.name);
                if configured.is_some_and(|c| c != name) && !renamed.contains(oid) {
                    renamed.push(*oid);
                    tracing::warn!(table = %configured.expect("checked"), now = %name,
                        "the outbox table was renamed; its rows are still relayed (by OID) — rename it in [outbox] before walrelay restarts");
                }
            }
            if let Some(regex) = self.patterns.as_deref().filter(|_| seen.due()) {
                let (now, trigger) = self.tenants(regex).await?;
                seen.said(now, trigger, &self.publication);
            }
            vouched.send_if_modified(|v| {
                let grew = lsn > *v;
                *v = (*v).max(lsn);
                grew
            });
            tokio::select! {
                _ = tokio::time::sleep(EVERY) => {}
                _ = ask.notified() => tokio::time::sleep(MIN_SPACING).await,
            }
        }
    }

    /// The fingerprint, and the outbox tables' current names.
    async fn fingerprint(&self) -> Result<(Fingerprint, Vec<(u32, TableName)>)> {
        let oids: Vec<u32> = self.tables.iter().map(|t| t.oid).collect();
        let namespaces = if self.version_num >= 150000 {
            "ARRAY(SELECT pn.oid FROM pg_catalog.pg_publication_namespace pn \
             WHERE pn.pnpubid = p.oid AND pn.pnnspid IN \
             (SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = ANY($2)) ORDER BY pn.oid)"
        } else {
            "ARRAY[]::oid[]"
        };
        let row = self
            .client_query_opt(
                &format!(
                    "SELECT p.oid, p.pubinsert, p.pubviaroot, p.puballtables, \
                     ARRAY(SELECT pr.oid FROM pg_catalog.pg_publication_rel pr \
                           WHERE pr.prpubid = p.oid AND pr.prrelid = ANY($2) ORDER BY pr.oid) \
                     || {namespaces} \
                     FROM pg_catalog.pg_publication p WHERE p.pubname = $1"
                ),
                &[&self.publication, &oids],
            )
            .await?;
        let Some(row) = row else {
            return Err(Error::definite(
                format!("publication {} was dropped while walrelay was running", self.publication),
                "changes written while it was missing were not decoded: recreate the publication, move the slot past the gap (pg_replication_slot_advance) or create a new slot, and reconcile the outbox rows of the gap with Kafka; walrelay confirmed nothing after the drop",
            ));
        };
        let rows = self
            .query(
                "cannot check the outbox tables",
                "SELECT c.oid, n.nspname::text, c.relname::text FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY($1) ORDER BY c.oid",
                &[&oids],
            )
            .await?;
        let names: Vec<(u32, TableName)> = rows
            .iter()
            .map(|r| (r.get(0), TableName { schema: r.get(1), name: r.get(2) }))
            .collect();
        let fingerprint = Fingerprint {
            publication: row.get(0),
            insert: row.get(1),
            via_root: row.get(2),
            all_tables: row.get(3),
            memberships: row.get(4),
            tables: names.iter().map(|(oid, _)| *oid).collect(),
        };
        Ok((fingerprint, names))
    }

    /// The tables the patterns match now, by OID, with whether the publication carries each;
    /// and how new ones join it.
    async fn tenants(&self, regex: &str) -> Result<(BTreeMap<u32, (TableName, bool)>, Trigger)> {
        let rows = self
            .query(
                "cannot list the tenants' outbox tables",
                &tenants::coverage_sql(self.version_num),
                &[&self.publication, &regex],
            )
            .await?;
        let tables = rows
            .iter()
            .map(|r| {
                (r.get::<_, u32>(0), (TableName::new(r.get(1), r.get(2)), r.get::<_, bool>(3)))
            })
            .collect();
        let trigger =
            tenants::trigger(&self.client, self.timeout, &self.publication, regex).await?;
        Ok((tables, trigger))
    }

    /// Every outbox table still exists and is still carried, INSERTs included.
    fn covered(&self, now: &Fingerprint) -> Result<()> {
        covered(&self.tables, &self.publication, now)
    }

    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        match tokio::time::timeout(self.timeout, self.client.query(sql, params)).await {
            Ok(result) => result.map_err(|e| classify_pg(what, e)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    async fn one_row(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<tokio_postgres::Row> {
        match tokio::time::timeout(self.timeout, self.client.query_one(sql, params)).await {
            Ok(result) => result.map_err(|e| classify_pg(what, e)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    async fn client_query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>> {
        let what = "cannot check the publication";
        match tokio::time::timeout(self.timeout, self.client.query_opt(sql, params)).await {
            Ok(result) => result.map_err(|e| classify_pg(what, e)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    fn timed_out(&self, what: &str) -> Error {
        Error::transient_msg(format!("{what}: no answer within {} s", self.timeout.as_secs()))
    }
}

/// Every outbox table still exists and is still carried, INSERTs included. A message-only relay
/// (no table) needs only the publication itself: pgoutput sends logical messages whatever it
/// publishes.
fn covered(tables: &[OutboxTable], publication: &str, now: &Fingerprint) -> Result<()> {
    for table in tables {
        if !now.tables.contains(&table.oid) {
            return Err(Error::definite(
                format!("outbox table {} was dropped", table.name),
                "recreate it and add it to the publication (ALTER PUBLICATION … ADD TABLE), then restart walrelay; rows written while it was missing were not relayed",
            ));
        }
    }
    if !now.insert && !tables.is_empty() {
        return Err(Error::definite(
            format!("publication {} stopped publishing INSERTs while walrelay was running", publication),
            format!("ALTER PUBLICATION {} SET (publish = 'insert'), then reconcile the outbox rows written meanwhile with Kafka (they were not decoded); walrelay confirmed nothing after the change", publication),
        ));
    }
    if !now.all_tables && now.memberships.is_empty() && !tables.is_empty() {
        return Err(Error::definite(
            format!("publication {} no longer carries the outbox tables", publication),
            format!("ALTER PUBLICATION {} ADD TABLE …, then reconcile the outbox rows written meanwhile with Kafka (they were not decoded); walrelay confirmed nothing after the change", publication),
        ));
    }
    Ok(())
}

/// The catalog changed under the stream: say what, and that nothing after it was confirmed.
fn changed(before: &Fingerprint, now: &Fingerprint, publication: &str) -> Error {
    let what = if before.publication != now.publication {
        format!("publication {publication} was dropped and recreated while walrelay was running")
    } else if before.via_root != now.via_root {
        format!("publish_via_partition_root of publication {publication} changed while walrelay was running")
    } else if before.all_tables != now.all_tables || before.memberships != now.memberships {
        format!("the outbox tables' membership in publication {publication} changed while walrelay was running (a table was removed and added back, or the schema's)")
    } else {
        format!(
            "an outbox table of publication {publication} was replaced while walrelay was running"
        )
    };
    Error::definite(
        what,
        "changes written in between may not have been decoded: check the publication, then restart walrelay and reconcile the outbox rows of that window with Kafka; walrelay confirmed nothing after the last unchanged check",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> Fingerprint {
        Fingerprint {
            publication: 1,
            insert: true,
            via_root: true,
            all_tables: false,
            memberships: vec![10],
            tables: vec![100],
        }
    }

    #[test]
    fn watch_a_changed_publication_is_named_in_the_error() {
        let recreated = Fingerprint { publication: 2, ..fp() };
        assert!(changed(&fp(), &recreated, "p").to_string().contains("dropped and recreated"));
        let readded = Fingerprint { memberships: vec![11], ..fp() };
        assert!(changed(&fp(), &readded, "p").to_string().contains("membership"));
        let e = changed(&fp(), &readded, "p");
        assert!(e.hint().unwrap().contains("confirmed nothing after"), "{e:?}");
    }

    #[test]
    fn watch_a_message_only_relay_needs_the_publication_but_not_its_inserts() {
        let bare = Fingerprint { insert: false, memberships: vec![], tables: vec![], ..fp() };
        assert!(covered(&[], "p", &bare).is_ok());
        let table = OutboxTable {
            name: TableName::new("public", "outbox"),
            oid: 100,
            partitioned: false,
            owner: "app".into(),
            owned: true,
            columns: Vec::new(),
        };
        let e = covered(&[table], "p", &Fingerprint { insert: false, ..fp() }).unwrap_err();
        assert!(e.to_string().contains("stopped publishing INSERTs"), "{e}");
    }

    #[test]
    fn watch_a_replaced_table_changes_the_fingerprint() {
        // Dropped and recreated under its name: a new OID (a rename keeps it, and names are
        // not part of the fingerprint).
        let replaced = Fingerprint { tables: vec![101], ..fp() };
        assert_ne!(fp(), replaced);
        assert!(changed(&fp(), &replaced, "p").to_string().contains("replaced"));
    }
}
