//! docs/configuration.md and docker/ kept in step with the code: every key the code accepts is
//! documented, every documented key is one the parser knows, and the docker files parse and
//! mount a configuration walrelay accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// docs/configuration.md against the code
// ---------------------------------------------------------------------------------------------

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// The string literals inside the first `[...]` after `from` in `text`.
fn literals_in_brackets(text: &str) -> Vec<String> {
    let start = text.find('[').expect("a [ list");
    let end = start + text[start..].find(']').expect("a ] after [");
    let list = &text[start..end];
    list.split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Every key the configuration code accepts, by section:
///
/// * walrelay's own sections: `walrelay::config::owned_section_keys()`, the field names of the
///   `deny_unknown_fields` serde structs — the very lists that make every other key an error.
/// * `src/router/options.rs`: `ROUTER_KEYS` and `DEBEZIUM_KEYS` (scraped, which keeps that file
///   untouched by this test), which `check_keys` enforces the same way for `[router]` and
///   `[debezium]`.
///
/// It can't silently pass: every section must yield keys, and the keys are then fed to
/// `Config::parse` one by one, which must not call any of them unknown. `[kafka]` passes
/// librdkafka's own properties through; the keys walrelay itself owns or requires there
/// (`RELAY_OWNED_KAFKA`, `bootstrap.servers`) are checked instead.
fn keys_in_code() -> Vec<(String, Vec<String>)> {
    // walrelay's own sections: the keys their serde structs declare.
    let mut sections: Vec<(String, Vec<String>)> = walrelay::config::owned_section_keys()
        .into_iter()
        .map(|(name, keys)| {
            assert!(!keys.is_empty(), "no keys for [{name}]");
            (name.to_string(), keys.iter().map(|k| k.to_string()).collect())
        })
        .collect();
    let options = repo_file("src/router/options.rs");
    for (name, constant) in [("router", "ROUTER_KEYS"), ("debezium", "DEBEZIUM_KEYS")] {
        let at = options.find(&format!("const {constant}: &[&str] = &[")).unwrap_or_else(|| {
            panic!("{constant} not found in src/router/options.rs; update keys_in_code()")
        });
        let keys = literals_in_brackets(&options[at + constant.len() + 12..]);
        assert!(keys.len() > 3, "too few keys scraped for [{name}]: {keys:?}");
        sections.push((name.to_string(), keys));
    }
    let envelope = repo_file("src/envelope/config.rs");
    let list = "const KEYS: &[&str] = &";
    let at = envelope
        .find(list)
        .expect("KEYS not found in src/envelope/config.rs; update keys_in_code()");
    sections.push(("envelope".to_string(), literals_in_brackets(&envelope[at + list.len()..])));
    let names: BTreeSet<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
    for expected in
        ["source", "outbox", "limits", "http", "dead_letter", "router", "debezium", "envelope"]
    {
        assert!(names.contains(expected), "no keys scraped for [{expected}]: {names:?}");
    }
    sections
}

/// `## [section]` headings of configuration.md and the `` `key` `` in the first column of the
/// table rows under each.
fn keys_in_doc(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("## [") {
            let name = rest.split(']').next().unwrap().to_string();
            out.push((name, BTreeSet::new()));
        } else if let (Some(rest), Some(last)) = (line.strip_prefix("| `"), out.last_mut()) {
            last.1.insert(rest.split('`').next().unwrap().to_string());
        }
    }
    out
}

