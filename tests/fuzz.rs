//! Fuzzing every input walrelay parses, against two oracles: no panic, and no secret in
//! stdout, stderr or the log. Each input runs a few thousand mutated cases in
//! process and a sample of them through the real `walrelay` binary (`check`, `run`, `status`,
//! `import-debezium`), whose stdout and stderr (the log) are scanned. Seeds are the docs'
//! examples with a secret planted; see tests/support/fuzz.rs for the mutations and oracles.
//! pgoutput bytes are fuzzed beside the decoder (src/pgoutput/tests.rs); HTTP requests with the server.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use proptest::prelude::*;
use walrelay::config::Config;
use walrelay::import::{import, Format};

use crate::support::fuzz::{
    code_blocks, generate, mutated, run_all, sample, Invocation, Seed, Tally, SECRET,
};
use crate::support::scratch_dir;

/// How long a sample of binary runs may take at most (they run side by side; `check` waits 5 s
/// for an unreachable broker).
const BINARY_DEADLINE: Duration = Duration::from_secs(40);

const DOCS: &[&str] = &[
    include_str!("../README.md"),
    include_str!("../docs/configuration.md"),
    include_str!("../docs/operations.md"),
    include_str!("../docs/table-less-outbox.md"),
    include_str!("../docs/migrating-from-debezium.md"),
];

/// A TOML basic string holding `text` exactly.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A docs example made runnable against nothing (every server at an unreachable local port)
/// with the secret planted in the URL and in `[kafka] "sasl.password"`.
fn planted_toml(block: &str) -> Seed {
    let mut text = block
        .replace("postgres://walrelay@", "postgres://walrelay:SECRET@")
        .replace("db.internal:5432", "127.0.0.1:1")
        .replace("127.0.0.1:5432", "127.0.0.1:1")
        .replace("db-a:5432", "127.0.0.1:1")
        .replace("db-b:5432", "127.0.0.2:1")
        .replace("kafka-1:9092,kafka-2:9092", "127.0.0.1:1")
        .replace("127.0.0.1:9092", "127.0.0.1:1")
        .replace("0.0.0.0:9187", "127.0.0.1:0")
        .replace("127.0.0.1:9187", "127.0.0.1:0");
    if !text.contains("[source]") {
        text = format!("[source]\nurl = \"postgres://walrelay:SECRET@127.0.0.1:1/app\"\n{text}");
    }
    match text.find("[kafka]") {
        Some(at) => {
            let line_end = text[at..].find('\n').map(|i| at + i + 1).unwrap_or(text.len());
            text.insert_str(line_end, "\"sasl.password\" = \"SECRET\"\n");
        }
        None => text.push_str(
            "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n\"sasl.password\" = \"SECRET\"\n",
        ),
    }
    Seed::new(text, &["walrelay:SECRET@", "\"sasl.password\" = \"SECRET\""])
}

fn toml_seeds() -> Vec<Seed> {
    let mut seeds: Vec<Seed> =
        DOCS.iter().flat_map(|doc| code_blocks(doc, "toml")).map(|b| planted_toml(&b)).collect();
    assert!(seeds.len() >= 6, "the docs' TOML examples: {}", seeds.len());
    // A file whose URL once leaked its password in an error, and a key=value URL.
    seeds.push(Seed::new(
        "[source]\nurl = \"postgres://walrelay:SECRET@127.0.0.1:1/app\"\n[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n",
        &["walrelay:SECRET@"],
    ));
    seeds.push(Seed::new(
        "[source]\nurl = \"host=127.0.0.1 port=1 dbname=app user=walrelay password=SECRET\"\n[kafka]\nbootstrap.servers = \"127.0.0.1:1\"\nssl.key.password = \"SECRET\"\n",
        &["user=walrelay password=SECRET", "ssl.key.password = \"SECRET\""],
    ));
    seeds
}

/// What walrelay prints for a configuration: the error (`Display` and `Debug`), or the loaded
/// config's `Debug`.
fn config_output(result: Result<Config, walrelay::config::ConfigError>) -> String {
    match result {
        Ok(config) => format!("{config:?}"),
        Err(e) => format!("{e}\n{e:?}"),
    }
}

