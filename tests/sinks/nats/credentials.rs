//! `[nats] credentials_file` against a nats-server in operator (JWT) mode: the `.creds` file
//! of a user the server trusts logs in and publishes; one it does not trust (another account,
//! an expired JWT, a revoked user, a seed that is not the user's) is refused for good; a file that is missing
//! or is no `.creds` file is a definite error naming the file and how to make one.

use std::path::Path;
use std::time::Duration;

use walrelay::sink::nats::{self, Login, NatsConfig};
use walrelay::sink::Published;

use super::{publish, record};
use crate::common::Setup;
use crate::support::nats::operator::{creds_file, private_nats_with_operator};
use crate::support::process::walrelay_async;
use crate::support::{free_port, scratch_dir, unique, wait_until};

fn with_creds(mut config: NatsConfig, file: &Path) -> NatsConfig {
    config.login = Login::CredentialsFile(file.to_path_buf());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_logs_in_and_publishes_and_a_wrong_one_is_definite() {
    let (server, creds) = private_nats_with_operator();
    println!("nats-server in operator mode: {}", server.describe());
    let stream = unique("nats_creds");
    let config = with_creds(server.config(&stream, &[&format!("{stream}.>")]), &creds.user);

    let created = nats::setup(&config, &[]).await.expect("setup with the .creds file");
    println!("setup: {created:?}");
    let sink = nats::connect(&config).await.expect("connect with the .creds file");
    let subject = format!("{stream}.orders");
    let answer = publish(&sink, record(&subject, "creds-1", Some("o-1"), Some(b"{}"))).await;
    assert_eq!(answer, Published::Acked);
    let stored = nats::read_back(&config, &subject, 1, usize::MAX).await.expect("read back");
    let ids: Vec<_> = stored.iter().map(|m| m.msg_id.clone().unwrap_or_default()).collect();
    println!("the stream holds {}: {ids:?}", stored.len());
    assert_eq!(ids, ["creds-1"]);
    println!("check: {}", nats::check(&config).await.expect("check with the .creds file"));

    // Each refused for its own reason, as the server's debug log says (the client only hears
    // "authorization violation").
    for (file, what, reason) in [
        (&creds.stranger, "a user of an account the server does not know", "account missing"),
        (&creds.expired, "a user whose JWT has expired", "claim is expired"),
        (&creds.wrong_seed, "the user's JWT with another user's seed", "Signature not verified"),
        (&creds.revoked, "a user the account revoked", "User authentication revoked"),
    ] {
        match nats::connect(&with_creds(config.clone(), file)).await {
            Err(e) => {
                println!("{what}: {} (hint: {:?})", e.chain(), e.hint());
                assert!(!e.is_transient(), "{what}: {e:?}");
                assert!(e.chain().contains("refused walrelay's login"), "{what}: {e:?}");
                let named = format!("credentials_file {}", file.display());
                assert!(e.hint().is_some_and(|h| h.contains(&named)), "{what}: {e:?}");
            }
            Ok(_) => panic!("{what}: the server let walrelay in"),
        }
        let logged = wait_until(reason, Duration::from_secs(10), || {
            let logged = server.log_tail(400).contains(reason);
            async move { logged }
        })
        .await;
        let said: Vec<String> =
            server.log_tail(400).lines().filter(|l| l.contains(reason)).map(String::from).collect();
        println!("  the server: {said:?}");
        assert!(logged, "{what}: the server did not log {reason:?}:\n{}", server.log_tail(30));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_malformed_credentials_file_is_definite_naming_the_file_and_the_fix() {
    // Nothing listens: the file is read before any connection is tried.
    let opts = [("url".to_string(), format!("nats://127.0.0.1:{}", free_port()))];
    let config = nats::parse(&opts.into_iter().collect()).expect("config");
    let dir = scratch_dir("nats_bad_creds");
    let missing = dir.join("missing.creds");
    let not_creds = dir.join("not.creds");
    std::fs::write(&not_creds, "user = relay\npassword = hunter2\n").expect("write");
    let bad_seed = dir.join("bad-seed.creds");
    std::fs::write(&bad_seed, creds_file("eyJhbGciOi.eyJ.c2ln", "SUANOTASEED")).expect("write");

    for (file, what) in [
        (&missing, "a path with no file"),
        (&not_creds, "a file that is not a .creds file"),
        (&bad_seed, "a .creds file whose seed is not an NKey seed"),
    ] {
        match nats::connect(&with_creds(config.clone(), file)).await {
            Err(e) => {
                println!("{what}: {} (hint: {:?})", e.chain(), e.hint());
                assert!(!e.is_transient(), "{what}: {e:?}");
                let named = format!("credentials_file {}", file.display());
                assert!(e.chain().contains(&named), "{what}: {e:?}");
                assert!(
                    e.hint().is_some_and(|h| h.contains("nsc generate creds")),
                    "{what}: {e:?}"
                );
            }
            Ok(_) => panic!("{what}: connected"),
        }
    }
}

/// `walrelay check` with `credentials_file` in `[nats]`: the sink's line is ok with the right
/// file and fails naming `credentials_file` with a stranger's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_check_logs_in_with_a_credentials_file() {
    let s = Setup::new("nats_creds_check").await;
    let (server, creds) = private_nats_with_operator();
    let stream = unique("nats_creds_check");
    let subjects = [s.topic("Order")];
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    let section = |file: &Path| {
        format!(
            "[delivery]\nsink = \"nats\"\n\n{}credentials_file = \"{}\"\n",
            server.config_section(&stream, &subjects),
            file.display()
        )
    };

    let ok = walrelay_async(&["check"], Some(&s.config_with("", "", &section(&creds.user)))).await;
    println!("{ok}");
    let sink_lines = ok.lines_starting("ok   sink nats:");
    assert_eq!(sink_lines.len(), 1, "{ok}");
    assert!(sink_lines[0].contains("answers") && sink_lines[0].contains("JetStream"), "{ok}");

    let refused =
        walrelay_async(&["check"], Some(&s.config_with("", "", &section(&creds.stranger)))).await;
    println!("{refused}");
    assert_ne!(refused.code, Some(0), "{refused}");
    let failed = refused.lines_starting("FAIL sink nats:");
    assert_eq!(failed.len(), 1, "{refused}");
    let named = format!("credentials_file {}", creds.stranger.display());
    assert!(failed[0].contains(&named), "{refused}");
}