#[test]
fn configuration_md_documents_every_key_the_code_accepts() {
    let doc = repo_file("docs/configuration.md");
    let documented = keys_in_doc(&doc);
    let section = |name: &str| {
        documented
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, keys)| keys.clone())
            .unwrap_or_else(|| panic!("docs/configuration.md has no `## [{name}]` section"))
    };
    let mut missing = Vec::new();
    for (name, keys) in keys_in_code() {
        let doc_keys = section(&name);
        for key in keys {
            if !doc_keys.contains(&key) {
                missing.push(format!("[{name}] {key}"));
            }
        }
    }
    let kafka = section("kafka");
    for (key, _, _) in walrelay::config::RELAY_OWNED_KAFKA {
        if !kafka.contains(*key) {
            missing.push(format!("[kafka] {key}"));
        }
    }
    for key in ["bootstrap.servers", "message.timeout.ms"] {
        if !kafka.contains(key) {
            missing.push(format!("[kafka] {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md lacks these keys (add a table row each):\n{}",
        missing.join("\n")
    );
}

/// Guards the scraper: each scraped key, set alone, is one `Config::parse` knows (an error may
/// still come from the value or another rule, but never "unknown key").
#[test]
fn configuration_keys_scraped_from_the_code_are_keys_the_parser_knows() {
    const BASE: &str =
        "[source]\nurl = \"postgres://u@h/db\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n";
    for (name, keys) in keys_in_code() {
        for key in keys {
            let text = if name == "source" {
                format!("[source]\nurl = \"postgres://u@h/db\"\n\"{key}\" = \"x\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n")
            } else {
                format!("{BASE}[{name}]\n\"{key}\" = \"x\"\n")
            };
            match walrelay::config::Config::parse(&text) {
                Err(walrelay::config::ConfigError::UnknownKey { key: k, .. })
                    if k == key || k == name =>
                {
                    panic!(
                        "[{name}] {key} was scraped from the code but the parser calls it unknown"
                    )
                }
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// docker/
// ---------------------------------------------------------------------------------------------

/// A block-style YAML mapping as nested `path → scalar` entries (`services.postgres.image`), list
/// items as `path[]`. Enough for compose files, which is all it is for: serde_yaml is not a
/// dependency, and no Docker engine runs here to `docker compose config` the file.
fn yaml_paths(text: &str) -> Vec<(String, String)> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    let mut block_scalar: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let indent = raw.len() - raw.trim_start().len();
        let line = raw.trim();
        if let Some(level) = block_scalar {
            if line.is_empty() || indent > level {
                continue;
            }
            block_scalar = None;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !raw.starts_with('\t') && !raw.contains("\t"),
            "line {}: tabs are not YAML indentation",
            n + 1
        );
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent = stack.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(".");
        if let Some(item) = line.strip_prefix("- ") {
            out.push((format!("{parent}[]"), item.trim().to_string()));
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("line {}: expected `key: value` or `- item`: {raw}", n + 1));
        assert!(!key.contains(' ') || key.starts_with('"'), "line {}: odd key {key:?}", n + 1);
        let path = if parent.is_empty() { key.to_string() } else { format!("{parent}.{key}") };
        let value = value.trim();
        if value.is_empty() {
            stack.push((indent, key.to_string()));
        } else {
            if value == "|" || value == ">" || value == "|-" || value == ">-" {
                block_scalar = Some(indent);
            }
            out.push((path, value.to_string()));
        }
    }
    out
}

#[test]
fn docker_files_parse_and_the_mounted_config_is_accepted() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docker");
    let compose = repo_file("docker/compose.yaml");
    let paths = yaml_paths(&compose);
    let get = |path: &str| {
        paths.iter().filter(|(p, _)| p == path).map(|(_, v)| v.as_str()).collect::<Vec<_>>()
    };
    let has = |path: &str, needle: &str| get(path).iter().any(|v| v.contains(needle));

    for service in ["postgres", "kafka", "walrelay", "writer"] {
        assert!(
            paths.iter().any(|(p, _)| p.starts_with(&format!("services.{service}."))),
            "no service {service}"
        );
    }
    assert!(has("services.postgres.image", "postgres:16"), "{paths:?}");
    assert!(has("services.postgres.command[]", "wal_level=logical"), "{paths:?}");
    assert!(has("services.kafka.image", "apache/kafka"), "{paths:?}");
    assert!(
        has("services.kafka.environment.KAFKA_PROCESS_ROLES", "broker,controller"),
        "KRaft: {paths:?}"
    );
    assert!(has("services.walrelay.build.dockerfile", "Dockerfile"), "{paths:?}");
    assert!(
        has("services.walrelay.volumes[]", "./walrelay.toml:/etc/walrelay/walrelay.toml"),
        "{paths:?}"
    );
    assert!(has("services.writer.volumes[]", "./writer.sql:"), "{paths:?}");
    // Everything the compose file mounts exists.
    for (path, value) in paths.iter().filter(|(p, _)| p.ends_with("volumes[]")) {
        let source = value.trim_matches('"').split(':').next().unwrap();
        if let Some(rel) = source.strip_prefix("./") {
            assert!(root.join(rel).exists(), "{path}: {source} does not exist");
        }
    }

    let dockerfile = repo_file("docker/Dockerfile");
    let froms: Vec<&str> = dockerfile.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "multi-stage: {froms:?}");
    assert!(
        froms[0].contains("rust:1-bookworm") && froms[1].contains("debian:bookworm-slim"),
        "{froms:?}"
    );
    assert!(dockerfile.lines().any(|l| l.starts_with("USER ") && !l.contains("root")), "non-root");
    assert!(dockerfile
        .contains(r#"ENTRYPOINT ["walrelay", "run", "--config", "/etc/walrelay/walrelay.toml"]"#));
    let (build, runtime) = dockerfile.split_at(dockerfile.find(froms[1]).expect("second stage"));
    for needed in ["build-essential", "pkg-config", "zlib1g-dev", "libssl-dev", "libsasl2-dev"] {
        assert!(build.contains(needed), "the builder needs {needed} for librdkafka");
    }
    // librdkafka links OpenSSL and Cyrus SASL dynamically (SASL_SSL, SCRAM, GSSAPI).
    for needed in ["libssl3", "libsasl2-2"] {
        assert!(runtime.contains(needed), "the runtime image needs {needed}");
    }

    // The mounted config is one walrelay loads. (`walrelay check` would additionally need the
    // compose services running; here the file's shape is what can be checked.)
    let toml = repo_file("docker/walrelay.toml");
    let config = walrelay::config::Config::parse(&toml)
        .unwrap_or_else(|e| panic!("docker/walrelay.toml: {e}"));
    assert_eq!(config.kafka.properties["bootstrap.servers"], "kafka:9092");
    assert!(config.source.url.contains("@postgres:5432/"), "the compose service name");
    assert_eq!(config.outbox.tables, [walrelay::config::TableName::new("public", "outbox")]);

    // The writer inserts into the table the config names, with the columns the router reads.
    let writer = repo_file("docker/writer.sql");
    assert!(
        writer
            .contains("INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)"),
        "{writer}"
    );
    assert!(
        has("services.writer.image", "postgres:16"),
        "the writer uses psql from the postgres image"
    );
}
