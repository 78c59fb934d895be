//! What Prometheus gets: the project's alerts and the audit CronJob's, every relay pod scraped,
//! and a NetworkPolicy that admits the scrape and nothing else.

use std::path::Path;

use serde_json::{json, Value};

use super::{cell, matrix, CHART, FULLNAME, NAMESPACE};
use crate::ops_docs::{repo, run, yaml_documents};

#[test]
fn prometheus_rule_carries_the_alerts_of_docs_prometheus_and_its_audit_alert_passes_promtool_tests()
{
    let docs_alerts = std::fs::read_to_string(repo("docs/prometheus/alerts.yaml")).unwrap();
    let chart_alerts =
        std::fs::read_to_string(repo(&format!("{CHART}/files/alerts.yaml"))).unwrap();
    assert!(
        docs_alerts == chart_alerts,
        "{CHART}/files/alerts.yaml differs from docs/prometheus/alerts.yaml: copy it over"
    );
    let expected = yaml_documents("docs/prometheus/alerts.yaml").remove(0)["groups"].clone();
    let dir = crate::support::scratch_dir("helm-rules");
    for audit in [false, true] {
        let r = cell(|c| c.audit == audit);
        let groups = r.get("PrometheusRule")["spec"]["groups"].as_array().expect("groups").clone();
        assert_eq!(
            json!(groups[..expected.as_array().unwrap().len()]),
            expected,
            "the project's groups, rule for rule"
        );
        let names: Vec<&str> = groups.iter().filter_map(|g| g["name"].as_str()).collect();
        let cronjob_group = names.contains(&"walrelay-audit-cronjob");
        assert_eq!(cronjob_group, audit, "{names:?}");
        let file = dir.join(format!("rules-audit-{audit}.yaml"));
        std::fs::write(&file, serde_json::to_string(&json!({ "groups": groups })).unwrap())
            .unwrap();
        let (ok, out) =
            run(Path::new("promtool"), &["check", "rules", file.to_str().unwrap()], &dir);
        assert!(ok, "promtool check rules (audit {audit}):\n{out}");
        println!("audit {audit}: groups {names:?}; promtool: {}", out.trim().replace('\n', " "));
    }
    // The CronJob's alert fires on a failed Job of this release's audit, and on no other Job
    // (another release's audit, a Job of this release's name in another namespace).
    let tests = format!(
        r#"rule_files: [rules-audit-true.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'kube_job_status_failed{{namespace="{NAMESPACE}", job_name="{FULLNAME}-audit-29412367"}}'
        values: '0 0 1 1'
      - series: 'kube_job_status_failed{{namespace="{NAMESPACE}", job_name="payments-walrelay-audit-29412367"}}'
        values: '1 1 1 1'
      - series: 'kube_job_status_failed{{namespace="elsewhere", job_name="{FULLNAME}-audit-29412367"}}'
        values: '1 1 1 1'
    alert_rule_test:
      - eval_time: 1m
        alertname: WalrelayAuditJobFailed
        exp_alerts: []
      - eval_time: 3m
        alertname: WalrelayAuditJobFailed
        exp_alerts:
          - exp_labels: {{severity: critical, namespace: {NAMESPACE}, job_name: {FULLNAME}-audit-29412367}}
            exp_annotations:
              summary: "walrelay's scheduled audit {FULLNAME}-audit failed"
              description: "The audit Job exited 1 (events missing, duplicated beyond replays or out of order) or 2 (it cannot run as configured); its log says which. `walrelay audit --since <window> --repair` re-publishes the missing. The alert holds while the failed Job exists: delete it once handled. See docs/operations.md, Auditing."
"#
    );
    std::fs::write(dir.join("audit_test.yaml"), tests).unwrap();
    let (ok, out) = run(Path::new("promtool"), &["test", "rules", "audit_test.yaml"], &dir);
    assert!(ok, "promtool test rules:\n{out}");
    println!("promtool test rules on WalrelayAuditJobFailed: {}", out.trim().replace('\n', " "));
}

#[test]
fn the_service_monitor_scrapes_every_relay_pod_ready_or_not() {
    for (cell, r) in matrix() {
        let monitor = r.get("ServiceMonitor");
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        let selector = monitor["spec"]["selector"]["matchLabels"].as_object().unwrap();
        let services: Vec<&Value> = r
            .all("Service")
            .into_iter()
            .filter(|s| selector.iter().all(|(k, v)| s["metadata"]["labels"].get(k) == Some(v)))
            .collect();
        assert_eq!(services.len(), 1, "{}: the ServiceMonitor selects {services:?}", cell.name());
        let service = services[0];
        // Endpoints of not-Ready pods too: the stand-by's walrelay_streaming 0 is what tells
        // "one relay streams" from "none does" (alerts.yaml's WalrelayNotStreaming).
        assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
        assert_eq!(
            service["spec"]["selector"],
            r.get("Deployment")["spec"]["selector"]["matchLabels"]
        );
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"], "/metrics");
        assert!(service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == endpoint["port"] && p["targetPort"] == "http"));
    }
    println!(
        "ServiceMonitor: /metrics of {FULLNAME}-metrics, which lists not-Ready pods, in {} cells",
        matrix().len()
    );
}

/// Whether a NetworkPolicy admits only `port` from the namespace `monitoring`, to every pod of
/// the release.
fn admits_only_metrics(policy: &Value, port: &Value, monitoring: &str) -> Result<(), String> {
    let spec = &policy["spec"];
    if spec["policyTypes"] != json!(["Ingress"]) {
        return Err(format!("policyTypes {}", spec["policyTypes"]));
    }
    let expected = json!([{
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring}}}],
        "ports": [{"protocol": "TCP", "port": port}],
    }]);
    if spec["ingress"] != expected {
        return Err(format!("ingress {}", spec["ingress"]));
    }
    Ok(())
}

#[test]
fn the_network_policy_admits_only_the_metrics_port_from_the_monitoring_namespace_to_every_pod() {
    for (cell, r) in matrix() {
        let policy = r.get("NetworkPolicy");
        let port = &r.relay_pod()["containers"][0]["ports"][0]["containerPort"];
        assert_eq!(*port, 9187);
        admits_only_metrics(policy, port, "monitoring")
            .unwrap_or_else(|e| panic!("{}: {e}", cell.name()));
        let selector = policy["spec"]["podSelector"]["matchLabels"].as_object().unwrap();
        for pod in [&r.get("Deployment")["spec"]["template"]]
            .into_iter()
            .chain(r.find("CronJob").map(|c| &c["spec"]["jobTemplate"]["spec"]["template"]))
        {
            let labels = pod["metadata"]["labels"].as_object().unwrap();
            assert!(
                selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
                "{}: {labels:?} not selected",
                cell.name()
            );
        }
    }
    let policy = cell(|_| true).get("NetworkPolicy");
    let mut open = policy.clone();
    open["spec"]["ingress"][0]["from"].as_array_mut().unwrap().push(json!({"podSelector": {}}));
    let refused_peer = admits_only_metrics(&open, &json!(9187), "monitoring")
        .expect_err("any pod of the namespace");
    let mut all_ports = policy.clone();
    all_ports["spec"]["ingress"][0].as_object_mut().unwrap().remove("ports");
    let refused_ports =
        admits_only_metrics(&all_ports, &json!(9187), "monitoring").expect_err("every port");
    println!("NetworkPolicy: TCP 9187 from namespace monitoring only, to the relay's and the audit's pods; refused: {refused_peer}; {refused_ports}");
}
