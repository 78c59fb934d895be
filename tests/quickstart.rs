//! README's first command: `scripts/quickstart.sh` runs the `walrelay-quickstart` driver, which
//! starts a throwaway PostgreSQL and the in-memory broker, the relay with its console, and shows
//! the sample records as they arrive. Here with `--no-wait`, which stops once they arrived.

use std::process::Command;
use std::time::Instant;

use crate::support::process::walrelay_bin;

#[test]
fn quickstart_shows_the_five_sample_records_and_the_consoles_url() {
    let bin = walrelay_bin().with_file_name("walrelay-quickstart");
    assert!(
        bin.is_file(),
        "{} is not built: build with --features quickstart, as scripts/test.sh and scripts/quickstart.sh do",
        bin.display()
    );
    let started = Instant::now();
    let out = Command::new(&bin)
        .arg("--no-wait")
        .env("WALRELAY_BIN", walrelay_bin())
        .env("WALRELAY_TEST_BROKER", "tansu")
        // The driver's own services: not this binary's notes file.
        .env_remove("WALRELAY_TEST_NOTES")
        .output()
        .expect("run walrelay-quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let records: Vec<&str> = stdout.lines().filter(|l| l.starts_with("outbox.event.")).collect();
    let console = stdout.lines().find(|l| l.starts_with("== the console: ")).unwrap_or("");
    println!(
        "quickstart --no-wait: exit {:?} after {:.1?}, {} records, {console}",
        out.status.code(),
        started.elapsed(),
        records.len()
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(records.len(), 5, "{stdout}");
    assert!(
        records[0].contains("OrderCreated") || stdout.contains("eventType=OrderCreated"),
        "{stdout}"
    );
    assert!(console.starts_with("== the console: http://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("walrelay stopped on SIGTERM with exit code Some(0)"), "{stdout}");
}
