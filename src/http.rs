//! The operational HTTP endpoint: `/healthz` (the process is alive: this thread answers and the
//! relay's thread runs), `/readyz` (streaming, broker reachable, lag under the limit),
//! `/metrics` (OpenMetrics text), and the routes another module mounts ([`Routes`]: for
//! `walrelay run`, the console's page and API). These three stay open whatever is mounted:
//! probes and scrapers carry no token and name the pod by its address.
//!
//! HTTP/1 is hyper's; this file keeps what an operator's endpoint needs around it:
//!
//! - **its own thread and runtime.** The relay loop runs on a single-threaded runtime; a scrape
//!   (encoding, reading `/proc`) or a flood of connections there would delay WAL reads and
//!   acknowledgements. Here they cost this thread only, and the relay's values are atomics.
//! - **one request per connection, bounded in time.** A connection must send its request head
//!   within [`Limits::header_timeout`] and is closed after its response (scrapers and probes
//!   open one per request) or at [`Limits::connection_timeout`], whichever comes first.
//! - **a bound on open connections** ([`Limits::max_connections`]). At the bound, the
//!   connection open longest without a request is closed to make room, so connections that
//!   send nothing never lock a scrape or a probe out; only connections being answered hold
//!   their place.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore};

use crate::config::HttpConfig;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// The name of the endpoint's thread (in `top -H`, and in panic messages).
pub const THREAD: &str = "walrelay-http";

/// `/healthz` fails once the relay's runtime has not run its heartbeat for this long: its one
/// thread is stuck (a blocking call, a busy loop), which this thread, answering on its own,
/// would otherwise hide from a liveness probe.
pub const RELAY_STALL: Duration = Duration::from_secs(30);

/// Runs on the relay's runtime, beside the relay: proves to `/healthz` that the runtime still
/// schedules tasks. Never returns.
pub async fn heartbeat(metrics: Arc<Metrics>) {
    loop {
        metrics.relay_heartbeat_micros.store(crate::clock::unix_micros(), Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A response, as every route gives it.
pub type Reply = Response<Full<Bytes>>;

/// Routes a module above this one serves here, beside `/healthz`, `/readyz` and `/metrics`
/// (which no mount can take): the endpoint knows paths, not what answers them.
pub trait Routes: Send + Sync + 'static {
    /// Whether `path` is one of these routes.
    fn owns(&self, path: &str) -> bool;

    /// Answers a request for a path [`Routes::owns`]. It runs on the endpoint's thread, within
    /// the connection's timeout.
    fn respond(
        &self,
        request: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send + '_>>;

    /// Runs once on the endpoint's runtime before the first request: tasks spawned here run
    /// beside the requests, never on the relay's thread.
    fn start(&self) {}
}

/// How long connections may take, and how many may be open.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// From accepting a connection to having its whole request head.
    pub header_timeout: Duration,
    /// From accepting a connection to closing it, response written or not.
    pub connection_timeout: Duration,
}

impl Default for Limits {
    /// Prometheus' default scrape timeout is 10 s and Kubernetes' probe timeout 1 s: an answer
    /// takes milliseconds, so these only ever cut off clients that stall.
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(10),
        }
    }
}

/// Binds `[http] listen` and serves on a thread of its own, `mounted` too when given; returns
/// the bound address.
pub fn serve(
    cfg: &HttpConfig,
    metrics: Arc<Metrics>,
    mounted: Option<Box<dyn Routes>>,
) -> Result<SocketAddr> {
    serve_with(cfg, metrics, mounted, Limits::default())
}

/// [`serve`] with other limits (tests use short ones).
pub fn serve_with(
    cfg: &HttpConfig,
    metrics: Arc<Metrics>,
    mounted: Option<Box<dyn Routes>>,
    limits: Limits,
) -> Result<SocketAddr> {
    let state = Arc::new(State {
        metrics,
        max_lag: cfg.ready_max_lag_bytes,
        max_unacked: cfg.ready_max_unacked,
        mounted,
    });
    let listen = cfg.listen;
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ =
                        bound_tx.send(Err(Error::transient("cannot start the http runtime", e)));
                    return;
                }
            };
            runtime.block_on(async move {
                let listener = match bind(listen) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = bound_tx.send(Err(e));
                        return;
                    }
                };
                let _ = bound_tx
                    .send(listener.local_addr().map_err(|e| Error::transient("http listener", e)));
                if let Some(mounted) = &state.mounted {
                    mounted.start();
                }
                accept_loop(listener, state, limits).await
            })
        })
        .map_err(|e| Error::transient("cannot start the http thread", e))?;
    let bound = bound_rx
        .recv()
        .map_err(|_| Error::transient_msg("the http thread ended before listening"))??;
    tracing::info!(%bound, "http endpoint listening");
    Ok(bound)
}

/// A listener with a backlog of 1024 (std's is 128), so a burst of connections waits in the
/// kernel instead of being refused while the accept loop makes room.
fn bind(listen: SocketAddr) -> Result<TcpListener> {
    let cannot = |e| {
        Error::definite_with(
            format!("cannot listen on {listen}"),
            "change [http] listen, or free the port",
            e,
        )
    };
    let socket = match listen {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(cannot)?;
    socket.set_reuseaddr(true).map_err(cannot)?;
    socket.bind(listen).map_err(cannot)?;
    socket.listen(1024).map_err(cannot)
}

struct State {
    metrics: Arc<Metrics>,
    max_lag: u64,
    max_unacked: Duration,
    mounted: Option<Box<dyn Routes>>,
}

/// Connections accepted that have not sent a request head yet, oldest first: the ones
/// closed to make room at the bound.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    queue: VecDeque<(u64, Arc<Notify>)>,
}

