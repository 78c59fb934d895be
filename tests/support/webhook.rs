//! A webhook receiver for the HTTP sink's tests: an HTTP/1.1 server on its own thread and
//! runtime (so it outlives nothing and is outlived by no test's runtime), which keeps every
//! request it accepted. It can be told to answer 503 to everything (an outage) and 422 to the
//! paths holding a word (a poison destination).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};

use super::sinks::Delivered;

/// The path every routed name is POSTed under.
pub const PREFIX: &str = "/hooks/";

#[derive(Default)]
struct State {
    /// Requests answered 2xx, in the order they arrived.
    accepted: Vec<Delivered>,
    /// Requests of any answer.
    attempts: usize,
    unavailable: bool,
    /// Paths holding this are answered 422.
    refuse: Option<String>,
}

pub struct Receiver {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else { continue };
                    let state = shared.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let state = state.clone();
                            async move { Ok::<_, Infallible>(answer(&state, req).await) }
                        });
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await;
                    });
                }
            });
        });
        Receiver { port, state }
    }

    /// `[webhook] url`'s template for this receiver.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{PREFIX}${{topic}}", self.port)
    }

    /// Answer 503 to everything (true) or serve again (false).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state.lock().unwrap().unavailable = unavailable;
    }

    /// Answer 422 to the paths that hold `word`.
    pub fn refuse_paths_with(&self, word: &str) {
        self.state.lock().unwrap().refuse = Some(word.to_string());
    }

    /// What was accepted (answered 2xx), in arrival order.
    pub fn accepted(&self) -> Vec<Delivered> {
        self.state.lock().unwrap().accepted.clone()
    }

    /// Requests received, whatever their answer.
    pub fn attempts(&self) -> usize {
        self.state.lock().unwrap().attempts
    }
}

async fn answer(
    state: &Mutex<State>,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let body = req.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
    let mut s = state.lock().unwrap();
    s.attempts += 1;
    let status = if s.unavailable {
        StatusCode::SERVICE_UNAVAILABLE
    } else if s.refuse.as_deref().is_some_and(|w| path.contains(w)) {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        s.accepted.push(Delivered {
            routed_to: path.strip_prefix(PREFIX).unwrap_or(&path).to_string(),
            dedup_id: find("idempotency-key"),
            key: find("walrelay-key"),
            headers,
            body,
        });
        StatusCode::NO_CONTENT
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}
