//! Fuzzing what walrelay reads: seeds taken from the docs' examples with a known secret planted
//! in them, small byte-level mutations of those seeds, and the two oracles every input is held
//! to — nothing panics, and the secret never shows in what walrelay prints.
//!
//! Cases come from proptest's deterministic runner, so a CI run is reproducible and a failure
//! names the input that caused it. Each input's test ends with one line,
//! `fuzz <input>: N cases, 0 panics, 0 leaks`, through [`super::note`] (visible without
//! `--nocapture`).
//!
//! What counts as a leak: the planted secret in the output while the mutated input still holds
//! it where it was planted (`user:SECRET@`, `"sasl.password" = "SECRET"`, …). A mutation that
//! breaks that entry (renames `sasl.password` to `sasl.passwrd`, say) leaves a value no rule
//! could know to be a secret; such a case still counts for the panic oracle.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};

/// The secrets planted in the seeds all start with this; the first entry of a seed gets
/// `…A`, the second `…B`, so that a mutation breaking one entry does not blind the oracle to
/// the other.
pub const SECRET: &str = "Fz-s3cret-9Qx";

/// A seed: the text, and the entries in it that hold a secret (with the secret they hold).
#[derive(Debug, Clone)]
pub struct Seed {
    pub text: String,
    entries: Vec<(String, String)>,
}

impl Seed {
    /// `entries` are substrings of `text` written with the placeholder `SECRET`; the n-th one
    /// gets the n-th secret wherever it occurs.
    pub fn new(text: impl Into<String>, entries: &[&str]) -> Seed {
        let mut text = text.into();
        let mut planted = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let token = format!("{SECRET}{}", (b'A' + i as u8) as char);
            assert!(text.contains(entry), "seed does not hold {entry}:\n{text}");
            let filled = entry.replace("SECRET", &token);
            text = text.replace(entry, &filled);
            planted.push((filled, token));
        }
        assert!(!text.contains("SECRET"), "a placeholder outside the entries:\n{text}");
        Seed { text, entries: planted }
    }

    /// The secrets `mutated` still holds only where this seed planted them: each occurrence
    /// of the secret inside an intact entry. A secret a mutation carried elsewhere (a renamed
    /// key, a duplicated slice) is no longer recognisably a secret, and is not judged.
    pub fn guarded(&self, mutated: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(entry, token)| {
                let in_entries = mutated.matches(entry.as_str()).count();
                in_entries > 0 && in_entries == mutated.matches(token.as_str()).count()
            })
            .map(|(_, token)| token.clone())
            .collect()
    }
}

/// Bytes a mutation inserts: mostly the ones that end strings, keys, URLs and lines.
const INTERESTING: &[u8] = b"\"'=:@/[]{},\n\\#. %?&\t\x00\xff0a";

/// One seed and 1–4 edits: flip a byte, delete up to 8 bytes, insert an interesting byte,
/// duplicate a slice. Invalid UTF-8 is replaced (the readers take text).
pub fn mutated(seeds: Vec<Seed>) -> impl Strategy<Value = (usize, String)> {
    let count = seeds.len();
    let edits = proptest::collection::vec(
        (0u8..4, any::<prop::sample::Index>(), any::<u8>(), 1usize..9),
        1..5,
    );
    (0..count, edits).prop_map(move |(which, edits)| {
        let mut bytes = seeds[which].text.clone().into_bytes();
        for (kind, at, byte, len) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => {
                    if let Some(b) = bytes.get_mut(i) {
                        *b ^= byte | 1;
                    }
                }
                1 => {
                    let end = (i + len).min(bytes.len());
                    bytes.drain(i.min(end)..end);
                }
                2 => bytes.insert(i, INTERESTING[byte as usize % INTERESTING.len()]),
                _ => {
                    let end = (i + len).min(bytes.len());
                    let slice = bytes[i.min(end)..end].to_vec();
                    bytes.splice(i..i, slice);
                }
            }
        }
        (which, String::from_utf8_lossy(&bytes).into_owned())
    })
}

/// `cases` values of `strategy`, from proptest's deterministic runner.
pub fn generate<S: Strategy>(strategy: S, cases: u32) -> Vec<S::Value> {
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig { cases, ..RunnerConfig::default() },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    (0..cases)
        .map(|_| {
            strategy.new_tree(&mut runner).expect("the strategies here never reject").current()
        })
        .collect()
}

/// Counts one input's cases, panics and leaks.
pub struct Tally {
    input: &'static str,
    cases: usize,
    binary_cases: usize,
    panics: usize,
    leaks: usize,
    failures: Vec<String>,
    started: Instant,
}

