//! Upgrades and disruptions: the grace period covers the pre-stop sleep and the stop budget, a
//! rollout finishes although the stand-by is never Ready, and the disruption budget never blocks
//! a drain. Rollouts and budgets are modelled from the controllers' arithmetic: no cluster runs
//! here.

use std::time::Duration;

use serde_json::{json, Value};
use walrelay::config::Config;

use super::{cell, matrix, Rendering};

/// Whether the kubelet's SIGKILL comes after walrelay's stop: the grace period must cover the
/// pre-stop sleep, then the stop budget (`[limits] shutdown_grace_ms`, within which walrelay
/// always exits; exactly_once::sigterm_during_large_transactions… checks that).
fn kill_comes_after_the_stop(pod: &Value, config: &Config) -> Result<(), String> {
    let grace = Duration::from_secs(
        pod["terminationGracePeriodSeconds"].as_u64().ok_or("no grace period")?,
    );
    let sleep =
        pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().unwrap_or(0);
    let needed = Duration::from_secs(sleep) + config.limits.shutdown_grace;
    if grace > needed {
        Ok(())
    } else {
        Err(format!("terminationGracePeriodSeconds {grace:?} is not above the pre-stop sleep {sleep} s + shutdown_grace_ms {:?}", config.limits.shutdown_grace))
    }
}

#[test]
fn the_grace_period_covers_the_pre_stop_sleep_and_the_stop_budget_and_a_shorter_one_is_refused() {
    for (cell, r) in matrix() {
        kill_comes_after_the_stop(r.relay_pod(), &r.config())
            .unwrap_or_else(|e| panic!("{}: {e}", cell.name()));
    }
    let two = cell(|c| c.replicas == 2);
    assert_eq!(
        two.relay_pod()["terminationGracePeriodSeconds"],
        25,
        "10 s sleep + 10 s budget + 5 s"
    );
    let one = cell(|c| c.replicas == 1);
    assert_eq!(one.relay_pod()["terminationGracePeriodSeconds"], 15, "10 s budget + 5 s");
    // A longer budget lengthens the grace period with it.
    let slow =
        Rendering::new("slow-stop", &["config.limits.shutdown_grace_ms=42500", "replicas=2"]);
    assert_eq!(slow.relay_pod()["terminationGracePeriodSeconds"], 43 + 10 + 5);
    kill_comes_after_the_stop(slow.relay_pod(), &slow.config()).unwrap();
    // Not ok: a grace period that the sleep eats up.
    let mut short = two.relay_pod().clone();
    short["terminationGracePeriodSeconds"] = json!(15);
    let refused =
        kill_comes_after_the_stop(&short, &two.config()).expect_err("15 s for 10 s + 10 s");
    println!("grace period > pre-stop sleep + stop budget in {} cells (15 s with 1 replica, 25 s with 2; 58 s for a 42.5 s budget); refused: {refused}", matrix().len());
}

/// An int-or-percent of `replicas`, as the controllers resolve it: the Deployment controller
/// rounds a percentage of maxUnavailable down, the disruption controller a budget's up. Absent:
/// Kubernetes' default of 25 %.
fn resolve(value: &Value, replicas: u64, round_up: bool) -> u64 {
    let percent = match (value.as_u64(), value.as_str()) {
        (Some(n), _) => return n,
        (None, Some(text)) => {
            text.strip_suffix('%').and_then(|p| p.parse::<u64>().ok()).expect("a percentage")
        }
        (None, None) => 25,
    };
    let share = replicas * percent;
    if round_up {
        share.div_ceil(100)
    } else {
        share / 100
    }
}

