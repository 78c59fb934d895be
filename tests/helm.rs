//! The Helm chart in deploy/helm/walrelay, rendered by helm itself and checked by the tools that
//! read what it renders: `helm lint`; `kubernetes-validate --strict` on every rendering of the
//! matrix (guarantee × replicas × console × audit); promtool on its PrometheusRule; walrelay's own
//! parser, and `walrelay check`, on its walrelay.toml. Then what a user relies on — secrets only
//! from Secrets, a grace period over the stop budget, the project's alerts, the audit CronJob,
//! upgrades that finish, a disruption budget that never blocks a drain, the NetworkPolicy, a
//! non-root read-only pod — each checked by a function that is also shown a rendering it must
//! refuse.
//!
//! helm and kubernetes-validate come from scripts/install-test-deps.sh. No cluster runs here:
//! what a rollout does is modelled from the Deployment controller's arithmetic, and said so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use walrelay::config::{Config, ConsoleMode, Guarantee};

use crate::ops_docs::{kubeval_venv, repo, run, yaml_documents};

mod monitoring;
mod pods;
mod secrets;
mod sinks;
mod upgrades;

const CHART: &str = "deploy/helm/walrelay";
const RELEASE: &str = "orders";
const NAMESPACE: &str = "shop";
/// The chart's name for the release's objects.
const FULLNAME: &str = "orders-walrelay";

/// The helm scripts/install-test-deps.sh builds, or `$HELM`.
fn helm() -> PathBuf {
    std::env::var_os("HELM").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".local/walrelay-helm/bin/helm")
    })
}

/// Values every rendering below starts from: a config with TLS and SASL to Kafka and a schema
/// registry, and every secret the chart maps, by reference to Secrets of the namespace.
const VALUES: &str = r#"
config:
  source:
    url: "postgres://walrelay@postgres.db.svc:5432/orders?sslmode=verify-full&sslrootcert=/etc/walrelay-tls/postgres/ca.crt"
    slot: orders
    publication: orders
  kafka:
    bootstrap.servers: "kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092"
    security.protocol: SASL_SSL
    sasl.mechanisms: SCRAM-SHA-512
    sasl.username: walrelay
    linger.ms: 5
  debezium:
    value.converter: avro
  schema_registry:
    url: "http://registry.kafka.svc:8081"
    user: walrelay
secrets:
  postgresPassword: {secretName: orders-db, key: password}
  kafkaSaslPassword: {secretName: orders-kafka, key: sasl-password}
  kafkaSslKeyPassword: {secretName: orders-kafka, key: key-password}
  consoleToken: {secretName: orders-console, key: token}
  schemaRegistryPassword: {secretName: orders-registry, key: password}
tls:
  - {name: postgres, secretName: postgres-ca}
  - {name: kafka, secretName: kafka-client-tls}
"#;

/// The variables the chart maps, one per secret of `VALUES`.
const SECRET_VARIABLES: [&str; 5] = [
    "PGPASSWORD",
    "WALRELAY_KAFKA_SASL__PASSWORD",
    "WALRELAY_KAFKA_SSL__KEY__PASSWORD",
    "WALRELAY_HTTP_CONSOLE_TOKEN",
    "WALRELAY_SCHEMA_REGISTRY_PASSWORD",
];

/// `VALUES` in a file, for `helm -f`.
fn values_file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = crate::support::scratch_dir("helm-values").join("values.yaml");
        std::fs::write(&path, VALUES).expect("write the values");
        path
    })
}

/// `helm template` of the chart with `VALUES` and `sets` (`--set key=value`): the rendering, or
/// helm's refusal.
fn template(sets: &[&str]) -> Result<String, String> {
    let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE, "-f"];
    let values = values_file().display().to_string();
    args.push(&values);
    for set in sets {
        args.extend(["--set", set]);
    }
    let out =
        Command::new(helm()).args(&args).current_dir(repo(".")).output().unwrap_or_else(|e| {
            panic!("cannot run {}: {e}; run scripts/install-test-deps.sh", helm().display())
        });
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A rendering, in a file (for the validator) and as its documents.
struct Rendering {
    path: PathBuf,
    docs: Vec<Value>,
}

