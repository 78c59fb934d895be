use super::*;

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACE: [u8; 16] = [
    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c,
];
const SPAN: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];

fn ok(text: &str) -> SpanContext {
    parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn a_bare_traceparent_is_read() {
    let c = ok(TP);
    assert_eq!((c.trace_id, c.span_id, c.sampled, c.state), (TRACE, SPAN, true, None));
    // Surrounding white space (a trailing newline from a client) is not part of the value.
    assert_eq!(ok(&format!("  {TP}\n")).span_id, SPAN);
    assert!(!ok(&TP.replace("-01", "-00")).sampled);
    // Only bit 0 is a flag level 1 defines.
    assert!(ok(&TP.replace("-01", "-03")).sampled);
}

#[test]
fn properties_text_as_properties_store_writes_it_is_read() {
    // `Properties.store` writes a date comment and escapes `:` and `=` in values.
    let text = format!(
        "#Fri Jun 06 12:00:00 UTC 2025\ntracestate=congo\\=t61rcWkgMzE,rojo\\=00f067aa0ba902b7\n\
         traceparent={TP}\n"
    );
    let c = ok(&text);
    assert_eq!((c.trace_id, c.span_id, c.sampled), (TRACE, SPAN, true));
    assert_eq!(c.state.as_deref(), Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
}

#[test]
fn properties_syntax_variants_are_read_as_java_reads_them() {
    for text in [
        format!("traceparent:{TP}"),
        format!("traceparent {TP}"),
        format!("  traceparent  =  {TP}"),
        format!("! comment\r\ntraceparent={TP}\r\n"),
        "traceparent=00-0af7651916cd43dd\\\n    8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        format!("\\u0074raceparent={TP}"),
        format!(
            "traceparent=00-0000000000000000000000000000000a-0000000000000001-01\ntraceparent={TP}"
        ),
    ] {
        assert_eq!(ok(&text).span_id, SPAN, "{text:?}");
    }
}

#[test]
fn later_versions_may_append_fields() {
    assert_eq!(ok(&format!("01{}-what-comes-next", &TP[2..])).span_id, SPAN);
    assert_eq!(ok(&format!("cc{}", &TP[2..])).span_id, SPAN);
}

#[test]
fn malformed_contexts_are_refused_with_a_reason_that_holds_no_value() {
    let secret = "hunter2-hunter2-hunter2-hunter2-hunter2-hunter2-hunter2-hunter2";
    let cases: Vec<(String, &str)> = vec![
        (secret.to_owned(), "is not `version"),
        ("hunter2".to_owned(), "shorter"),
        (TP.to_uppercase(), "lower-case"),
        (TP.replace("0af7651916cd43dd8448eb211c80319c", &"0".repeat(32)), "trace id is all zeros"),
        (TP.replace("b7ad6b7169203331", &"0".repeat(16)), "parent id is all zeros"),
        (format!("ff{}", &TP[2..]), "version is ff"),
        (format!("{TP}-extra"), "longer than 55"),
        (format!("01{}x", &TP[2..]), "runs on"),
        (TP.replace('-', "_"), "is not `version-traceid-parentid-flags`"),
        (TP.replace("-01", "-0x"), "flags"),
        ("tracestate=a=b".to_owned(), "no `traceparent` key"),
        ("# only a comment\n".to_owned(), "keys found: none"),
        (String::new(), "keys found: none"),
        (format!("traceparent={TP}\\u00zz"), "\\uXXXX"),
        (format!("x-b3-traceid=1\nTraceparent={TP}"), "keys found: `x-b3-traceid`, `Traceparent`"),
    ];
    for (text, why) in cases {
        let err = parse(text.as_bytes()).expect_err(&text).to_string();
        assert!(err.contains(why), "{text:?}: {err}");
        assert!(!err.contains("hunter2") && !err.contains(&TP[3..35]), "{err}");
    }
    assert_eq!(parse(&[0xff, 0xfe]), Err(Invalid::NotText));
}

#[test]
fn a_long_key_is_cut_in_the_error() {
    let err = parse(format!("{}=1", "k".repeat(100)).as_bytes()).unwrap_err().to_string();
    assert!(err.contains(&format!("`{}…`", "k".repeat(32))), "{err}");
    assert!(!err.contains(&"k".repeat(33)), "{err}");
}

#[test]
fn an_invalid_tracestate_is_dropped_and_the_traceparent_kept() {
    for state in ["", "UPPER=1", "a=", "=b", "a=b=c", "a=b,c", "a@b@c=1", "1a=ok,"] {
        let c = ok(&format!("traceparent={TP}\ntracestate={state}"));
        let expected = (state == "1a=ok,").then(|| "1a=ok".to_owned());
        assert_eq!(c.state, expected, "{state:?}");
    }
    let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    assert_eq!(tracestate(&many.join(",")), None);
    assert_eq!(tracestate("a=\u{7f}"), None);
    // Optional white space around members is not part of them; inside a value, a space is.
    assert_eq!(tracestate(" a=1 ,\tb@vendor=x y "), Some("a=1,b@vendor=x y".into()));
    assert_eq!(tracestate(" a=1 ,\tb@vendor=x.y "), Some("a=1,b@vendor=x.y".into()));
}

#[test]
fn properties_reader_follows_java() {
    let p = properties("a=1\n# c\n  b : 2\nc\\\n  d=3\ne\\=f=4\\n\ng\n").unwrap();
    let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(p, [("a", "1"), ("b", "2"), ("cd", "3"), ("e=f", "4\n"), ("g", "")]);
}