/// Whether a rollout of `deployment` finishes when no new pod can become Ready while an old one
/// holds the slot, and at most one pod is ever Ready: a model of the controller, not a cluster.
/// Recreate stops every old pod first. A rolling update deletes an old pod only while the
/// available pods stay at replicas − maxUnavailable or more; the one available pod is the old
/// active relay, so unless that floor is 0 it is never deleted and the rollout waits for ever.
fn rollout_finishes(deployment: &Value) -> Result<(), String> {
    let spec = &deployment["spec"];
    let replicas = spec["replicas"].as_u64().ok_or("no replicas")?;
    match spec["strategy"]["type"].as_str() {
        Some("Recreate") => Ok(()),
        Some("RollingUpdate") | None => {
            let max_unavailable =
                resolve(&spec["strategy"]["rollingUpdate"]["maxUnavailable"], replicas, false);
            let floor = replicas.saturating_sub(max_unavailable);
            if floor == 0 {
                Ok(())
            } else {
                Err(format!("keeps {floor} of {replicas} pods available: the old active relay is never deleted, and no new pod becomes Ready while it holds the slot"))
            }
        }
        Some(other) => Err(format!("strategy {other}")),
    }
}

#[test]
fn one_replica_is_recreated_and_two_are_replaced_at_once_while_the_old_active_streams_on() {
    for (cell, r) in matrix() {
        let deployment = r.get("Deployment");
        rollout_finishes(deployment).unwrap_or_else(|e| panic!("{}: {e}", cell.name()));
        let strategy = &deployment["spec"]["strategy"];
        let container = &r.relay_pod()["containers"][0];
        if cell.replicas == 1 {
            // The new pod never races the old one's stop.
            assert_eq!(strategy["type"], "Recreate", "{}", cell.name());
            assert!(container["lifecycle"].is_null(), "no pre-stop sleep with Recreate");
        } else {
            assert_eq!(
                *strategy,
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": "100%"}})
            );
            // The old active relay streams on while the new pods start and stand by.
            assert_eq!(container["lifecycle"]["preStop"]["sleep"]["seconds"], 10);
            let spread = &r.relay_pod()["affinity"]["podAntiAffinity"];
            assert!(
                !spread.is_null(),
                "the active relay and the stand-by on different nodes where possible"
            );
        }
    }
    // Not ok: Kubernetes' default rolling update (25 % each way), and one pod at a time.
    let two = cell(|c| c.replicas == 2).get("Deployment");
    let mut default = two.clone();
    default["spec"]["strategy"] = json!({"type": "RollingUpdate"});
    let stalls = rollout_finishes(&default).expect_err("the default rolling update");
    let mut one_at_a_time = two.clone();
    one_at_a_time["spec"]["strategy"]["rollingUpdate"] =
        json!({"maxSurge": 1, "maxUnavailable": 1});
    let stalls_too = rollout_finishes(&one_at_a_time).expect_err("one at a time");
    println!("1 replica: Recreate; 2: RollingUpdate 100 %/100 % with a 10 s pre-stop sleep. Refused: 25 %/25 % {stalls}; 1/1 {stalls_too}");
}

/// How many evictions the budget allows with one relay pod Ready (the active one) out of the
/// Deployment's replicas, as the disruption controller computes it.
fn evictions_allowed_with_one_ready(pdb: &Value, replicas: u64) -> u64 {
    let spec = &pdb["spec"];
    let desired_healthy = if spec["maxUnavailable"].is_null() {
        resolve(&spec["minAvailable"], replicas, true)
    } else {
        replicas.saturating_sub(resolve(&spec["maxUnavailable"], replicas, true))
    };
    1u64.saturating_sub(desired_healthy)
}

#[test]
fn the_disruption_budget_lets_a_drain_evict_the_active_relay_and_a_budget_of_one_in_two_would_not()
{
    for (cell, r) in matrix() {
        let pdb = r.get("PodDisruptionBudget");
        assert_eq!(
            evictions_allowed_with_one_ready(pdb, cell.replicas.into()),
            1,
            "{}: {pdb}",
            cell.name()
        );
        // A stand-by or a stuck relay (not Ready) is evicted whatever the budget says.
        assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            r.get("Deployment")["spec"]["selector"]["matchLabels"]
        );
    }
    let strict =
        Rendering::new("pdb-one-of-two", &["replicas=2", "podDisruptionBudget.maxUnavailable=1"]);
    let allowed = evictions_allowed_with_one_ready(strict.get("PodDisruptionBudget"), 2);
    assert_eq!(allowed, 0, "maxUnavailable 1 of 2 forbids evicting the only Ready pod");
    println!("with one Ready pod, the chart's budget allows 1 eviction in every cell; maxUnavailable 1 with 2 replicas allows {allowed}");
}
