//! The outbox tables by pattern (`[outbox] tables`, one schema per tenant): what the patterns
//! match now, whether each fits the router and is in the publication, and how new tenants'
//! tables get there (the event trigger `walrelay setup` installs).
//!
//! A tenant's problem is a warning, never a failure: the relay goes on with the others.

use super::Report;
use crate::config::{Config, TableName};
use crate::error::Result;
use crate::router::Router;
use crate::source::catalog;
use crate::source::tenants::{self, Trigger};
use crate::source::Control;

/// How many matched tables `check` names in its line.
const NAMED: usize = 5;

pub(super) async fn run(config: &Config, control: &Control, r: &mut Report) -> Result<()> {
    let outbox = &config.outbox;
    if outbox.patterns.is_empty() {
        return Ok(());
    }
    let patterns: Vec<&str> = outbox.patterns.iter().map(|p| p.text.as_str()).collect();
    let what = format!("outbox tables by pattern {}", patterns.join(", "));
    let matched = match catalog::matching_tables(control, outbox).await {
        Ok(m) => m,
        Err(e) => {
            r.fail(&what, e.chain(), e.hint().unwrap_or("fix the patterns"));
            return Ok(());
        }
    };
    if matched.is_empty() {
        r.warn(&what, "match no table yet", "create the tenants' outbox tables (with the event trigger installed, each joins the publication as it is created)");
    } else {
        r.ok(
            &what,
            format!(
                "match {} table(s) now: {}",
                matched.len(),
                named(matched.iter().map(|t| &t.name))
            ),
        );
    }
    let router = Router::new(config.router.clone());
    for table in &matched {
        if let Err(e) = router.bind(&table.relation(), &[]) {
            r.warn(
                &format!("tenant table {}", table.name),
                format!("matches, but its columns do not fit the router: {e}"),
                "change the table, or the pattern so it leaves the table out: its rows go to the dead-letter topic, or stop the relay at the first of them",
            );
        }
    }
    let publication_name = &config.source.publication;
    let publication = catalog::publication(control, publication_name).await?;
    if let Some(p) = publication.as_ref().filter(|p| !p.all_tables) {
        let lacking: Vec<&TableName> = matched
            .iter()
            .filter(|t| !outbox.tables.contains(&t.name) && p.entry_for(t).is_none())
            .map(|t| &t.name)
            .collect();
        if !lacking.is_empty() {
            r.warn(
                &format!("publication {publication_name}"),
                format!("does not carry {} table(s) a pattern matches, whose rows are not relayed: {}", lacking.len(), named(lacking.iter().copied())),
                "`walrelay setup` adds them; then `walrelay audit --since <when they were created> --repair` sends the rows written before",
            );
        }
    }
    let mode = "new tenants' tables";
    let regex = outbox.pattern_regex().unwrap_or_default();
    let state =
        tenants::trigger(control.client(), control.timeout, publication_name, &regex).await?;
    match state.problem(publication_name) {
        None if state == Trigger::NotNeeded => r.ok(mode, format!("publication {publication_name} is FOR ALL TABLES: a table created later that a pattern matches is relayed from its first row (no event trigger needed)")),
        None => r.ok(mode, format!("event trigger {} adds each table created later that a pattern matches to publication {publication_name}, in the transaction that creates it, so its first rows are relayed; it refuses a table that would join holding rows (CREATE TABLE … AS, SELECT … INTO, a rename into a match)", tenants::trigger_name(publication_name))),
        Some(problem) => r.warn(
            mode,
            tenants::not_guaranteed(&problem, publication_name),
            tenants::install_fix(publication_name),
        ),
    }
    Ok(())
}

/// The first [`NAMED`] names, and how many more.
fn named<'a>(names: impl Iterator<Item = &'a TableName>) -> String {
    let names: Vec<String> = names.map(|n| n.to_string()).collect();
    match names.len() > NAMED {
        true => format!("{}, and {} more", names[..NAMED].join(", "), names.len() - NAMED),
        false => names.join(", "),
    }
}