impl Rendering {
    fn new(name: &str, sets: &[&str]) -> Rendering {
        let text = template(sets).unwrap_or_else(|e| panic!("helm template {sets:?}:\n{e}"));
        let path = crate::support::scratch_dir("helm").join(format!("{name}.yaml"));
        std::fs::write(&path, &text).expect("write the rendering");
        let docs = yaml_documents(path.to_str().expect("a UTF-8 path"))
            .into_iter()
            .filter(|d| !d.is_null())
            .collect();
        Rendering { path, docs }
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn find(&self, kind: &str) -> Option<&Value> {
        self.docs.iter().find(|d| d["kind"] == kind)
    }

    fn get(&self, kind: &str) -> &Value {
        self.find(kind).unwrap_or_else(|| panic!("no {kind} in {}", self.path.display()))
    }

    /// The relay's pod spec.
    fn relay_pod(&self) -> &Value {
        &self.get("Deployment")["spec"]["template"]["spec"]
    }

    /// The audit's pod spec, when the CronJob is rendered.
    fn audit_pod(&self) -> Option<&Value> {
        self.find("CronJob").map(|c| &c["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    }

    fn pods(&self) -> Vec<&Value> {
        std::iter::once(self.relay_pod()).chain(self.audit_pod()).collect()
    }

    fn toml(&self) -> &str {
        self.get("ConfigMap")["data"]["walrelay.toml"].as_str().expect("walrelay.toml")
    }

    /// The relay's environment with a stand-in for each secret: `<Secret>/<key>`, long enough
    /// for the console token's 16 characters.
    fn env(&self) -> Vec<(String, String)> {
        env_of(&self.relay_pod()["containers"][0])
    }

    /// walrelay.toml with that environment over it, as `walrelay run` would read it.
    fn config(&self) -> Config {
        Config::parse_with_env(self.toml(), self.env()).unwrap_or_else(|e| {
            panic!(
                "{}: walrelay.toml with the Secrets' variables: {e}\n{}",
                self.path.display(),
                self.toml()
            )
        })
    }
}

fn env_of(container: &Value) -> Vec<(String, String)> {
    let env = container["env"].as_array().cloned().unwrap_or_default();
    env.iter()
        .map(|e| {
            let name = e["name"].as_str().expect("a name").to_string();
            let secret = &e["valueFrom"]["secretKeyRef"];
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => format!(
                    "from-secret-{}/{}",
                    secret["name"].as_str().unwrap(),
                    secret["key"].as_str().unwrap()
                ),
            };
            (name, value)
        })
        .collect()
}

/// One cell of the matrix the issue names.
#[derive(Clone, Copy, Debug)]
struct Cell {
    guarantee: Guarantee,
    replicas: u8,
    console: ConsoleMode,
    audit: bool,
}

impl Cell {
    fn name(&self) -> String {
        format!(
            "{}-{}r-console-{}-audit-{}",
            self.guarantee.name(),
            self.replicas,
            self.console.name(),
            if self.audit { "on" } else { "off" }
        )
    }

    fn sets(&self) -> Vec<String> {
        vec![
            format!("config.delivery.guarantee={}", self.guarantee.name()),
            format!("replicas={}", self.replicas),
            format!("config.http.console={}", self.console.name()),
            format!("audit.enabled={}", self.audit),
        ]
    }
}

/// Every cell, rendered once per test process.
fn matrix() -> &'static [(Cell, Rendering)] {
    static MATRIX: OnceLock<Vec<(Cell, Rendering)>> = OnceLock::new();
    MATRIX.get_or_init(|| {
        let mut cells = Vec::new();
        for guarantee in [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce] {
            for replicas in [1, 2] {
                for console in [ConsoleMode::Off, ConsoleMode::Read, ConsoleMode::Actions] {
                    for audit in [false, true] {
                        cells.push(Cell { guarantee, replicas, console, audit });
                    }
                }
            }
        }
        cells
            .into_iter()
            .map(|cell| {
                let sets = cell.sets();
                let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
                (cell, Rendering::new(&cell.name(), &sets))
            })
            .collect()
    })
}

/// The rendering of the first cell that `pick` accepts.
fn cell(pick: impl Fn(&Cell) -> bool) -> &'static Rendering {
    &matrix().iter().find(|(c, _)| pick(c)).expect("a cell of the matrix").1
}

#[test]
fn helm_lint_passes_on_the_chart_with_its_defaults_and_with_every_secret_set() {
    let chart = repo(CHART).display().to_string();
    let values = values_file().display().to_string();
    for args in [
        vec!["lint", "--strict", chart.as_str()],
        vec![
            "lint",
            "--strict",
            &chart,
            "-f",
            &values,
            "--set",
            "replicas=2",
            "--set",
            "config.http.console=actions",
        ],
    ] {
        let (ok, out) = run(&helm(), &args, &repo("."));
        assert!(
            ok && out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm {args:?}:\n{out}"
        );
        println!(
            "helm {}: {}",
            args[2..].join(" ").replace(&chart, CHART).replace(&values, "VALUES"),
            out.trim().replace(&chart, CHART).replace('\n', " | ")
        );
    }
}

/// The chart's kinds that kubernetes-validate has no schema for (custom resources of the
/// Prometheus Operator). It says so and passes them; `service_monitor_…` and
/// `prometheus_rule_…` check them instead, the rules with promtool.
const CUSTOM_KINDS: [&str; 2] = ["ServiceMonitor", "PrometheusRule"];

#[test]
fn every_rendering_of_the_matrix_passes_the_kubernetes_schemas_of_1_30_and_1_37() {
    let matrix = matrix();
    assert_eq!(matrix.len(), 24);
    let files: Vec<String> = matrix.iter().map(|(_, r)| r.path.display().to_string()).collect();
    let expected: usize = matrix
        .iter()
        .map(|(_, r)| {
            r.docs.iter().filter(|d| !CUSTOM_KINDS.iter().any(|k| d["kind"] == *k)).count()
        })
        .sum();
    let custom: usize = matrix.iter().map(|(_, r)| r.docs.len()).sum::<usize>() - expected;
    let validator = kubeval_venv().join("bin/kubernetes-validate");
    for version in ["1.30.0", "1.37.0"] {
        let mut args = vec!["--strict", "-k", version];
        args.extend(files.iter().map(String::as_str));
        let (ok, out) = run(&validator, &args, &repo("."));
        assert!(ok, "kubernetes-validate --strict -k {version}:\n{out}");
        let passed =
            out.lines().filter(|l| l.starts_with("INFO") && l.contains(" passed ")).count();
        let unknown: Vec<&str> = out.lines().filter(|l| l.starts_with("WARN")).collect();
        assert_eq!(passed, expected, "{out}");
        assert_eq!(unknown.len(), custom, "{out}");
        for line in &unknown {
            assert!(
                CUSTOM_KINDS
                    .iter()
                    .any(|k| line.contains(&format!("Couldn't find schema for kind {k} "))),
                "a warning about another kind: {line}"
            );
        }
        println!(
            "kubernetes-validate --strict -k {version}: {} renderings, {passed} resources passed; {} ServiceMonitor/PrometheusRule without a schema (checked below)",
            files.len(),
            unknown.len()
        );
    }
}

#[test]
fn every_cells_walrelay_toml_parses_with_its_secrets_and_runs_the_chosen_guarantee_and_console() {
    for (cell, r) in matrix() {
        let config = r.config();
        assert_eq!(config.delivery.guarantee, cell.guarantee, "{}", cell.name());
        let http = config.http.as_ref().expect("[http]");
        assert_eq!(http.console, cell.console, "{}", cell.name());
        assert!(http.console_token.is_some(), "{}: the token variable is mapped", cell.name());
        assert_eq!(r.get("Deployment")["spec"]["replicas"], cell.replicas);
        if cell.guarantee == Guarantee::ExactlyOnce {
            // Per release, not per pod or per slot: the active relay and its stand-by share it,
            // an upgrade keeps it, and two releases on one Kafka cluster never share one.
            assert_eq!(config.delivery.transactional_id, format!("walrelay-{NAMESPACE}-{RELEASE}"));
        }
        let env: BTreeSet<String> = r.env().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            env,
            SECRET_VARIABLES.iter().map(|v| v.to_string()).collect(),
            "{}",
            cell.name()
        );
    }
    // Another release gets another id; the same release keeps its own whatever else changes.
    let other = Command::new(helm())
        .args([
            "template",
            "payments",
            CHART,
            "--namespace",
            NAMESPACE,
            "--set",
            "config.delivery.guarantee=exactly-once",
        ])
        .current_dir(repo("."))
        .output()
        .expect("helm template");
    let other = String::from_utf8_lossy(&other.stdout);
    assert!(other.contains("transactional_id = \"walrelay-shop-payments\""), "{other}");
    let given = template(&[
        "config.delivery.guarantee=exactly-once",
        "config.delivery.transactional_id=orders-relay",
    ])
    .unwrap();
    assert!(given.contains("transactional_id = \"orders-relay\""), "a given id is kept:\n{given}");
    println!(
        "{} cells parse with their {} secret variables; exactly-once's transactional_id: walrelay-{NAMESPACE}-{RELEASE}",
        matrix().len(),
        SECRET_VARIABLES.len()
    );
}