impl Tally {
    pub fn new(input: &'static str) -> Tally {
        Tally {
            input,
            cases: 0,
            binary_cases: 0,
            panics: 0,
            leaks: 0,
            failures: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Runs one in-process case: `run` returns everything walrelay would print for it.
    pub fn case(&mut self, input: &str, secrets: &[String], run: impl FnOnce() -> String) {
        self.cases += 1;
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(output) => self.judge(input, secrets, &output, None),
            Err(panic) => {
                self.panics += 1;
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                self.fail(format!("panic {what:?} on input:\n{input}"));
            }
        }
    }

    /// Judges one run of the binary: a panic is exit code 101 or Rust's panic message.
    pub fn binary_case(&mut self, input: &str, secrets: &[String], run: &Finished) {
        self.cases += 1;
        self.binary_cases += 1;
        self.judge(input, secrets, &run.output, Some(run.code));
    }

    fn judge(&mut self, input: &str, secrets: &[String], output: &str, code: Option<Option<i32>>) {
        if code == Some(Some(101)) || output.contains("panicked at") {
            self.panics += 1;
            self.fail(format!("panic (exit {code:?}) on input:\n{input}\noutput:\n{output}"));
        }
        if secrets.iter().any(|secret| output.contains(secret.as_str())) {
            self.leaks += 1;
            self.fail(format!("secret printed for input:\n{input}\noutput:\n{output}"));
        }
    }

    fn fail(&mut self, text: String) {
        if self.failures.len() < 3 {
            self.failures.push(text);
        }
    }

    /// Prints the summary line, then fails the test on any panic or leak.
    pub fn finish(self) {
        super::note(&format!(
            "fuzz {}: {} cases, {} panics, {} leaks ({} of the cases through the walrelay binary; {:.1} s)",
            self.input,
            self.cases,
            self.panics,
            self.leaks,
            self.binary_cases,
            self.started.elapsed().as_secs_f64()
        ));
        assert!(
            self.panics == 0 && self.leaks == 0,
            "fuzz {}: {} panics, {} leaks; first failures:\n{}",
            self.input,
            self.panics,
            self.leaks,
            self.failures.join("\n-----\n")
        );
    }
}

/// One finished (or stopped) run of the binary.
pub struct Finished {
    /// `None`: stopped at the deadline (or by a signal).
    pub code: Option<i32>,
    /// stdout then stderr.
    pub output: String,
}

/// A command to run: arguments, extra environment, and whether to stop it at the deadline as
/// the expected outcome (`walrelay run` retries an unreachable server for ever).
pub struct Invocation {
    pub args: Vec<String>,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub stop_after: Option<Duration>,
}

/// Runs every invocation of the binary at once (they mostly wait on sockets), each in `dir`,
/// and collects their output. One that outlives `deadline` is killed and judged on what it
/// printed until then.
pub fn run_all(dir: &Path, invocations: &[Invocation], deadline: Duration) -> Vec<Finished> {
    let bin = super::process::walrelay_bin();
    let started = Instant::now();
    let mut children: Vec<(Child, std::path::PathBuf, Option<Duration>)> = Vec::new();
    for (i, inv) in invocations.iter().enumerate() {
        let out_path = dir.join(format!("out-{i}.txt"));
        let out = std::fs::File::create(&out_path).expect("create output file");
        let err = out.try_clone().expect("clone output file");
        let child = Command::new(&bin)
            .args(&inv.args)
            .envs(inv.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "walrelay=debug,info")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        children.push((child, out_path, inv.stop_after));
    }
    let mut finished = Vec::new();
    for (mut child, out_path, stop_after) in children {
        let limit = stop_after.unwrap_or(deadline).min(deadline);
        let code = loop {
            match child.try_wait().expect("wait for walrelay") {
                Some(status) => break status.code(),
                None if started.elapsed() >= limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let bytes = std::fs::read(&out_path).unwrap_or_default();
        finished.push(Finished { code, output: String::from_utf8_lossy(&bytes).into_owned() });
    }
    finished
}

/// The fenced code blocks of `language` in a Markdown document.
pub fn code_blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(lang)) if lang.trim() == language => current = Some(String::new()),
            (Some(_), Some(_)) => blocks.push(current.take().unwrap_or_default()),
            (Some(block), None) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// Every `stride`-th value, at most `count` of them: the cases that also go through the binary.
pub fn sample<T: Clone>(values: &[T], count: usize) -> Vec<T> {
    let stride = (values.len() / count.max(1)).max(1);
    values.iter().step_by(stride).take(count).cloned().collect()
}
