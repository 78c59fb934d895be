//! The outbox tables' catalog: what it reads from the relations and how it says it.

use super::*;

fn table(oid: u32, name: &str, partitioned: bool) -> OutboxTable {
    OutboxTable {
        name: TableName::new("public", name),
        oid,
        partitioned,
        owner: "app".into(),
        owned: true,
        columns: Vec::new(),
    }
}

fn published(oid: u32, root: u32, name: &str) -> PublishedTable {
    PublishedTable {
        oid,
        root,
        name: TableName::new("public", name),
        row_filter: None,
        columns: None,
    }
}

fn publication(via_root: bool, tables: Vec<PublishedTable>) -> Publication {
    Publication {
        name: "p".into(),
        all_tables: false,
        insert: true,
        update: false,
        delete: false,
        truncate: false,
        via_root,
        tables,
    }
}

#[test]
fn catalog_partitioned_outbox_needs_publish_via_partition_root() {
    let outbox = table(10, "outbox", true);
    let leaf = publication(false, vec![published(11, 10, "outbox_2026_01")]);
    let problems = leaf.problems(std::slice::from_ref(&outbox));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].fix, "ALTER PUBLICATION p SET (publish_via_partition_root = true)");
    let root = publication(true, vec![published(10, 10, "outbox")]);
    assert!(root.problems(&[outbox]).is_empty());
}

#[test]
fn catalog_every_outbox_table_must_be_published_with_inserts() {
    let tables = [table(10, "outbox", false), table(20, "billing", false)];
    let mut p = publication(true, vec![published(10, 10, "outbox")]);
    p.insert = false;
    let fixes: Vec<String> = p.problems(&tables).into_iter().map(|p| p.fix).collect();
    assert_eq!(
        fixes,
        [
            "ALTER PUBLICATION p SET (publish = 'insert')",
            "ALTER PUBLICATION p ADD TABLE public.billing"
        ]
    );
}

#[test]
fn catalog_message_only_relay_gets_an_empty_publication_and_needs_nothing_of_it() {
    assert_eq!(
        create_publication_sql("walrelay", &[]),
        "CREATE PUBLICATION \"walrelay\" WITH (publish = 'insert', publish_via_partition_root = true)"
    );
    let mut all_operations_but_insert = publication(false, vec![]);
    all_operations_but_insert.insert = false;
    assert!(all_operations_but_insert.problems(&[]).is_empty());
}

#[test]
fn catalog_publication_is_created_for_inserts_via_the_partition_root() {
    let sql = create_publication_sql(
        "walrelay",
        &[TableName::new("public", "outbox"), TableName::new("billing", "outbox")],
    );
    assert_eq!(
        sql,
        "CREATE PUBLICATION \"walrelay\" FOR TABLE \"public\".\"outbox\", \"billing\".\"outbox\" \
         WITH (publish = 'insert', publish_via_partition_root = true)"
    );
}