impl Waiting {
    fn add(&mut self) -> (u64, Arc<Notify>) {
        self.next_id += 1;
        let close = Arc::new(Notify::new());
        self.queue.push_back((self.next_id, close.clone()));
        (self.next_id, close)
    }

    fn remove(&mut self, id: u64) {
        self.queue.retain(|(i, _)| *i != id);
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, limits: Limits) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, mostly: retrying at once would spin. Connections
            // closing free some.
            Err(e) => {
                tracing::warn!(error = %e, "http endpoint cannot accept a connection; retrying in 100 ms");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match open.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let oldest = waiting.lock().unwrap_or_else(|e| e.into_inner()).queue.pop_front();
                if let Some((_, close)) = oldest {
                    close.notify_one();
                }
                // Every connection ends by its connection timeout at the latest.
                match tokio::time::timeout(limits.connection_timeout, open.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(permit)) => permit,
                    _ => continue,
                }
            }
        };
        let (state, waiting) = (state.clone(), waiting.clone());
        tokio::spawn(async move {
            connection(stream, state, waiting, limits).await;
            drop(permit);
        });
    }
}

/// Serves one request on `stream`, then closes it.
async fn connection(
    stream: TcpStream,
    state: Arc<State>,
    waiting: Arc<Mutex<Waiting>>,
    limits: Limits,
) {
    let (id, close) = waiting.lock().unwrap_or_else(|e| e.into_inner()).add();
    let answered = waiting.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        // A request head arrived: this connection is no longer one to close for room.
        answered.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        let state = state.clone();
        async move {
            let path = request.uri().path();
            let response = match &state.mounted {
                Some(mounted) if !OPEN.contains(&path) && mounted.owns(path) => {
                    mounted.respond(request).await
                }
                _ => respond(request.method(), path, &state),
            };
            Ok::<_, Infallible>(response)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = tokio::time::timeout(limits.connection_timeout, served) => {}
        _ = close.notified() => {}
    }
    waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
}

/// The endpoint's own paths, answered to anyone.
const OPEN: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

fn respond(method: &Method, path: &str, state: &State) -> Reply {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match path {
        "/healthz" => match relay_stalled(&state.metrics) {
            None => text(StatusCode::OK, "ok\n".into()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not alive: {why}\n")),
        },
        "/readyz" => match not_ready(&state.metrics, state.max_lag, state.max_unacked) {
            None => text(StatusCode::OK, "ready\n".into()),
            Some(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
        },
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(state.metrics.render())));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Why the relay's runtime looks stuck, or `None` while its heartbeat moves (or before it
/// started: the relay has not begun).
fn relay_stalled(m: &Metrics) -> Option<String> {
    let last = m.relay_heartbeat_micros.load(Relaxed);
    let silent = (crate::clock::unix_micros() - last).max(0) as u64;
    (last != 0 && silent > RELAY_STALL.as_micros() as u64)
        .then(|| format!("the relay's thread has not run for {} s", silent / 1_000_000))
}

/// Why the relay is not ready, or `None` when it is. A stand-by relay (waiting for the slot
/// another one streams from) is not: see docs/operations.md, "Kubernetes".
fn not_ready(m: &Metrics, max_lag: u64, max_unacked: Duration) -> Option<String> {
    // The broker first: an outage ends sessions too, and "not streaming" would then hide
    // the cause behind its effect.
    if let Some(why) = m.login_refused() {
        return Some(why);
    }
    if let Some(down) = m.broker_down_for() {
        return Some(format!("no Kafka broker reachable for {} s", down.as_secs()));
    }
    // A session ended by records Kafka did not acknowledge: the broker is the cause, said
    // before the probe can say it (it asks every 2 s and waits 4 s for an answer).
    if !m.streaming.load(Relaxed) && m.delivery_failing.load(Relaxed) {
        return Some(format!(
            "{} did not acknowledge the last records sent; a new session starts (see the log)",
            m.sink_named()
        ));
    }
    if !m.streaming.load(Relaxed) {
        return Some("not streaming from the slot".into());
    }
    if !m.broker_up.load(Relaxed) {
        return Some("no Kafka broker has answered yet".into());
    }
    // A broker that accepts connections but does not answer (hung, overloaded) still reads as
    // reachable for a few seconds; records waiting this long say it plainly.
    let unacked = m.oldest_unacked_age();
    if unacked > max_unacked {
        return Some(format!(
            "the oldest unacknowledged record has waited {} s, over [http] ready_max_unacked_s = {}",
            unacked.as_secs(),
            max_unacked.as_secs()
        ));
    }
    // A broker that answers but refused the last records (NOT_ENOUGH_REPLICAS, timed out):
    // not ready until the next acknowledgement.
    if m.registry_unreachable.load(Relaxed) {
        return Some(
            "the schema registry does not answer; records wait for their schema's id (see the log)"
                .into(),
        );
    }
    if m.delivery_failing.load(Relaxed) {
        return Some(format!(
            "{} did not acknowledge the last records sent (see the log)",
            m.sink_named()
        ));
    }
    let lag = m.positions().lag_bytes();
    (lag > max_lag)
        .then(|| format!("lag {lag} bytes is over [http] ready_max_lag_bytes = {max_lag}"))
}

#[cfg(test)]
mod tests;
