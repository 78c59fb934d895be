//! A fresh broker for every measurement (Apache Kafka by default, `--broker tansu` for the
//! in-memory stand-in). tansu's memory engine keeps every record it was given
//! and gets slower as it holds more: in one full run its CPU per record during a drain grew
//! 2–5× between a fresh broker and one holding a few million records from earlier phases,
//! enough to saturate this machine and halve the drain of whichever system ran later. Each
//! system therefore gets a broker of its own, started empty just before it is measured.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::support::{free_port, scratch_dir, Broker};

static CURRENT: Mutex<Option<(Broker, &'static str)>> = Mutex::new(None);
static PID: AtomicU32 = AtomicU32::new(0);

/// Stops the previous broker and starts an empty one; its address is [`bootstrap`] from now on.
pub fn broker() {
    let mut current = CURRENT.lock().unwrap();
    *current = None; // Drop kills the previous one.
    let broker = Broker::start(&scratch_dir("bench-broker"), free_port()).expect("start a broker");
    PID.store(broker.pid(), Ordering::Relaxed);
    // A few short strings leaked per run, so callers can keep taking `&'static str`.
    let bootstrap: &'static str = Box::leak(broker.bootstrap().to_string().into_boxed_str());
    *current = Some((broker, bootstrap));
}

/// The current measurement's broker (starting one if none runs yet).
pub fn bootstrap() -> &'static str {
    if CURRENT.lock().unwrap().is_none() {
        broker();
    }
    CURRENT.lock().unwrap().as_ref().unwrap().1
}

/// Its process id, for CPU accounting.
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}
