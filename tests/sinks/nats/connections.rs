//! The NATS sink's connections: no server, a login the server refuses and one it takes (also
//! in the URL), a server without JetStream.

use std::time::Instant;

use walrelay::sink::nats::{self, Login};
use walrelay::sink::Published;

use super::{publish, record};
use crate::support::nats::{private_nats_with_login, private_nats_without_jetstream};
use crate::support::unique;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_no_server_is_transient() {
    let port = crate::support::free_port();
    let opts =
        [("url".to_string(), format!("nats://127.0.0.1:{port}")), ("timeout".into(), "2s".into())]
            .into_iter()
            .collect();
    let config = nats::parse(&opts).expect("config");
    let started = Instant::now();
    match nats::connect(&config).await {
        Err(e) => {
            println!("no server on {port}: {} after {:.1?}", e.chain(), started.elapsed());
            assert!(e.is_transient(), "{e:?}");
        }
        Ok(_) => panic!("connected to nothing on port {port}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_definite_and_the_right_one_publishes() {
    let server = private_nats_with_login("relay", "s3cret-pw");
    let stream = unique("nats_login");
    let mut config = server.config(&stream, &[&format!("{stream}.>")]);
    for (login, what) in [
        (Login::Url, "no login"),
        (
            Login::UserPassword { user: "relay".into(), password: "wrong-pw".into() },
            "wrong password",
        ),
        (Login::Token("not-the-token".into()), "a token"),
    ] {
        config.login = login;
        match nats::connect(&config).await {
            Err(e) => {
                println!("{what}: {} (hint: {:?})", e.chain(), e.hint());
                assert!(!e.is_transient(), "{what}: {e:?}");
                assert!(!e.chain().contains("wrong-pw") && !e.chain().contains("not-the-token"));
            }
            Ok(_) => panic!("{what}: the server let walrelay in"),
        }
    }
    config.login = Login::UserPassword { user: "relay".into(), password: "s3cret-pw".into() };
    nats::setup(&config, &[]).await.expect("setup with the login");
    let sink = nats::connect(&config).await.expect("user and password");
    let subject = format!("{stream}.orders");
    assert_eq!(publish(&sink, record(&subject, "e-1", None, None)).await, Published::Acked);
    // The same login in the URL, as WALRELAY_NATS_URL may give it.
    config.login = Login::Url;
    config.url = format!("nats://relay:s3cret-pw@127.0.0.1:{}", server.port());
    let sink = nats::connect(&config).await.expect("user:password@ in the url");
    assert_eq!(publish(&sink, record(&subject, "e-2", None, None)).await, Published::Acked);
    println!("check: {}", nats::check(&config).await.expect("check"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_jetstream_is_retry_and_check_names_the_fix() {
    let server = private_nats_without_jetstream();
    let config = server.config("walrelay", &["orders.>"]);
    let sink = nats::connect(&config).await.expect("core NATS connects");
    let answer = publish(&sink, record("orders.created", "e-1", None, None)).await;
    println!("no JetStream: {answer:?}");
    match answer {
        Published::Retry { reason, .. } => assert!(reason.contains("-js"), "{reason}"),
        other => panic!("expected Retry (JetStream may be starting), got {other:?}"),
    }
    match nats::check(&config).await {
        Err(e) => {
            println!("check: {} (hint: {:?})", e.chain(), e.hint());
            assert!(!e.is_transient() && e.hint().is_some_and(|h| h.contains("-js")), "{e:?}");
        }
        Ok(line) => panic!("check passed without JetStream: {line}"),
    }
    let e = nats::setup(&config, &[]).await.expect_err("setup without JetStream");
    println!("setup: {} (hint: {:?})", e.chain(), e.hint());
}
