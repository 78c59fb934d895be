//! HTTPS to the schema registry: the registry's certificate verified against `[schema_registry]
//! ca`, and the client certificate a registry that asks for one gets.

use super::*;
use crate::support::mtls_proxy::MtlsProxy;
use crate::support::registry::private_registry_with_tls;
use crate::support::scratch_dir;
use crate::support::secure_kafka::make_certificates;

/// The line of `walrelay check` about the schema registry.
fn line(run: &crate::support::process::Run) -> String {
    run.stdout.lines().find(|l| l.contains("schema registry")).unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_the_registry_is_verified_against_the_configured_ca_and_refused_without_it() {
    let s = Setup::new("avro_tls").await;
    let (own, https_port, ca) =
        tokio::task::spawn_blocking(private_registry_with_tls).await.unwrap();
    let url = format!("https://127.0.0.1:{https_port}/apis/ccompat/v7");
    // The Mozilla roots do not know the harness's CA.
    let untrusted = avro_config(&s, "", &url, "");
    let run = walrelay_async(&["check"], Some(&untrusted)).await;
    println!("check without ca: {}", line(&run));
    assert!(line(&run).starts_with("FAIL") && line(&run).contains("UnknownIssuer"), "{run}");
    assert!(line(&run).contains("[schema_registry] ca"), "the fix names the setting: {run}");
    let config = avro_config(&s, "", &url, &format!("ca = \"{}\"\n", ca.display()));
    let run = walrelay_async(&["check"], Some(&config)).await;
    println!("check with ca: {}", line(&run));
    assert!(line(&run).starts_with("ok") && line(&run).contains("https://"), "{run}");
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 2).await;
    let topic = s.topic("Order");
    let got =
        kafka::consume(services().broker.bootstrap(), &topic, 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{}", relay.log());
    // The same registry, read over plain HTTP by confluent-kafka.
    let decoded = decode_with_confluent("avro", &own.ccompat_url(), &topic, &values(&got));
    assert_eq!(decoded.len(), 2);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A registry that asks for a client certificate (mutual TLS; here a proxy in front of Apicurio,
/// whose package cannot ask): without `[schema_registry] certificate` and `key`, `check` fails
/// and the handshake is refused; with the client certificate the CA signed, `check` passes and
/// `run` registers and frames the values, which decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_asking_for_a_client_certificate_gets_the_configured_one_and_check_fails_without_it(
) {
    let s = Setup::new("avro_mtls").await;
    let tls = make_certificates(&scratch_dir("registry_mtls")).expect("certificates");
    let pem = |name: &str| tls.ca.with_file_name(name);
    let upstream = registry().port();
    let proxy = MtlsProxy::start(upstream, &tls.ca, &pem("broker.pem"), &pem("broker.key")).await;
    let url = format!("https://127.0.0.1:{}/apis/ccompat/v7", proxy.port());
    let ca = format!("ca = \"{}\"\n", tls.ca.display());
    let run = walrelay_async(&["check"], Some(&avro_config(&s, "", &url, &ca))).await;
    println!("check without a client certificate: {}", line(&run));
    println!("handshakes the registry's proxy refused: {:?}", proxy.refused());
    assert!(line(&run).starts_with("FAIL"), "{run}");
    assert!(!proxy.refused().is_empty(), "no handshake was refused: {run}");
    // The verdict names the refusal and the settings that fix it, not an unreachable registry.
    assert!(line(&run).contains("CertificateRequired"), "{run}");
    assert!(line(&run).contains("set [schema_registry] certificate and key"), "{run}");
    let identity = format!(
        "{ca}certificate = \"{}\"\nkey = \"{}\"\n",
        pem("client.pem").display(),
        pem("client.key").display()
    );
    let config = avro_config(&s, "", &url, &identity);
    let run = walrelay_async(&["check"], Some(&config)).await;
    println!("check with the client certificate: {}", line(&run));
    assert!(line(&run).starts_with("ok") && line(&run).contains("https://"), "{run}");
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 2).await;
    let topic = s.topic("Order");
    let got =
        kafka::consume(services().broker.bootstrap(), &topic, 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{}", relay.log());
    let decoded = decode_with_confluent("avro", &registry().ccompat_url(), &topic, &values(&got));
    assert_eq!(decoded.len(), 2);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
