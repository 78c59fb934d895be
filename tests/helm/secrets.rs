//! Secrets reach the pods from Secrets only: in every rendering, by a checker that is shown
//! each way of inlining one; and the chart refuses a secret written into its config.

use serde_json::{json, Value};
use walrelay::config::secret::{is_secret_key, redact_url};

use super::{cell, matrix, template, FULLNAME, SECRET_VARIABLES};
use crate::ops_docs::repo;

/// What inlines a secret in a rendering: a Secret object (the chart references Secrets, it
/// creates none), an environment variable named like a secret with a literal value, a key of
/// walrelay.toml named like a secret, a password in `[source] url`. By walrelay's own rule of
/// what is a secret.
fn inlined_secrets(docs: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or("?");
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        if kind == "Secret" {
            found.push(format!("Secret {name} is rendered by the chart"));
        }
        let pod = match kind {
            "Deployment" => &doc["spec"]["template"]["spec"],
            "CronJob" => &doc["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            _ => &Value::Null,
        };
        for container in pod["containers"].as_array().into_iter().flatten() {
            for e in container["env"].as_array().into_iter().flatten() {
                let var = e["name"].as_str().unwrap_or("?");
                if is_secret_key(var) && e["valueFrom"]["secretKeyRef"]["name"].as_str().is_none() {
                    found.push(format!("{kind} {name}: {var} is not from a secretKeyRef"));
                }
            }
        }
        if kind == "ConfigMap" {
            let toml = doc["data"]["walrelay.toml"].as_str().unwrap_or_default();
            let table: toml::Table = toml.parse().unwrap_or_default();
            for (section, keys) in &table {
                for (key, value) in keys.as_table().into_iter().flatten() {
                    if is_secret_key(key) {
                        found.push(format!(
                            "ConfigMap {name}: [{section}] {key} is in walrelay.toml"
                        ));
                    }
                    if let Some(text) =
                        value.as_str().filter(|_| section == "source" && key == "url")
                    {
                        if redact_url(text) != text {
                            found.push(format!("ConfigMap {name}: [source] url holds a password"));
                        }
                    }
                }
            }
        }
    }
    found
}

#[test]
fn secrets_reach_the_pods_only_by_secret_key_ref_and_the_checker_finds_an_inlined_one() {
    for (cell, r) in matrix() {
        assert_eq!(inlined_secrets(&r.docs), Vec::<String>::new(), "{}", cell.name());
        // The audit reads with the relay's Secrets.
        if let Some(audit) = r.audit_pod() {
            assert_eq!(audit["containers"][0]["env"], r.relay_pod()["containers"][0]["env"]);
        }
    }
    // What the checker must refuse: each way of inlining, in an otherwise clean rendering.
    let r = cell(|c| c.audit);
    let with = |change: &dyn Fn(&mut Vec<Value>)| {
        let mut docs = r.docs.clone();
        change(&mut docs);
        inlined_secrets(&docs)
    };
    let doc = |docs: &mut Vec<Value>, kind: &str| -> usize {
        docs.iter().position(|d| d["kind"] == kind).unwrap()
    };
    let literal = with(&|docs| {
        let i = doc(docs, "Deployment");
        let env =
            docs[i]["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut().unwrap();
        env.push(json!({"name": "WALRELAY_KAFKA_SASL__PASSWORD", "value": "hunter2"}));
    });
    assert_eq!(
        literal,
        [format!(
            "Deployment {FULLNAME}: WALRELAY_KAFKA_SASL__PASSWORD is not from a secretKeyRef"
        )]
    );
    let in_audit = with(&|docs| {
        let i = doc(docs, "CronJob");
        let env =
            &mut docs[i]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"];
        env[0] = json!({"name": "PGPASSWORD", "value": "hunter2"});
    });
    assert_eq!(
        in_audit,
        [format!("CronJob {FULLNAME}-audit: PGPASSWORD is not from a secretKeyRef")]
    );
    let in_toml = with(&|docs| {
        let i = doc(docs, "ConfigMap");
        let toml = docs[i]["data"]["walrelay.toml"]
            .as_str()
            .unwrap()
            .replace("[kafka]\n", "[kafka]\n\"sasl.password\" = \"hunter2\"\n");
        let toml = toml.replace("postgres://walrelay@", "postgres://walrelay:hunter2@");
        docs[i]["data"]["walrelay.toml"] = json!(toml);
    });
    assert_eq!(
        in_toml,
        [
            format!("ConfigMap {FULLNAME}: [kafka] sasl.password is in walrelay.toml"),
            format!("ConfigMap {FULLNAME}: [source] url holds a password"),
        ]
    );
    let secret = with(&|docs| {
        docs.push(json!({"kind": "Secret", "metadata": {"name": "orders-secrets"}, "stringData": {"x": "y"}}))
    });
    assert_eq!(secret, ["Secret orders-secrets is rendered by the chart"]);
    println!(
        "{} renderings: every one of {} variables from a secretKeyRef, in the relay and the audit; the checker names a literal variable, one in the audit, a secret key and a URL password in walrelay.toml, a Secret",
        matrix().len(),
        SECRET_VARIABLES.len()
    );
}

/// The fragments of a key name that make its value a secret, as src/options/secret.rs lists
/// them (read from the source, so a fragment added there must be taught to the chart).
fn secret_fragments() -> Vec<String> {
    let source =
        std::fs::read_to_string(repo("src/options/secret.rs")).expect("src/options/secret.rs");
    let list =
        source.split("const SECRET_FRAGMENTS: &[&str] = &[").nth(1).expect("SECRET_FRAGMENTS");
    let list = &list[..list.find("];").expect("the list's end")];
    list.split('"').skip(1).step_by(2).map(String::from).collect()
}

#[test]
fn the_chart_refuses_a_secret_in_its_config_for_every_fragment_walrelay_hides() {
    let fragments = secret_fragments();
    assert!(fragments.len() >= 13 && fragments.contains(&"password".to_string()), "{fragments:?}");
    for fragment in &fragments {
        let key = format!("x.{fragment}").replace('.', "\\.");
        let refused = template(&[&format!("config.kafka.{key}=hunter2")]);
        let err = refused.expect_err(&format!("config.kafka.x.{fragment} was rendered"));
        assert!(err.contains("is a secret: give it from a Secret"), "{fragment}: {err}");
        assert!(!err.contains("hunter2"), "the refusal shows the value: {err}");
    }
    for url in ["postgres://walrelay:hunter2@db:5432/app", "host=db user=walrelay password=hunter2"]
    {
        let err = template(&[&format!("config.source.url={url}")]).expect_err(url);
        assert!(err.contains("config.source.url holds a password"), "{err}");
    }
    let err = template(&["config.http.console=read", "secrets.consoleToken.secretName="])
        .expect_err("a console without a token");
    assert!(err.contains("needs secrets.consoleToken"), "{err}");
    // Keys that are not secrets pass: a client key's path, a URL without a password.
    template(&["config.kafka.ssl\\.key\\.location=/etc/walrelay-tls/kafka/tls.key"])
        .expect("ssl.key.location is a path");
    println!(
        "refused at template time: a [kafka] key with each of {} fragments ({}), a password in a URL and in key=value, a console without a token",
        fragments.len(),
        fragments.join(", ")
    );
}