#[test]
fn fuzz_toml_config_never_panics_or_prints_a_secret() {
    let seeds = toml_seeds();
    let cases = generate(mutated(seeds.clone()), 1000);
    let mut tally = Tally::new("toml config");
    for (which, text) in &cases {
        tally.case(text, &seeds[*which].guarded(text), || config_output(Config::parse(text)));
    }
    let dir = scratch_dir("fuzz-toml");
    let picked = sample(&cases, 16);
    let invocations: Vec<Invocation> = picked
        .iter()
        .enumerate()
        .map(|(i, (_, text))| {
            let path = dir.join(format!("case-{i}.toml"));
            std::fs::write(&path, text).unwrap();
            // Half `check`, half `run` (stopped after a while: it retries an unreachable
            // server), so the log of a running relay is scanned too.
            let command = if i % 2 == 0 { "check" } else { "run" };
            Invocation {
                args: vec![command.into(), "--config".into(), path.display().to_string()],
                env: Vec::new(),
                stop_after: (command == "run").then_some(Duration::from_secs(4)),
            }
        })
        .collect();
    for ((which, text), run) in picked.iter().zip(run_all(&dir, &invocations, BINARY_DEADLINE)) {
        tally.binary_case(text, &seeds[*which].guarded(text), &run);
    }
    tally.finish();
}

const ENV_BASE: &str = "[source]\nurl = \"postgres://walrelay@127.0.0.1:1/app\"\n[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n";

/// The variables that carry the secret, as a Kubernetes Secret would set them.
const SECRET_VARIABLES: &[&str] = &[
    "WALRELAY_KAFKA_SASL__PASSWORD",
    "WALRELAY_KAFKA_SSL__KEY__PASSWORD",
    "WALRELAY_KAFKA_SASL__OAUTHBEARER__CLIENT__SECRET",
];

fn env_variable() -> impl Strategy<Value = (OsString, OsString)> {
    let sections = prop::sample::select(vec![
        "SOURCE",
        "OUTBOX",
        "ROUTER",
        "DEBEZIUM",
        "KAFKA",
        "LIMITS",
        "HTTP",
        "DEAD_LETTER",
        "RETENTION",
        "SORCE",
    ]);
    let keys = prop::sample::select(vec![
        "URL",
        "SLOT",
        "TABLE",
        "TABLES",
        "LINGER__MS",
        "ACKS",
        "INFLIGHT_RECORDS",
        "LISTEN",
        "TOPIC",
        "KEEP",
        "ROUTE__TOPIC__REPLACEMENT",
        "X",
        "",
    ]);
    let url = mutated(vec![Seed::new(
        "postgres://walrelay:SECRET@127.0.0.1:1/app?sslmode=disable",
        &["walrelay:SECRET@"],
    )])
    .prop_map(|(_, url)| url.replace(&format!("{SECRET}A"), SECRET));
    prop_oneof![
        prop::sample::select(SECRET_VARIABLES.to_vec())
            .prop_map(|name| (OsString::from(name), OsString::from(SECRET))),
        url.prop_map(|url| (OsString::from("WALRELAY_SOURCE_URL"), OsString::from(url))),
        (sections, keys, "[ -~]{0,12}").prop_map(|(section, key, value)| {
            (OsString::from(format!("WALRELAY_{section}_{key}")), OsString::from(value))
        }),
        (prop::sample::select(SECRET_VARIABLES.to_vec()), any::<u8>()).prop_map(|(name, b)| {
            let mut value = SECRET.as_bytes().to_vec();
            value.push(0x80 | b);
            (OsString::from(name), OsString::from_vec(value))
        }),
        any::<u8>().prop_map(|b| {
            (
                OsString::from_vec(vec![
                    b'W',
                    b'A',
                    b'L',
                    b'R',
                    b'E',
                    b'L',
                    b'A',
                    b'Y',
                    b'_',
                    0x80 | b,
                ]),
                OsString::from("x"),
            )
        }),
        "[A-Z_]{1,12}".prop_map(|name| (OsString::from(name), OsString::from_vec(vec![0xff]))),
    ]
}

