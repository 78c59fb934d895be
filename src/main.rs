//! The `walrelay` command: parses arguments, sets up logging and signals, runs the relay.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use walrelay::config::Config;
use walrelay::relay::{self, Outcome, Shutdown};

#[derive(Parser)]
#[command(
    name = "walrelay",
    version,
    about = "Relays transactional-outbox events from PostgreSQL to Kafka by streaming the WAL"
)]
struct Cli {
    /// Log format: human-readable lines or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

// Parsed once per process: the admin commands' options cost nothing worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Stream the slot and publish outbox rows to Kafka until SIGTERM/SIGINT.
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    #[command(flatten)]
    Admin(walrelay::admin::AdminCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Run { config } => run(config),
        Command::Admin(command) => walrelay::admin::run(command),
    }
}

fn run(path: PathBuf) -> ExitCode {
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("configuration error {}: {e}", e.origin(&path));
            return ExitCode::from(2);
        }
    };
    // One thread: the replication reader and the relay loop hand each event over in the same
    // thread instead of waking each other across threads (measured: about one context switch
    // per event otherwise). librdkafka runs its own threads.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let grace = config.limits.shutdown_grace;
    let code = runtime.block_on(async move {
        let (stop, shutdown) = Shutdown::new();
        // `[retention]` is told to stop with the relay, and stops inside the relay's stop.
        let retention_stop = stop.subscribe();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("stop requested; flushing and confirming what the sink acknowledged");
            let _ = stop.send(true);
            watchdog(grace);
        });
        let metrics = walrelay::metrics::Metrics::new();
        let _ = metrics.sink.set(config.delivery.sink.name());
        if let Some(http) = &config.http {
            let console = walrelay::console::mount(
                std::sync::Arc::new(config.clone()),
                path.clone(),
                metrics.clone(),
            );
            if let Err(e) = walrelay::http::serve(http, metrics.clone(), console) {
                tracing::error!(error = %e.chain(), hint = e.hint().unwrap_or(""), "cannot start");
                return ExitCode::FAILURE;
            }
        }
        tokio::spawn(walrelay::http::heartbeat(metrics.clone()));
        // `[retention]`: purges on a task and a connection of its own, beside the relay.
        let retention =
            walrelay::retention::task::Task::spawn(&config, metrics.clone(), retention_stop);
        // `[audit]`: audits on a thread, a connection and a Kafka reader of its own.
        let audit = walrelay::audit::task::Task::spawn(&config, metrics.clone());
        let outcome = relay::run(config, metrics, shutdown).await;
        // The relay's stop kept `[limits] shutdown_grace`; a purge still running is dropped.
        if let Some(task) = retention {
            task.stop().await;
        }
        if let Some(task) = audit {
            task.stop();
        }
        match outcome {
            Ok(Outcome::Stopped { .. }) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e.chain(), hint = e.hint().unwrap_or(""), "walrelay stopped");
                ExitCode::FAILURE
            }
        }
    });
    // A librdkafka call still running on a blocking thread (a commit cut short by the stop)
    // must not hold the exit: what it does can no longer move the slot.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// The stop's deadlines keep it within `[limits] shutdown_grace`; this is the last resort if
/// something ignores its own (a librdkafka call blocking past its timeout): the process exits
/// at the end of the grace period. Safe, because nothing confirms a position the Kafka side
/// has not settled: the next start resumes from the slot.
fn watchdog(grace: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(grace.saturating_sub(Duration::from_millis(100)));
        tracing::error!(
            grace_ms = grace.as_millis() as u64,
            "the stop did not finish within [limits] shutdown_grace_ms; exiting now (the next start resumes from the slot's confirmed position)"
        );
        std::process::exit(1);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // pgwire-replication logs every end of its worker as an ERROR, including the "slot in use"
    // a stand-by meets at each retry; walrelay reports each of those errors itself, with what
    // it means and what happens next (source::stream::classify).
    let filter = match "pgwire_replication::client::tokio_client=off".parse() {
        Ok(quiet) => filter.add_directive(quiet),
        Err(_) => filter,
    };
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // The console's recent problems keep the warnings and errors the log writes.
    let registry = tracing_subscriber::registry().with(filter).with(walrelay::console::log::Keep);
    match format {
        LogFormat::Human => registry.with(lines).init(),
        LogFormat::Json => registry.with(lines.json()).init(),
    }
}
