//! The operator's files in docs/, checked by the tools that read them and against walrelay
//! itself: the alert rules by promtool (syntax and their unit tests), and every series the rules
//! and the Grafana dashboard name against a running relay's `/metrics`. The Helm chart, which
//! replaced the Kubernetes manifest, is tests/helm.rs's; it uses the helpers below.
//!
//! promtool and kubernetes-validate come from scripts/install-test-deps.sh.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::Setup;
use crate::support::process::{http_get, metric, RelayProcess};
use crate::support::{free_port, wait_until};

const ALERTS: &str = "docs/prometheus/alerts.yaml";
const DASHBOARD: &str = "docs/grafana/walrelay.json";

/// `path` in the repository (an absolute path stays itself).
pub(crate) fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The virtualenv scripts/install-test-deps.sh puts kubernetes-validate (and PyYAML) in.
pub(crate) fn kubeval_venv() -> PathBuf {
    std::env::var_os("KUBEVAL_VENV").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".local/walrelay-kubeval")
    })
}

/// Runs `program args` in `dir`; its combined output, or a panic that says what to install.
pub(crate) fn run(program: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(program).args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("cannot run {}: {e}; run scripts/install-test-deps.sh", program.display())
    });
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Every YAML document of `path` (in the repository, or absolute), as JSON (PyYAML from the
/// kubernetes-validate virtualenv: a YAML parser in Rust's dev-dependencies for a few files is
/// not worth the build).
pub(crate) fn yaml_documents(path: &str) -> Vec<serde_json::Value> {
    let python = kubeval_venv().join("bin/python");
    let script =
        "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let (ok, out) = run(&python, &["-c", script, &repo(path).display().to_string()], &repo("."));
    assert!(ok, "{path} is not YAML PyYAML reads: {out}");
    serde_json::from_str(&out).expect("PyYAML's output is JSON")
}

/// The metric names a PromQL expression reads: identifiers outside strings, label matchers,
/// ranges and grouping clauses that are not functions, keywords, numbers or `$variables`.
fn promql_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 11] =
        ["and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"];
    // Operators that may be followed by their grouping clause instead of `(`.
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skips from an opening bracket to its closing one (strings inside included).
    let skip = |mut i: usize, open: char, close: char| {
        let mut depth = 0;
        while i < chars.len() {
            match chars[i] {
                '"' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip(i, '{', '}');
        } else if c == '[' {
            i = skip(i, '[', ']');
        } else if c == '"' {
            // A string argument (label_replace's): to its closing quote.
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_digit() || (c == '$') {
            while i < chars.len() && (chars[i].is_alphanumeric() || "._$".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = next < chars.len() && chars[next] == '(';
            if GROUPING.contains(&word.as_str()) && call {
                i = skip(next, '(', ')');
            } else if !call
                && !KEYWORDS.contains(&word.as_str())
                && !AGGREGATIONS.contains(&word.as_str())
            {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn promql_names_skip_functions_labels_ranges_grouping_and_numbers() {
    let names = promql_names(
        r#"max by (job) (walrelay_a{job=~"$job", x="a{b}"}) > 0.8 * sum without(instance) (rate(walrelay_b_total[$__rate_interval] offset 5m)) and on(job) absent(c) unless label_replace(e, "x", "$1", "y", "(.*)") or histogram_quantile(0.99, sum by (le) (rate(d_bucket[5m]))) > 1e3"#,
    );
    let expected: BTreeSet<String> =
        ["walrelay_a", "walrelay_b_total", "c", "e", "d_bucket"].map(String::from).into();
    assert_eq!(names, expected);
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = repo("docs/prometheus");
    let promtool = Path::new("promtool");
    let (ok, out) = run(promtool, &["check", "rules", "alerts.yaml"], &dir);
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, tested) = run(promtool, &["test", "rules", "alerts_test.yaml"], &dir);
    assert!(ok, "promtool test rules:\n{tested}");
    println!(
        "promtool: {}; unit tests: {}",
        out.trim().replace('\n', " "),
        tested.trim().replace('\n', " ")
    );
}

/// Every `expr` of the alert rules, by alert name.
fn alert_exprs() -> Vec<(String, String)> {
    let doc = yaml_documents(ALERTS).remove(0);
    let groups = doc["groups"].as_array().expect("groups");
    let rules = groups.iter().flat_map(|g| g["rules"].as_array().expect("rules").iter());
    rules
        .map(|r| {
            let name = r["alert"].as_str().or(r["record"].as_str()).expect("alert or record");
            (name.to_string(), r["expr"].as_str().expect("expr").to_string())
        })
        .collect()
}

/// Every query of the dashboard's panels, by panel title.
fn dashboard_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo(DASHBOARD)).expect("the dashboard exists");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut exprs = Vec::new();
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            exprs.push((title, target["expr"].as_str().expect("expr").to_string()));
        }
    }
    exprs
}

/// Whether the scrape has a sample of `name` (labelled or not).
fn has_series(scrape: &str, name: &str) -> bool {
    scrape.lines().any(|l| {
        l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_rules_and_dashboard_name_only_series_a_running_relay_shows() {
    let alerts = alert_exprs();
    let panels = dashboard_exprs();
    let in_alerts: BTreeSet<String> = alerts.iter().flat_map(|(_, e)| promql_names(e)).collect();
    // What the rules must cover: lag in seconds and bytes, retained WAL against
    // max_slot_wal_keep_size, delivery errors, not streaming, dead letters.
    for needed in [
        "walrelay_lag_seconds",
        "walrelay_lag_bytes",
        "walrelay_slot_retained_wal_bytes",
        "walrelay_slot_wal_keep_limit_bytes",
        "walrelay_delivery_errors_total",
        "walrelay_streaming",
        "walrelay_dead_lettered_total",
    ] {
        assert!(in_alerts.contains(needed), "no alert reads {needed}: {in_alerts:?}");
    }

    let s = Setup::new("docsnames").await;
    let port = free_port();
    let config = s.config_with("", "", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 1).await;
    assert_eq!(s.read("Order", 1).await.len(), 1, "{}", s.diagnostics(&relay));
    let published = format!("walrelay_records_published_total{{topic=\"{}\"}}", s.topic("Order"));
    let last = std::sync::Mutex::new(String::new());
    let (last_ref, published) = (&last, published.as_str());
    let counted = wait_until("the record is counted", Duration::from_secs(30), || async move {
        let text = http_get(port, "/metrics").await.unwrap_or_default();
        let done = metric(&text, published) == Some(1.0);
        *last_ref.lock().unwrap() = text;
        done
    })
    .await;
    let scrape = last.into_inner().unwrap();
    assert!(counted, "{scrape}\n{}", relay.log());

    let mut checked = BTreeSet::new();
    let mut missing = Vec::new();
    for (what, (title, expr)) in
        alerts.iter().map(|a| ("alert", a)).chain(panels.iter().map(|p| ("panel", p)))
    {
        let names = promql_names(expr);
        assert!(!names.is_empty(), "{what} {title} reads no series: {expr}");
        for name in names {
            if !has_series(&scrape, &name) {
                missing
                    .push(format!("{what} {title:?} reads {name}, which /metrics does not show"));
            }
            checked.insert(name);
        }
    }
    assert!(missing.is_empty(), "{}\n--- /metrics ---\n{scrape}", missing.join("\n"));
    println!(
        "{} alert rules and {} dashboard queries read {} series, all on a running relay's /metrics: {}",
        alerts.len(),
        panels.len(),
        checked.len(),
        checked.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    assert_eq!(relay.terminate(), Some(0));
}
