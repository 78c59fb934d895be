//! `pgoutput::decode` on the messages the relay sees most: an outbox Insert (≈ 430 bytes on the
//! wire), plus Begin and Commit. Run: `cargo bench --bench decode`.

mod common;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use walrelay::pgoutput::{self, Begin, Commit, Message};

fn decode(c: &mut Criterion) {
    let insert = common::insert_bytes(common::PAYLOAD);
    let begin = pgoutput::encode(&Message::Begin(Begin {
        final_lsn: walrelay::lsn::Lsn(0x1_6B37_48A0),
        commit_ts: 818_000_000_000_000,
        xid: 4242,
    }));
    let commit = pgoutput::encode(&Message::Commit(Commit {
        flags: 0,
        commit_lsn: walrelay::lsn::Lsn(0x1_6B37_48A0),
        end_lsn: walrelay::lsn::Lsn(0x1_6B37_48D8),
        commit_ts: 818_000_000_000_000,
    }));
    let relation = pgoutput::encode(&Message::Relation(common::relation()));
    assert!(matches!(pgoutput::decode(&insert), Ok(Message::Insert(_))));

    let mut g = c.benchmark_group("pgoutput_decode");
    g.throughput(Throughput::Elements(1));
    g.bench_function(format!("insert_{}B", insert.len()), |b| {
        b.iter(|| pgoutput::decode(black_box(&insert)).unwrap())
    });
    g.bench_function("begin", |b| b.iter(|| pgoutput::decode(black_box(&begin)).unwrap()));
    g.bench_function("commit", |b| b.iter(|| pgoutput::decode(black_box(&commit)).unwrap()));
    g.bench_function("relation_8_columns", |b| {
        b.iter(|| pgoutput::decode(black_box(&relation)).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = decode
}
criterion_main!(benches);