/// `walrelay check` on the chart's config, with the Secrets' variables, where none of its hosts
/// resolves: the config loads (not exit 2), and the broker line says that nobody answered, not
/// that librdkafka refused the `[kafka]` properties (SASL_SSL and SCRAM-SHA-512 need librdkafka
/// built with OpenSSL and SASL).
#[test]
fn walrelay_check_loads_the_charts_config_and_fails_only_on_the_unreachable_broker() {
    let r = cell(|c| c.guarantee == Guarantee::ExactlyOnce && c.console == ConsoleMode::Actions);
    let path = crate::support::scratch_dir("helm-check").join("walrelay.toml");
    std::fs::write(&path, r.toml()).expect("write walrelay.toml");
    let out = Command::new(crate::support::process::walrelay_bin())
        .arg("check")
        .arg("--config")
        .arg(&path)
        .envs(r.env())
        .output()
        .expect("run walrelay check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "the config does not load:\n{stdout}{stderr}");
    let line = stdout.lines().find(|l| l.contains(" broker ")).unwrap_or_default();
    assert!(
        line.starts_with("FAIL broker kafka-0.kafka.svc:9092") && line.contains("no answer"),
        "walrelay check on the chart's config:\n{stdout}{stderr}"
    );
    println!(
        "walrelay check on the chart's exactly-once config: exit {:?}; {line}",
        out.status.code()
    );
}

/// The words of a shell command line: whitespace-separated, `'…'` taken literally, `\` escaping
/// the next character outside quotes (all the install lines of operations.md use).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut chars) =
        (Vec::new(), None::<String>, false, line.chars());
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            '\\' if !quoted => word.get_or_insert_with(String::new).extend(chars.next()),
            c if c.is_whitespace() && !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// docs/operations.md installs the chart in five lines: a Secret, then `helm install`. Rendered
/// here with `helm template` (no cluster), it passes the schemas, and the password comes from the
/// Secret the first line creates.
#[test]
fn the_five_install_lines_of_operations_md_render_a_release_that_reads_the_secret_they_create() {
    let doc = std::fs::read_to_string(repo("docs/operations.md")).expect("docs/operations.md");
    let section = doc.split("\n### Kubernetes\n").nth(1).expect("a Kubernetes section");
    let block =
        section.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a sh block");
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), 5, "{block}");
    let create = shell_words(lines[0]);
    assert_eq!(create[..6], ["kubectl", "-n", "orders", "create", "secret", "generic"], "{block}");
    let secret = &create[6];
    // One command over four lines, each but the last ending in a `\` that continues it.
    let command: Vec<&str> =
        lines[1..].iter().map(|l| l.trim_end().trim_end_matches('\\')).collect();
    let mut install = shell_words(&command.join(" "));
    assert_eq!(install[..2], ["helm", "install"], "{block}");
    install[1] = "template".into();
    let args: Vec<&str> = install[1..].iter().map(String::as_str).collect();
    let (ok, out) = run(&helm(), &args, &repo("."));
    assert!(ok, "helm {}:\n{out}", args.join(" "));
    let path = crate::support::scratch_dir("helm-docs").join("operations-md.yaml");
    std::fs::write(&path, &out).unwrap();
    let validator = kubeval_venv().join("bin/kubernetes-validate");
    let (ok, checked) = run(&validator, &["--strict", path.to_str().unwrap()], &repo("."));
    assert!(ok, "kubernetes-validate --strict:\n{checked}");
    let r = Rendering {
        path: path.clone(),
        docs: yaml_documents(path.to_str().unwrap()).into_iter().filter(|d| !d.is_null()).collect(),
    };
    let password = &r.relay_pod()["containers"][0]["env"][0];
    assert_eq!(password["name"], "PGPASSWORD");
    assert_eq!(password["valueFrom"]["secretKeyRef"]["name"], secret.as_str());
    let config = r.config();
    assert_eq!(config.kafka.properties["bootstrap.servers"], "kafka-0.kafka.svc:9092");
    println!(
        "operations.md's five lines: Secret {secret}, then helm {}; {} resources passed kubernetes-validate --strict",
        args.join(" "),
        checked.lines().filter(|l| l.contains(" passed ")).count()
    );
}
