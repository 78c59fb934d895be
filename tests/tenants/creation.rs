//! How a tenant's table comes to hold rows under the pattern: `CREATE TABLE … AS`, `SELECT …
//! INTO` and renaming a table that holds rows are refused by the event trigger with the fix; a
//! table created empty and filled by `INSERT … SELECT`, or renamed while empty, is relayed in full.

use super::*;

/// What PostgreSQL answered a refused command: its SQLSTATE, message and hint.
async fn refused(s: &Setup, sql: &str) -> (String, String, String) {
    let e = s.db.connect().await.batch_execute(sql).await.expect_err(sql);
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    (db.code().code().to_string(), db.message().to_string(), db.hint().unwrap_or("").to_string())
}

/// `CREATE TABLE … AS` and `SELECT … INTO` write their rows before the event trigger adds the
/// table to the publication, so those rows would never be decoded as published: the trigger
/// refuses both, naming the table and the fix, and the table is not created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_table_as_and_select_into_holding_rows_under_a_pattern_are_refused_with_the_fix() {
    let s = Setup::new("tenant_ctas").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    s.db.insert_outbox("public.outbox", "Tenant", "t1", "Created", Some("{}")).await;
    s.db.execute("CREATE SCHEMA t1; CREATE SCHEMA t2").await;

    let ctas = refused(&s, "CREATE TABLE t1.outbox AS SELECT * FROM public.outbox").await;
    let into = refused(&s, "SELECT * INTO t2.outbox FROM public.outbox").await;
    println!("CREATE TABLE AS refused: {ctas:?}\nSELECT INTO refused: {into:?}");
    for ((code, message, hint), (tag, table)) in
        [(&ctas, ("CREATE TABLE AS", "t1.outbox")), (&into, ("SELECT INTO", "t2.outbox"))]
    {
        assert_eq!(code, "55000", "{message}");
        assert!(
            message.starts_with(&format!(
                "{tag} would create {table} holding rows that walrelay never relays"
            )),
            "{message}"
        );
        assert!(message.contains(&format!("publication {}", s.publication)), "{message}");
        assert!(hint.contains("create the table empty with CREATE TABLE"), "{hint}");
        assert!(hint.contains(&format!("INSERT INTO {table} SELECT")), "{hint}");
    }
    let created: i64 =
        s.db.connect()
            .await
            .query_one("SELECT count(*) FROM pg_class WHERE relname = 'outbox'", &[])
            .await
            .unwrap()
            .get(0);
    assert_eq!(created, 1, "only public.outbox exists");
    // A table no pattern matches is none of walrelay's business.
    s.db.execute("CREATE TABLE t1.archive AS SELECT * FROM public.outbox").await;
    release_slot(&s).await;
}

/// The fix the refusal names: the table created empty (`WITH NO DATA`), then filled by
/// `INSERT … SELECT`, in one transaction — every row relayed, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_created_with_no_data_then_filled_by_insert_select_is_relayed_in_full() {
    let s = Setup::new("tenant_nodata").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.db.execute(
        "CREATE TABLE public.staging AS SELECT gen_random_uuid() AS id, 'Tenant'::varchar AS aggregatetype, \
         't3'::varchar AS aggregateid, 'Created'::varchar AS type, '{}'::jsonb AS payload, g AS n \
         FROM generate_series(1, 20) g",
    )
    .await;
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(
        "CREATE SCHEMA t3; \
         CREATE TABLE t3.outbox AS SELECT id, aggregatetype, aggregateid, type, payload FROM public.staging WITH NO DATA; \
         INSERT INTO t3.outbox SELECT id, aggregatetype, aggregateid, type, payload FROM public.staging ORDER BY n",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let sent: Vec<String> = client
        .query("SELECT id::text FROM public.staging ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let got = s.read("Tenant", sent.len()).await;
    println!(
        "CREATE TABLE AS WITH NO DATA, then INSERT SELECT: {} of {} relayed",
        got.len(),
        sent.len()
    );
    assert_eq!(ids(&got), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A table renamed (or moved) into a matching name keeps the rows it held, which were written
/// before it joined the publication: refused, whether the rows came earlier or in the same
/// transaction. An empty table renamed into a match joins, and its rows are relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_a_table_that_holds_rows_into_a_pattern_is_refused_and_an_empty_one_is_relayed() {
    let s = Setup::new("tenant_rename").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    s.db.create_outbox("t4.draft").await;
    s.db.insert_outbox("t4.draft", "Tenant", "t4", "Created", Some("{}")).await;

    let earlier = refused(&s, "ALTER TABLE t4.draft RENAME TO outbox").await;
    s.db.execute("DELETE FROM t4.draft").await;
    let same_transaction = refused(
        &s,
        "BEGIN; INSERT INTO t4.draft (id, aggregatetype, aggregateid, type, payload) \
         VALUES (gen_random_uuid(), 'Tenant', 't4', 'Created', '{}'); \
         ALTER TABLE t4.draft RENAME TO outbox; COMMIT",
    )
    .await;
    s.db.create_outbox("staging.outbox").await;
    s.db.insert_outbox("staging.outbox", "Tenant", "t6", "Created", Some("{}")).await;
    s.db.execute("CREATE SCHEMA t6").await;
    let moved = refused(&s, "ALTER TABLE staging.outbox SET SCHEMA t6").await;
    println!("rename with rows: {earlier:?}\nrows in the same transaction: {same_transaction:?}\nSET SCHEMA with rows: {moved:?}");
    for (code, message, hint) in [&earlier, &same_transaction, &moved] {
        assert_eq!(code, "55000", "{message}");
        assert!(message.starts_with("ALTER TABLE would add t"), "{message}");
        let publication = format!("which holds rows, to publication {}", s.publication);
        assert!(message.contains(&publication), "{message}");
        assert!(message.contains("walrelay would never relay them"), "{message}");
        assert!(hint.contains("while it is empty"), "{hint}");
    }
    assert!(
        earlier.1.contains("t4.outbox") && moved.1.contains("t6.outbox"),
        "{earlier:?} {moved:?}"
    );

    // Empty, it may: the rename joins it to the publication, and its rows are relayed.
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.db.execute("ALTER TABLE t4.draft RENAME TO outbox").await;
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.push(s.db.insert_outbox("t4.outbox", "Tenant", "t4", "Created", Some("{}")).await);
    }
    let got = s.read("Tenant", 3).await;
    println!("an empty table renamed into a match: {} of 3 relayed", got.len());
    assert_eq!(ids(&got), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
