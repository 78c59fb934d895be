//! Unit tests: each envelope format's record, routed then wrapped, for one row and one message, tombstones, placements, and
//! the options refused at start-up.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message as _;

use super::*;
use crate::envelope::*;
use crate::lsn::Lsn;
use crate::options::ConfigError;
use crate::pgoutput::{Relation, Tuple, Value};

type Opts = BTreeMap<String, String>;

fn opts(kv: &[(&str, &str)]) -> Opts {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn setup(envelope: &[(&str, &str)], router: &[(&str, &str)]) -> Result<Encoder, ConfigError> {
    let (router_cfg, cfg) = parse(Some(&opts(envelope)), &opts(router), &opts(&[]))?;
    Ok(Encoder::from_parts(router_cfg, cfg, "shop"))
}

/// `app.outbox`: id uuid, aggregatetype text, aggregateid text, type text, payload `payload_oid`,
/// region text.
fn outbox(payload_oid: u32) -> Relation {
    let cols: &[(&str, u32)] = &[
        ("id", 2950),
        ("aggregatetype", 25),
        ("aggregateid", 25),
        ("type", 25),
        ("payload", payload_oid),
        ("region", 25),
    ];
    Relation::for_test(1, "app", "outbox", cols)
}

const ID: &str = "0b8a4bde-5f4c-4a6e-9d0f-3f3c1d6e2a01";
const TXN: Txn =
    Txn { commit_micros: 1_764_612_000_123_456, commit_lsn: Lsn(0x16B_3748), xid: 771 };

fn row(payload: Option<&str>, ty: Option<&str>) -> Tuple {
    let v = |s: Option<&str>| {
        s.map_or(Value::Null, |s| Value::Text(Bytes::copy_from_slice(s.as_bytes())))
    };
    Tuple(vec![
        v(Some(ID)),
        v(Some("Order")),
        v(Some("order-42")),
        v(ty),
        v(payload),
        v(Some("eu")),
    ])
}

fn route(
    envelope: &[(&str, &str)],
    router: &[(&str, &str)],
    payload_oid: u32,
    tuple: &Tuple,
) -> Result<Record, RouteError> {
    let mut encoder = setup(envelope, router).expect("valid config");
    let b = encoder.router().bind(&outbox(payload_oid), &[]).expect("bind");
    encoder.row(&b, tuple, &TXN)
}

fn header<'a>(record: &'a Record, name: &str) -> Option<&'a str> {
    record
        .headers
        .iter()
        .find(|(n, _)| &**n == name)
        .map(|(_, v)| std::str::from_utf8(v).expect("UTF-8 header"))
}

const PAYLOAD: &str = r#"{"total": 12.5, "items": [1, 2]}"#;

#[test]
fn debezium_format_is_the_routers_record_unchanged() {
    let tuple = row(Some(PAYLOAD), Some("OrderCreated"));
    let plain = {
        let (router_cfg, _) = parse(None, &opts(&[]), &opts(&[])).unwrap();
        let mut r = crate::router::Router::new(router_cfg);
        let b = r.bind(&outbox(3802), &[]).unwrap();
        r.route(&b, &tuple).unwrap()
    };
    let wrapped = route(&[("format", "debezium")], &[], 3802, &tuple).unwrap();
    assert_eq!(wrapped, plain);
    assert_eq!(wrapped.value.as_deref(), Some(PAYLOAD.as_bytes()));
}

#[test]
fn cloudevents_binary_puts_the_payload_in_the_value_and_attributes_in_ce_headers() {
    let r = route(
        &[("format", "cloudevents-binary")],
        &[("table.fields.additional.placement", "region:envelope:region")],
        3802,
        &row(Some(PAYLOAD), Some("OrderCreated")),
    )
    .unwrap();
    println!("{r:?}");
    assert_eq!(r.value.as_deref(), Some(PAYLOAD.as_bytes()));
    assert_eq!(r.key.as_deref(), Some(&b"order-42"[..]));
    assert_eq!(&*r.topic, "outbox.event.Order");
    let names: Vec<&str> = r.headers.iter().map(|(n, _)| &**n).collect();
    assert_eq!(
        names,
        [
            "id",
            "content-type",
            "ce_specversion",
            "ce_id",
            "ce_source",
            "ce_type",
            "ce_time",
            "ce_subject",
            "ce_region"
        ]
    );
    assert_eq!(header(&r, "id"), Some(ID));
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    assert_eq!(header(&r, "ce_specversion"), Some("1.0"));
    assert_eq!(header(&r, "ce_id"), Some(ID));
    assert_eq!(header(&r, "ce_source"), Some("/walrelay/shop/app.outbox"));
    assert_eq!(header(&r, "ce_type"), Some("OrderCreated"));
    assert_eq!(header(&r, "ce_time"), Some("2025-12-01T18:00:00.123456Z"));
    assert_eq!(header(&r, "ce_subject"), Some("order-42"));
    assert_eq!(header(&r, "ce_region"), Some("eu"));
}

