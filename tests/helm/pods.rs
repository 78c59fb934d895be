//! The pods themselves: the audit CronJob runs `walrelay audit` on the release's config, and every
//! pod runs as the image's non-root user on a read-only root file system.

use serde_json::{json, Value};

use super::{cell, matrix, Rendering, FULLNAME};
use crate::ops_docs::repo;

/// Whether a CronJob runs `walrelay audit` with the release's config: the same image, the
/// release's ConfigMap mounted where `--config` points, the relay's Secrets.
fn audits_with_the_release_config(cronjob: &Value, r: &Rendering) -> Result<(), String> {
    let pod = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let job = &pod["containers"][0];
    let relay = &r.relay_pod()["containers"][0];
    let args: Vec<&str> =
        job["args"].as_array().ok_or("no args")?.iter().filter_map(Value::as_str).collect();
    if args.first() != Some(&"audit") {
        return Err(format!("runs {args:?}, not walrelay audit"));
    }
    let config = args
        .iter()
        .position(|a| *a == "--config")
        .and_then(|i| args.get(i + 1))
        .ok_or("no --config")?;
    let mount = job["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| config.starts_with(m["mountPath"].as_str().unwrap_or("-")))
        .ok_or(format!("nothing mounted at {config}"))?;
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount["name"])
        .ok_or("no volume")?;
    let config_map = r.get("ConfigMap")["metadata"]["name"].clone();
    if volume["configMap"]["name"] != config_map || !config.ends_with("/walrelay.toml") {
        return Err(format!(
            "--config {config} is on {}, not the release's ConfigMap {config_map}",
            volume
        ));
    }
    if job["image"] != relay["image"] {
        return Err(format!("image {} is not the relay's {}", job["image"], relay["image"]));
    }
    if job["env"] != relay["env"] {
        return Err("its environment is not the relay's".into());
    }
    Ok(())
}

#[test]
fn audit_cronjob_runs_walrelay_audit_with_the_releases_config_and_a_job_on_another_config_is_refused(
) {
    for (cell, r) in matrix() {
        match r.find("CronJob") {
            Some(cronjob) => {
                assert!(cell.audit);
                audits_with_the_release_config(cronjob, r)
                    .unwrap_or_else(|e| panic!("{}: {e}", cell.name()));
                let spec = &cronjob["spec"];
                assert_eq!(spec["concurrencyPolicy"], "Forbid");
                assert_eq!(
                    spec["jobTemplate"]["spec"]["backoffLimit"], 0,
                    "a failed audit is a failed Job"
                );
            }
            None => assert!(!cell.audit, "{}: no CronJob", cell.name()),
        }
    }
    let r = cell(|c| c.audit);
    let cronjob = r.get("CronJob");
    let args = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        *args,
        json!([
            "audit",
            "--config",
            "/etc/walrelay/walrelay.toml",
            "--since",
            "70m",
            "--settle",
            "5m",
            "--details",
            "50"
        ])
    );
    let mut other = cronjob.clone();
    other["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] =
        json!("payments-walrelay");
    let refused = audits_with_the_release_config(&other, r).expect_err("another release's config");
    let mut replay = cronjob.clone();
    replay["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0] =
        json!("replay");
    let refused_replay = audits_with_the_release_config(&replay, r).expect_err("not an audit");
    println!(
        "CronJob {FULLNAME}-audit: walrelay {}; refused: {refused}; {refused_replay}",
        args.as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join(" ")
    );
}

/// Whether a pod runs as a non-root user on a read-only root file system, without privileges.
fn locked_down(pod: &Value) -> Result<(), String> {
    let context = &pod["securityContext"];
    if context["runAsNonRoot"] != true || context["runAsUser"].as_u64().unwrap_or(0) == 0 {
        return Err(format!("pod securityContext {context}"));
    }
    if pod["automountServiceAccountToken"] != false {
        return Err("a service account token is mounted".into());
    }
    for container in pod["containers"].as_array().ok_or("no containers")? {
        let c = &container["securityContext"];
        if c["readOnlyRootFilesystem"] != true
            || c["allowPrivilegeEscalation"] != false
            || c["capabilities"]["drop"] != json!(["ALL"])
        {
            return Err(format!("container {} securityContext {c}", container["name"]));
        }
    }
    Ok(())
}

#[test]
fn every_pod_runs_as_the_images_non_root_user_on_a_read_only_root_filesystem() {
    // The image's user, numeric so that the kubelet can check runAsNonRoot against it.
    let dockerfile = std::fs::read_to_string(repo("docker/Dockerfile")).unwrap();
    let user = dockerfile.lines().rev().find_map(|l| l.strip_prefix("USER ")).expect("a USER");
    assert_eq!(user, "10001:10001");
    for (cell, r) in matrix() {
        for pod in r.pods() {
            locked_down(pod).unwrap_or_else(|e| panic!("{}: {e}", cell.name()));
            assert_eq!(pod["securityContext"]["runAsUser"], 10001);
            // The one writable place: /tmp, for the audit's sorted runs.
            let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
            let tmp = mounts.iter().find(|m| m["mountPath"] == "/tmp").expect("/tmp");
            let volume = pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == tmp["name"])
                .unwrap();
            assert!(volume["emptyDir"].is_object());
        }
    }
    let mut writable = cell(|_| true).relay_pod().clone();
    writable["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = json!(false);
    let refused = locked_down(&writable).expect_err("a writable root");
    let mut root = cell(|_| true).relay_pod().clone();
    root["securityContext"]["runAsUser"] = json!(0);
    let refused_root = locked_down(&root).expect_err("uid 0");
    println!("every relay and audit pod: uid 10001, runAsNonRoot, read-only root, no privilege escalation, capabilities dropped, no token; refused: {refused}; {refused_root}");
}