/// The secret, when every variable holding it holds it where it was planted: in a secret
/// variable, or as the password of `WALRELAY_SOURCE_URL`.
fn env_guarded(vars: &[(OsString, OsString)]) -> Vec<String> {
    let holding: Vec<(String, String)> = vars
        .iter()
        .map(|(n, v)| (n.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .filter(|(_, value)| value.contains(SECRET))
        .collect();
    let planted = holding.iter().all(|(name, value)| {
        SECRET_VARIABLES.contains(&name.as_str())
            || (name == "WALRELAY_SOURCE_URL"
                && value.matches(SECRET).count() == 1
                && value.contains(&format!("walrelay:{SECRET}@")))
    });
    if planted && !holding.is_empty() {
        vec![SECRET.to_string()]
    } else {
        Vec::new()
    }
}

#[test]
fn fuzz_environment_overlay_never_panics_or_prints_a_secret() {
    let cases = generate(proptest::collection::vec(env_variable(), 1..6), 1000);
    let mut tally = Tally::new("environment overlay");
    for vars in &cases {
        let shown = format!("{vars:?}");
        tally.case(&shown, &env_guarded(vars), || {
            config_output(Config::parse_with_env(ENV_BASE, vars.clone()))
        });
    }
    let dir = scratch_dir("fuzz-env");
    let config = dir.join("walrelay.toml");
    std::fs::write(&config, ENV_BASE).unwrap();
    // A process environment cannot hold a name with `=` or a NUL anywhere.
    let spawnable = |vars: &&Vec<(OsString, OsString)>| {
        vars.iter().all(|(k, v)| {
            !k.is_empty()
                && !k.as_encoded_bytes().contains(&b'=')
                && !k.as_encoded_bytes().contains(&0)
                && !v.as_encoded_bytes().contains(&0)
        })
    };
    let picked: Vec<Vec<(OsString, OsString)>> =
        sample(&cases.iter().filter(spawnable).cloned().collect::<Vec<_>>(), 12);
    let invocations: Vec<Invocation> = picked
        .iter()
        .map(|vars| Invocation {
            args: vec!["check".into(), "--config".into(), config.display().to_string()],
            env: vars.clone(),
            stop_after: None,
        })
        .collect();
    for (vars, run) in picked.iter().zip(run_all(&dir, &invocations, BINARY_DEADLINE)) {
        tally.binary_case(&format!("{vars:?}"), &env_guarded(vars), &run);
    }
    tally.finish();
}

/// The Event Router overrides of the golden configurations (tests/fixtures/debezium/README.md),
/// one list of `key=value` per configuration.
fn golden_router_options() -> Vec<Vec<(String, String)>> {
    let readme = include_str!("fixtures/debezium/README.md");
    let rows: Vec<Vec<(String, String)>> = readme
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let cell = row.split('|').nth(2).unwrap_or("");
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect()
        })
        .collect();
    assert!(rows.len() >= 8, "golden configurations: {}", rows.len());
    rows
}

