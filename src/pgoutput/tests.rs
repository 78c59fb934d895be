use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn cat(parts: &[&[u8]]) -> Bytes {
    Bytes::from(parts.concat())
}

fn text(s: &str) -> Value {
    Value::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn decode_parts(parts: &[&[u8]]) -> Result<Message, DecodeError> {
    decode(&cat(parts))
}

const OUTBOX: [u8; 4] = [0, 0, 0x40, 0x01]; // relation id 16385
const LSN: [u8; 8] = [0, 0, 0, 0x01, 0x6B, 0x37, 0x4D, 0x48]; // 1/6B374D48
const TS: [u8; 8] = [0, 0x02, 0xC3, 0x1A, 0x5E, 0x7F, 0x10, 0x00];

// Fixture bytes are laid out one protocol field (or column) per group, as in the spec.
#[rustfmt::skip]
fn insert_fixture() -> Bytes {
    cat(&[
        b"I", &OUTBOX, b"N", &[0, 3],                     // three columns:
        b"n",                                             // NULL
        b"t", &[0, 0, 0, 2], b"42",                       // text "42"
        b"b", &[0, 0, 0, 4], &[0xDE, 0xAD, 0xBE, 0xEF],   // 4 binary bytes
    ])
}

/// Messages built by hand from the protocol documentation, with what they must decode to.
#[rustfmt::skip]
fn fixtures() -> Vec<(Bytes, Message)> {
    let (id, lsn, ts) = (16385, Lsn(0x0000_0001_6B37_4D48), 0x0002_C31A_5E7F_1000);
    let end_lsn = [0, 0, 0, 0x01, 0x6B, 0x37, 0x4D, 0x78];
    let seven: &[u8] = &[b't', 0, 0, 0, 1, b'7'];
    let key7 = Tuple(vec![text("7")]);
    let column = |flags, name: &str, type_oid| {
        Column { flags, name: name.into(), type_oid, type_modifier: -1 }
    };
    vec![
        (
            cat(&[b"B", &LSN, &TS, &[0, 0, 0x02, 0xF1]]),
            Message::Begin(Begin { final_lsn: lsn, commit_ts: ts, xid: 753 }),
        ),
        (
            cat(&[b"C", &[0], &LSN, &end_lsn, &TS]),
            Message::Commit(Commit {
                flags: 0, commit_lsn: lsn, end_lsn: Lsn(0x0000_0001_6B37_4D78), commit_ts: ts,
            }),
        ),
        (
            cat(&[b"O", &LSN, b"node_a\0"]),
            Message::Origin(Origin { commit_lsn: lsn, name: "node_a".into() }),
        ),
        (
            cat(&[
                b"R", &OUTBOX, b"public\0", b"outbox\0", b"d", &[0, 2],
                &[1], b"id\0", &[0, 0, 0, 20], &[0xFF; 4],               // key, int8, typmod -1
                &[0], b"payload\0", &[0, 0, 0x0E, 0xDA], &[0xFF; 4],     // jsonb (3802)
            ]),
            Message::Relation(Relation {
                id, namespace: "public".into(), name: "outbox".into(), replica_identity: b'd',
                columns: vec![column(1, "id", 20), column(0, "payload", 3802)],
            }),
        ),
        (
            cat(&[b"Y", &[0, 0, 0x40, 0x10], b"public\0", b"mood\0"]),
            Message::Type(TypeInfo { id: 16400, namespace: "public".into(), name: "mood".into() }),
        ),
        (
            insert_fixture(),
            Message::Insert(Insert { relation_id: id, new: Tuple(vec![
                Value::Null, text("42"), Value::Binary(Bytes::from_static(&[0xDE, 0xAD, 0xBE, 0xEF])),
            ]) }),
        ),
        (
            cat(&[b"U", &OUTBOX, b"K", &[0, 1], seven, b"N", &[0, 2], seven, b"u"]),
            Message::Update(Update {
                relation_id: id,
                old: Some(OldTuple::Key(key7.clone())),
                new: Tuple(vec![text("7"), Value::Unchanged]),
            }),
        ),
        (
            cat(&[b"U", &OUTBOX, b"N", &[0, 1], b"n"]),
            Message::Update(Update { relation_id: id, old: None, new: Tuple(vec![Value::Null]) }),
        ),
        (
            cat(&[b"D", &OUTBOX, b"O", &[0, 2], seven, b"n"]),
            Message::Delete(Delete {
                relation_id: id,
                old: OldTuple::Full(Tuple(vec![text("7"), Value::Null])),
            }),
        ),
        (
            cat(&[b"D", &OUTBOX, b"K", &[0, 1], seven]),
            Message::Delete(Delete { relation_id: id, old: OldTuple::Key(key7) }),
        ),
        (
            cat(&[b"T", &[0, 0, 0, 2], &[3], &OUTBOX, &[0, 0, 0x40, 0x02]]),
            Message::Truncate(Truncate { options: 3, relation_ids: vec![16385, 16386] }),
        ),
        (
            cat(&[b"M", &[1], &LSN, b"outbox\0", &[0, 0, 0, 3], b"abc"]),
            Message::LogicalMessage(LogicalMessage {
                transactional: true, lsn, prefix: "outbox".into(), content: Bytes::from_static(b"abc"),
            }),
        ),
    ]
}

#[test]
fn insert_with_null_text_and_binary_columns_decodes_to_spec() {
    let Ok(Message::Insert(insert)) = decode(&insert_fixture()) else { panic!("not an Insert") };
    assert_eq!(insert.relation_id, 16385);
    assert_eq!(
        insert.new.0,
        [Value::Null, text("42"), Value::Binary(Bytes::from_static(&[0xDE, 0xAD, 0xBE, 0xEF]))]
    );
}

#[test]
fn every_hand_built_fixture_decodes_to_its_spec_message() {
    for (bytes, expected) in fixtures() {
        assert_eq!(decode(&bytes), Ok(expected), "fixture {bytes:?}");
    }
}

#[test]
fn encode_reproduces_every_hand_built_fixture_byte_for_byte() {
    for (bytes, message) in fixtures() {
        assert_eq!(encode(&message), bytes, "{message:?}");
    }
}

#[test]
fn text_binary_and_message_content_are_zero_copy_slices_of_the_input() {
    let mut slices = Vec::new();
    for (bytes, _) in fixtures() {
        let start = bytes.as_ptr() as usize;
        let within = start..start + bytes.len();
        match decode(&bytes) {
            Ok(Message::Insert(Insert { new: Tuple(values), .. })) => {
                for value in values {
                    if let Value::Text(b) | Value::Binary(b) = value {
                        slices.push((within.clone(), b));
                    }
                }
            }
            Ok(Message::LogicalMessage(m)) => slices.push((within, m.content)),
            _ => {}
        }
    }
    assert_eq!(slices.len(), 3);
    for (within, slice) in slices {
        assert!(within.contains(&(slice.as_ptr() as usize)), "{slice:?} was copied");
    }
}

#[test]
fn empty_buffer_is_an_empty_error() {
    assert_eq!(decode(&Bytes::new()), Err(DecodeError::Empty));
}

#[test]
fn unknown_tag_is_reported_with_its_value() {
    assert_eq!(decode_parts(&[b"S"]), Err(DecodeError::UnknownTag { tag: b'S' }));
}

#[test]
fn byte_after_a_complete_message_is_trailing_bytes() {
    assert_eq!(
        decode_parts(&[b"B", &LSN, &TS, &[0, 0, 0x02, 0xF1], &[0]]),
        Err(DecodeError::TrailingBytes { message: "Begin", extra: 1 })
    );
}

#[test]
fn truncated_begin_reports_offset_and_missing_byte_count() {
    assert_eq!(
        decode_parts(&[b"B", &LSN, &[0]]),
        Err(DecodeError::Truncated { message: "Begin", offset: 9, needed: 7 })
    );
}

fn invalid_field(result: Result<Message, DecodeError>) -> (&'static str, usize) {
    match result {
        Err(DecodeError::Invalid { field, offset, .. }) => (field, offset),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn negative_lengths_and_counts_are_invalid_at_their_offset() {
    let neg = [0xFF, 0xFF, 0xFF, 0xFF];
    let cases: [(&[&[u8]], &str, usize); 4] = [
        (&[b"I", &OUTBOX, b"N", &[0, 1], b"t", &neg], "column value length", 9),
        (&[b"I", &OUTBOX, b"N", &[0xFF, 0xFF]], "column count", 6),
        (&[b"T", &neg, &[0]], "relation count", 1),
        (&[b"M", &[0], &LSN, b"p\0", &neg], "content length", 12),
    ];
    for (parts, field, offset) in cases {
        assert_eq!(invalid_field(decode_parts(parts)), (field, offset), "{parts:?}");
    }
}

#[test]
fn unexpected_marker_and_kind_bytes_are_invalid() {
    let cases: [(&[&[u8]], &str, usize); 5] = [
        (&[b"I", &OUTBOX, b"K", &[0, 0]], "new tuple marker", 5),
        (&[b"U", &OUTBOX, b"X", &[0, 0]], "tuple marker", 5),
        (&[b"U", &OUTBOX, b"K", &[0, 0], b"K", &[0, 0]], "new tuple marker", 8),
        (&[b"D", &OUTBOX, b"N", &[0, 0]], "old tuple marker", 5),
        (&[b"I", &OUTBOX, b"N", &[0, 1], b"x"], "column kind", 8),
    ];
    for (parts, field, offset) in cases {
        assert_eq!(invalid_field(decode_parts(parts)), (field, offset), "{parts:?}");
    }
}

#[test]
fn invalid_utf8_in_a_string_is_invalid_at_the_bad_byte() {
    let result = decode_parts(&[b"Y", &[0, 0, 0, 1], b"ok\0", b"ab\xFF\0"]);
    assert_eq!(invalid_field(result), ("type name", 10));
}

#[test]
fn unterminated_string_is_truncated() {
    let result = decode_parts(&[b"O", &LSN, b"node"]);
    assert_eq!(result, Err(DecodeError::Truncated { message: "Origin", offset: 13, needed: 1 }));
}

#[test]
fn every_truncation_prefix_of_every_fixture_is_an_error() {
    for (bytes, _) in fixtures() {
        for len in 0..bytes.len() {
            assert!(decode(&bytes.slice(..len)).is_err(), "prefix {len} of {bytes:?}");
        }
    }
}

#[test]
fn huge_counts_and_lengths_in_a_short_buffer_are_truncated_before_allocating() {
    let max32: &[u8] = &[0x7F, 0xFF, 0xFF, 0xFF];
    let max16: &[u8] = &[0x7F, 0xFF];
    let cases: [&[&[u8]]; 6] = [
        &[b"I", &OUTBOX, b"N", max16, b"nnnnnnnnnn"],
        &[b"R", &OUTBOX, b"s\0", b"t\0", b"d", max16, &[0; 10]],
        &[b"T", max32, &[0], &[0; 10]],
        &[b"I", &OUTBOX, b"N", &[0, 1], b"t", max32, &[0; 10]],
        &[b"D", &OUTBOX, b"O", &[0, 1], b"b", max32],
        &[b"M", &[0], &LSN, b"p\0", max32, b"abc"],
    ];
    for parts in cases {
        let result = decode_parts(parts);
        assert!(matches!(result, Err(DecodeError::Truncated { .. })), "{parts:?}: {result:?}");
    }
}

fn arb_name() -> impl Strategy<Value = String> {
    "[^\\x00]{0,6}"
}

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..6).prop_map(Bytes::from)
}

fn arb_tuple() -> impl Strategy<Value = Tuple> {
    let value = prop_oneof![
        Just(Value::Null),
        Just(Value::Unchanged),
        arb_bytes().prop_map(Value::Text),
        arb_bytes().prop_map(Value::Binary),
    ];
    vec(value, 0..4).prop_map(Tuple)
}

fn arb_old_tuple() -> impl Strategy<Value = OldTuple> {
    prop_oneof![arb_tuple().prop_map(OldTuple::Key), arb_tuple().prop_map(OldTuple::Full)]
}

fn arb_message() -> impl Strategy<Value = Message> {
    let column = (any::<u8>(), arb_name(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| Column { flags, name, type_oid, type_modifier },
    );
    prop_oneof![
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_ts, xid)| {
            Message::Begin(Begin { final_lsn: Lsn(final_lsn), commit_ts, xid })
        }),
        (any::<u8>(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(
            |(flags, commit_lsn, end_lsn, commit_ts)| {
                Message::Commit(Commit {
                    flags,
                    commit_lsn: Lsn(commit_lsn),
                    end_lsn: Lsn(end_lsn),
                    commit_ts,
                })
            }
        ),
        (any::<u64>(), arb_name()).prop_map(|(commit_lsn, name)| Message::Origin(Origin {
            commit_lsn: Lsn(commit_lsn),
            name
        })),
        (any::<u32>(), arb_name(), arb_name(), any::<u8>(), vec(column, 0..4)).prop_map(
            |(id, namespace, name, replica_identity, columns)| {
                Message::Relation(Relation { id, namespace, name, replica_identity, columns })
            }
        ),
        (any::<u32>(), arb_name(), arb_name())
            .prop_map(|(id, namespace, name)| Message::Type(TypeInfo { id, namespace, name })),
        (any::<u32>(), arb_tuple())
            .prop_map(|(relation_id, new)| Message::Insert(Insert { relation_id, new })),
        (any::<u32>(), proptest::option::of(arb_old_tuple()), arb_tuple())
            .prop_map(|(relation_id, old, new)| Message::Update(Update { relation_id, old, new })),
        (any::<u32>(), arb_old_tuple())
            .prop_map(|(relation_id, old)| Message::Delete(Delete { relation_id, old })),
        (any::<u8>(), vec(any::<u32>(), 0..4)).prop_map(|(options, relation_ids)| {
            Message::Truncate(Truncate { options, relation_ids })
        }),
        (any::<bool>(), any::<u64>(), arb_name(), arb_bytes()).prop_map(
            |(transactional, lsn, prefix, content)| {
                Message::LogicalMessage(LogicalMessage {
                    transactional,
                    lsn: Lsn(lsn),
                    prefix,
                    content,
                })
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_messages_of_every_variant_round_trip_through_encode(m in arb_message()) {
        prop_assert_eq!(decode(&encode(&m)), Ok(m));
    }
}

/// Runs `cases` cases of `strategy` through `check` on proptest's runner (a panic fails the
/// case, and a failure is shrunk), then writes `fuzz <input>: N cases, …` to the real stderr,
/// which libtest does not capture, so the count shows in every test run.
fn fuzz<S: Strategy>(
    input: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    use std::io::Write;
    let count = std::cell::Cell::new(0u32);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let result = runner.run(&strategy, |value| {
        count.set(count.get() + 1);
        check(value)
    });
    let failures = u32::from(result.is_err());
    // No secret oracle here: WAL bytes carry row data, never walrelay's configuration.
    let line = format!(
        "fuzz {input}: {} cases, {failures} panics or failures (no secret oracle: row data, not configuration)\n",
        count.get()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Err(e) = result {
        panic!("fuzz {input}: {e}");
    }
}

#[test]
fn fuzz_pgoutput_mutated_messages_never_panic_and_whatever_decodes_round_trips() {
    let edits = vec((0u8..3, any::<prop::sample::Index>(), any::<u8>()), 1..4);
    fuzz("pgoutput (mutated messages)", 1000, (arb_message(), edits), |(m, edits)| {
        let mut buf = encode(&m).to_vec();
        for (kind, at, byte) in edits {
            let i = at.index(buf.len() + 1);
            match kind {
                0 => {
                    if let Some(b) = buf.get_mut(i) {
                        *b ^= byte | 1
                    }
                }
                1 => buf.truncate(i),
                _ => buf.insert(i, byte),
            }
        }
        if let Ok(decoded) = decode(&Bytes::from(buf)) {
            prop_assert_eq!(decode(&encode(&decoded)), Ok(decoded));
        }
        Ok(())
    });
}

#[test]
fn fuzz_pgoutput_random_bytes_after_a_valid_tag_never_panic() {
    let strategy = (proptest::sample::select(b"BCORYIUDTM".to_vec()), vec(any::<u8>(), 0..48));
    fuzz("pgoutput (random bodies)", 1000, strategy, |(tag, body)| {
        let _ = decode(&cat(&[&[tag], &body]));
        Ok(())
    });
}