#[test]
fn cloudevents_structured_inlines_json_and_base64s_bytes() {
    let r = route(
        &[("format", "cloudevents-structured"), ("source", "/orders/${database}")],
        &[("table.fields.additional.placement", "region:envelope:region")],
        3802,
        &row(Some(PAYLOAD), Some("OrderCreated")),
    )
    .unwrap();
    let text = std::str::from_utf8(r.value.as_deref().unwrap()).unwrap();
    println!("{text}");
    let v: serde_json::Value = serde_json::from_str(text).expect("the value is JSON");
    assert_eq!(
        v,
        serde_json::json!({
            "specversion": "1.0", "id": ID, "source": "/orders/shop", "type": "OrderCreated",
            "time": "2025-12-01T18:00:00.123456Z", "subject": "order-42", "region": "eu",
            "datacontenttype": "application/json", "data": {"total": 12.5, "items": [1, 2]}
        })
    );
    assert_eq!(header(&r, "content-type"), Some("application/cloudevents+json; charset=UTF-8"));
    assert_eq!(header(&r, "id"), Some(ID));

    // bytea: data_base64; text: a JSON string.
    let bytes =
        route(&[("format", "cloudevents-structured")], &[], 17, &row(Some("\\x00ff41"), Some("T")))
            .unwrap();
    let v: serde_json::Value = serde_json::from_slice(bytes.value.as_deref().unwrap()).unwrap();
    assert_eq!(v["data_base64"], "AP9B");
    assert_eq!(v["datacontenttype"], "application/octet-stream");
    assert!(v.get("data").is_none());
    let text = route(
        &[("format", "cloudevents-structured")],
        &[],
        25,
        &row(Some("hi \"you\""), Some("T")),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(text.value.as_deref().unwrap()).unwrap();
    assert_eq!(
        (v["data"].as_str(), v["datacontenttype"].as_str()),
        (Some("hi \"you\""), Some("text/plain; charset=utf-8"))
    );
}

#[test]
fn cloudevents_structured_checks_text_that_a_json_content_type_claims_is_json() {
    let env = [("format", "cloudevents-structured"), ("content_type", "application/json")];
    let ok = route(&env, &[], 25, &row(Some("[1,2]"), Some("T"))).unwrap();
    let v: serde_json::Value = serde_json::from_slice(ok.value.as_deref().unwrap()).unwrap();
    assert_eq!(v["data"], serde_json::json!([1, 2]));
    let err = route(&env, &[], 25, &row(Some("not json"), Some("T"))).unwrap_err();
    assert!(err.to_string().contains("[envelope] content_type"), "{err}");
}

#[test]
fn protobuf_value_is_an_event_that_prost_decodes() {
    let r = route(
        &[("format", "protobuf")],
        &[("table.fields.additional.placement", "region:envelope:region,type:header:eventType")],
        3802,
        &row(Some(PAYLOAD), Some("OrderCreated")),
    )
    .unwrap();
    assert_eq!(header(&r, "content-type"), Some("application/protobuf"));
    assert_eq!(header(&r, "eventType"), Some("OrderCreated"));
    let e = proto::Event::decode(r.value.clone().unwrap()).expect("an Event");
    println!("{e:?}");
    assert_eq!(e.id, ID);
    assert_eq!(e.aggregate_type, "Order");
    assert_eq!(e.aggregate_id.as_deref(), Some("order-42"));
    assert_eq!(e.event_type.as_deref(), Some("OrderCreated"));
    assert_eq!(e.payload.as_deref(), Some(PAYLOAD.as_bytes()));
    assert_eq!(e.payload_content_type, "application/json");
    assert_eq!(
        e.commit_time,
        Some(prost_types::Timestamp { seconds: 1_764_612_000, nanos: 123_456_000 })
    );
    assert_eq!((e.commit_lsn, e.transaction_id), (0x16B_3748, 771));
    let s = e.source.expect("a source");
    assert_eq!(
        (s.database.as_str(), s.schema.as_str(), s.table.as_str()),
        ("shop", "app", "outbox")
    );
    assert_eq!(s.message_prefix, None);
    assert_eq!(e.additional.get("region").map(String::as_str), Some("eu"));
}

#[test]
fn cloudevents_protobuf_value_is_a_cloudevent_that_prost_decodes() {
    use proto::cloudevents::cloud_event::cloud_event_attribute_value::Attr;
    use proto::cloudevents::cloud_event::Data;
    let r = route(
        &[("format", "cloudevents-protobuf")],
        &[("table.fields.additional.placement", "region:envelope:region")],
        3802,
        &row(Some(PAYLOAD), Some("OrderCreated")),
    )
    .unwrap();
    assert_eq!(header(&r, "content-type"), Some("application/cloudevents+protobuf"));
    let e = proto::cloudevents::CloudEvent::decode(r.value.clone().unwrap()).expect("a CloudEvent");
    println!("{e:?}");
    assert_eq!(
        (e.id.as_str(), e.spec_version.as_str(), e.r#type.as_str()),
        (ID, "1.0", "OrderCreated")
    );
    assert_eq!(e.source, "/walrelay/shop/app.outbox");
    assert_eq!(e.data, Some(Data::TextData(PAYLOAD.into())));
    let attr = |name: &str| e.attributes.get(name).and_then(|v| v.attr.clone());
    assert_eq!(attr("subject"), Some(Attr::CeString("order-42".into())));
    assert_eq!(attr("region"), Some(Attr::CeString("eu".into())));
    assert_eq!(attr("datacontenttype"), Some(Attr::CeString("application/json".into())));
    assert_eq!(
        attr("time"),
        Some(Attr::CeTimestamp(prost_types::Timestamp {
            seconds: 1_764_612_000,
            nanos: 123_456_000
        }))
    );
    let bytes =
        route(&[("format", "cloudevents-protobuf")], &[], 17, &row(Some("\\x00ff"), Some("T")))
            .unwrap();
    let e = proto::cloudevents::CloudEvent::decode(bytes.value.unwrap()).unwrap();
    assert_eq!(e.data, Some(Data::BinaryData(Bytes::from_static(&[0, 0xff]))));
}

#[test]
fn tombstones_stay_tombstones_under_every_format() {
    let router = [("route.tombstone.on.empty.payload", "true")];
    for format in Format::all().map(Format::name) {
        let r =
            route(&[("format", format)], &router, 3802, &row(None, Some("OrderDeleted"))).unwrap();
        println!("{format}: {r:?}");
        assert_eq!(r.value, None, "{format}");
        assert_eq!(r.key.as_deref(), Some(&b"order-42"[..]), "{format}");
        assert_eq!(header(&r, "content-type"), None, "{format}");
        let ce = format.starts_with("cloudevents");
        assert_eq!(header(&r, "ce_type").is_some(), ce, "{format}");
    }
}

#[test]
fn cloudevents_need_a_type_column_and_a_type_value() {
    let encoder =
        setup(&[("format", "cloudevents-binary")], &[("table.field.event.type", "kind")]).unwrap();
    let err = encoder.router().bind(&outbox(3802), &[]).unwrap_err();
    assert!(err.to_string().contains("`kind`") && err.to_string().contains("CloudEvents"), "{err}");
    let err =
        route(&[("format", "cloudevents-binary")], &[], 3802, &row(Some("{}"), None)).unwrap_err();
    assert!(matches!(err, RouteError::NullValue { ref column, .. } if column == "type"), "{err}");
    // protobuf: the type is optional.
    let r = route(&[("format", "protobuf")], &[], 3802, &row(Some("{}"), None)).unwrap();
    assert_eq!(proto::Event::decode(r.value.unwrap()).unwrap().event_type, None);
}

#[test]
fn messages_are_wrapped_with_their_prefix_as_the_source() {
    let content = Bytes::from(format!(
        r#"{{"id":"{ID}","aggregatetype":"Order","aggregateid":"order-42","type":"OrderCreated","payload":{PAYLOAD}}}"#
    ));
    let mut encoder = setup(&[("format", "cloudevents-structured")], &[]).unwrap();
    let rec = encoder.message(&content, "message:outbox", "outbox", &TXN).unwrap();
    let v: serde_json::Value = serde_json::from_slice(rec.value.as_deref().unwrap()).unwrap();
    println!("{v}");
    assert_eq!(v["source"], "/walrelay/shop/message:outbox");
    assert_eq!(v["data"], serde_json::from_str::<serde_json::Value>(PAYLOAD).unwrap());
    let mut encoder = setup(&[("format", "protobuf")], &[]).unwrap();
    let rec = encoder.message(&content, "message:outbox", "outbox", &TXN).unwrap();
    let e = proto::Event::decode(rec.value.unwrap()).unwrap();
    assert_eq!(e.source.unwrap().message_prefix.as_deref(), Some("outbox"));
    let payload: serde_json::Value = serde_json::from_slice(&e.payload.unwrap()).unwrap();
    assert_eq!(payload, serde_json::from_str::<serde_json::Value>(PAYLOAD).unwrap());
}

#[test]
fn options_that_cannot_apply_are_refused_with_the_key_and_the_fix() {
    let refused =
        |envelope: &[(&str, &str)], router: &[(&str, &str)], debezium: &[(&str, &str)]| {
            let err = parse(Some(&opts(envelope)), &opts(router), &opts(debezium)).unwrap_err();
            println!("{err}");
            err.to_string()
        };
    let ce = [("format", "cloudevents-binary")];
    assert!(refused(&ce, &[], &[("value.converter", "json")]).contains("`value.converter`"));
    assert!(refused(&[("format", "protobuf")], &[("table.expand.json.payload", "true")], &[])
        .contains("`table.expand.json.payload`"));
    assert!(refused(&ce, &[("table.field.event.schema.version", "v")], &[])
        .contains("`table.field.event.schema.version`"));
    assert!(refused(&ce, &[("table.fields.additional.placement", "region:envelope:Region")], &[])
        .contains("lower-case"));
    assert!(refused(&ce, &[("table.fields.additional.placement", "region:envelope:source")], &[])
        .contains("would replace"));
    assert!(refused(&ce, &[("table.fields.additional.placement", "type:header:ce_type")], &[])
        .contains("`ce_type`"));
    assert!(refused(&[("format", "avro")], &[], &[]).contains("cloudevents-binary"));
    assert!(refused(&[("formats", "protobuf")], &[], &[]).contains("unknown key `formats`"));
    assert!(refused(&[("source", "/x")], &[], &[]).contains("[envelope] format"));
    assert!(refused(&[("format", "protobuf"), ("source", "/a/${db}")], &[], &[])
        .contains("${db} is not a placeholder"));
    assert!(refused(&[("format", "protobuf"), ("content_type", "json")], &[], &[])
        .contains("media type"));
    // Under Debezium's format an `envelope` placement still needs JsonConverter, as before.
    assert!(refused(&[], &[("table.fields.additional.placement", "region:envelope:r")], &[])
        .contains("value.converter"));
}

#[test]
fn each_format_carries_the_trace_where_its_binding_puts_it() {
    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    // The `region` column holds the span context here.
    let router = [("tracing.span.context.field", "region")];
    let mut tuple = row(Some(PAYLOAD), Some("OrderCreated"));
    let context = format!("traceparent={TP}\ntracestate=a=1");
    tuple.0[5] = Value::Text(Bytes::from(context));
    let structured = route(&[("format", "cloudevents-structured")], &router, 3802, &tuple).unwrap();
    let event: serde_json::Value =
        serde_json::from_slice(structured.value.as_deref().unwrap()).unwrap();
    assert_eq!(event["traceparent"], TP);
    assert_eq!(event["tracestate"], "a=1");
    assert_eq!(header(&structured, "traceparent"), None);
    let binary = route(&[("format", "cloudevents-binary")], &router, 3802, &tuple).unwrap();
    assert_eq!(header(&binary, "ce_traceparent"), Some(TP));
    assert_eq!(header(&binary, "ce_tracestate"), Some("a=1"));
    let protobuf = route(&[("format", "protobuf")], &router, 3802, &tuple).unwrap();
    assert_eq!(header(&protobuf, "traceparent"), Some(TP));
    let debezium = route(&[("format", "debezium")], &router, 3802, &tuple).unwrap();
    let names: Vec<&str> = debezium.headers.iter().map(|(n, _)| &**n).collect();
    assert_eq!(names, ["traceparent", "tracestate", "id"]);
}