/// A connector's options with the secret planted in the database and producer passwords.
fn connector_options(router: &[(String, String)]) -> Vec<(String, String)> {
    let mut options: Vec<(String, String)> = [
        ("connector.class", "io.debezium.connector.postgresql.PostgresConnector"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", "1"),
        ("database.user", "debezium"),
        ("database.password", "SECRET"),
        ("database.dbname", "app"),
        ("plugin.name", "pgoutput"),
        ("slot.name", "debezium"),
        ("topic.prefix", "app"),
        ("table.include.list", "public.outbox"),
        ("transforms", "outbox"),
        ("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"),
        ("producer.override.sasl.password", "SECRET"),
        ("producer.override.bootstrap.servers", "127.0.0.1:1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in router {
        let key = if k.contains("converter") || k == "extended.headers.enabled" {
            k.clone()
        } else {
            format!("transforms.outbox.{k}")
        };
        options.push((key, v.clone()));
    }
    options
}

fn json_object(options: &[(String, String)]) -> String {
    let body: Vec<String> =
        options.iter().map(|(k, v)| format!("    {k:?}: {}", serde_json_string(v))).collect();
    format!("{{\n{}\n  }}", body.join(",\n"))
}

fn serde_json_string(v: &str) -> String {
    // Debug quoting is valid JSON for the printable ASCII the seeds use.
    format!("{v:?}")
}

fn json_seeds() -> Vec<Seed> {
    let entries =
        ["\"database.password\": \"SECRET\"", "\"producer.override.sasl.password\": \"SECRET\""];
    let mut seeds = Vec::new();
    for (i, router) in golden_router_options().iter().enumerate() {
        let object = json_object(&connector_options(router));
        // The REST form, the flat form, and the settings under a misspelt key.
        let key = ["config", "config", "config2"][i % 3];
        let text = if i % 3 == 1 {
            object.replace("\n    ", "\n  ")
        } else {
            format!("{{\n  \"name\": \"outbox-connector\",\n  {key:?}: {object}\n}}\n")
        };
        seeds.push(Seed::new(text, &entries));
    }
    seeds
}

/// What `import-debezium` prints: the TOML and the warnings, or the error.
fn import_output(text: &str, format: Format) -> String {
    match import(text, Some(format), "input") {
        Ok(imported) => format!("{}\n{}", imported.toml, imported.warnings.join("\n")),
        Err(e) => e,
    }
}

fn fuzz_import(input: &'static str, seeds: Vec<Seed>, format: Format, extension: &str) {
    let cases = generate(mutated(seeds.clone()), 300);
    let mut tally = Tally::new(input);
    for (which, text) in &cases {
        tally.case(text, &seeds[*which].guarded(text), || import_output(text, format));
    }
    let dir = scratch_dir("fuzz-import");
    let picked = sample(&cases, 16);
    let invocations: Vec<Invocation> = picked
        .iter()
        .enumerate()
        .map(|(i, (_, text))| {
            let path = dir.join(format!("case-{i}.{extension}"));
            std::fs::write(&path, text).unwrap();
            Invocation {
                args: vec!["import-debezium".into(), path.display().to_string()],
                env: Vec::new(),
                stop_after: None,
            }
        })
        .collect();
    for ((which, text), run) in picked.iter().zip(run_all(&dir, &invocations, BINARY_DEADLINE)) {
        tally.binary_case(text, &seeds[*which].guarded(text), &run);
    }
    tally.finish();
}

#[test]
fn fuzz_connector_json_never_panics_or_prints_a_secret() {
    fuzz_import("connector json", json_seeds(), Format::Json, "json");
}

fn properties_seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    for (i, router) in golden_router_options().iter().enumerate() {
        let options = connector_options(router);
        // Kafka Connect's form, and Debezium Server's application.properties.
        let text: String = if i % 2 == 0 {
            options.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
        } else {
            let mut text = String::from("debezium.sink.type=kafka\n");
            for (k, v) in &options {
                let key = if let Some(rest) = k.strip_prefix("producer.override.") {
                    format!("debezium.sink.kafka.producer.{rest}")
                } else if let Some(rest) = k.strip_prefix("transforms") {
                    format!("debezium.transforms{rest}")
                } else {
                    format!("debezium.source.{k}")
                };
                text.push_str(&format!("{key}={v}\n"));
            }
            text
        };
        seeds.push(Seed::new(text, &["database.password=SECRET", "sasl.password=SECRET"]));
    }
    seeds
}

#[test]
fn fuzz_debezium_properties_never_panics_or_prints_a_secret() {
    fuzz_import("debezium properties", properties_seeds(), Format::Properties, "properties");
}

fn libpq_seeds() -> Vec<Seed> {
    [
        ("postgres://walrelay:SECRET@127.0.0.1:1/app", "walrelay:SECRET@"),
        (
            "postgresql://walrelay:SECRET@127.0.0.1:1,127.0.0.2:1/app?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
            "walrelay:SECRET@",
        ),
        (
            "host=127.0.0.1,127.0.0.2 port=1 dbname=app user=walrelay password=SECRET target_session_attrs=read-write",
            "password=SECRET",
        ),
        ("host=127.0.0.1 port=1 password='SECRET' user=walrelay dbname=app", "password='SECRET'"),
        ("postgres://walrelay@127.0.0.1:1/app?password=SECRET&sslmode=prefer", "password=SECRET"),
    ]
    .iter()
    .map(|(url, entry)| Seed::new(*url, &[entry]))
    .collect()
}

fn libpq_config(url: &str) -> String {
    format!(
        "[source]\nurl = {}\n[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n",
        toml_string(url)
    )
}

#[test]
fn fuzz_libpq_urls_never_panic_or_print_a_secret() {
    let seeds = libpq_seeds();
    let cases = generate(mutated(seeds.clone()), 1000);
    let mut tally = Tally::new("libpq url");
    for (which, url) in &cases {
        tally.case(url, &seeds[*which].guarded(url), || {
            // The load's outcome, and the source as `check` and `status` describe a loaded one.
            match Config::parse(&libpq_config(url)) {
                Ok(config) => format!("{config:?}\n{}", walrelay::config::redact_url(url)),
                Err(e) => format!("{e}\n{e:?}"),
            }
        });
    }
    // Through `status` (it connects at once and prints where it tried), with the password also
    // in PGPASSWORD: neither may show.
    let dir = scratch_dir("fuzz-libpq");
    let pgpassword = format!("{SECRET}PG");
    let picked = sample(&cases, 16);
    let invocations: Vec<Invocation> = picked
        .iter()
        .enumerate()
        .map(|(i, (_, url))| {
            let path = dir.join(format!("case-{i}.toml"));
            std::fs::write(&path, libpq_config(url)).unwrap();
            Invocation {
                args: vec!["status".into(), "--config".into(), path.display().to_string()],
                env: vec![("PGPASSWORD".into(), pgpassword.clone().into())],
                stop_after: None,
            }
        })
        .collect();
    for ((which, url), run) in picked.iter().zip(run_all(&dir, &invocations, BINARY_DEADLINE)) {
        let mut secrets = seeds[*which].guarded(url);
        secrets.push(pgpassword.clone());
        tally.binary_case(url, &secrets, &run);
    }
    tally.finish();
}
