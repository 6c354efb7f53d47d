//! The export thread: `/metrics` over HTTP (axum on a single-threaded tokio runtime)
//! and the OTLP/HTTP push, both reading the [`Sink`]'s latest snapshot. It is started
//! before the run gives up its privileges and confines its dispatch thread, and it never
//! touches a plugin: a scrape renders the snapshot the last report published.

use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prost::Message;

use super::otlp::{self, Host};
use super::{prom, Sink};

/// What to export, and how often plugins report and OTLP pushes.
#[derive(Debug)]
pub struct Config {
    /// Serve `/metrics` here (`127.0.0.1:9464`, `:9464` for every address).
    pub serve: Option<String>,
    /// Push OTLP/HTTP to this URL (`http://collector:4318`, `/v1/metrics` added when it
    /// names no path).
    pub otlp: Option<String>,
    pub every: Duration,
    /// Write a snapshot to this descriptor at every interval and at the end (a session's
    /// run, for the daemon's endpoint: see [`super::wire`]).
    pub to_daemon: Option<std::fs::File>,
}

/// How long the end of a run waits for its last OTLP push.
const LAST_PUSH: Duration = Duration::from_secs(5);

/// The running export thread.
pub struct Exporter {
    pub sink: Arc<Sink>,
    address: Option<SocketAddr>,
    endpoint: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
    pushes: Arc<Mutex<Pushes>>,
    /// The thread writing to the daemon, and how to stop it.
    to_daemon: Option<(mpsc::Sender<()>, JoinHandle<Option<String>>)>,
}

/// What came of the OTLP pushes.
#[derive(Debug, Default)]
struct Pushes {
    ok: u64,
    failed: u64,
    last_error: Option<String>,
}

impl Exporter {
    /// Listen (a bad or busy address is an error now, before anything is traced), then
    /// start the thread.
    pub fn start(config: Config, sink: Arc<Sink>) -> anyhow::Result<Exporter> {
        let listener = match &config.serve {
            Some(addr) => Some(listen(addr)?),
            None => None,
        };
        let address = listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let endpoint = config.otlp.as_deref().map(otlp_endpoint).transpose()?;
        let client = match &endpoint {
            Some(_) => Some(
                reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .context("cannot set up the OTLP client")?,
            ),
            None => None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the export thread's runtime")?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let pushes = Arc::new(Mutex::new(Pushes::default()));
        let (thread_sink, thread_pushes, url, every) = (sink.clone(), pushes.clone(), endpoint.clone(), config.every);
        let thread = std::thread::Builder::new()
            .name("wasmtap-export".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Some(listener) = listener {
                        let sink = thread_sink.clone();
                        tokio::spawn(serve(listener, move || prom::families(&sink.snapshot(), &[])));
                    }
                    let host = Host::this();
                    match (client, url) {
                        (Some(client), Some(url)) => {
                            let send = |last| push(&client, &url, &thread_sink, &host, &thread_pushes, last);
                            let mut ticks = tokio::time::interval(every);
                            ticks.tick().await;
                            tokio::pin!(stop_rx);
                            loop {
                                tokio::select! {
                                    _ = ticks.tick() => send(false).await,
                                    _ = &mut stop_rx => break,
                                }
                            }
                            send(true).await;
                        }
                        _ => {
                            let _ = stop_rx.await;
                        }
                    }
                    let _ = done_tx.send(());
                });
            })
            .context("cannot start the export thread")?;
        let to_daemon = match config.to_daemon {
            Some(file) => Some(to_daemon(file, sink.clone(), config.every)?),
            None => None,
        };
        Ok(Exporter {
            sink,
            address,
            endpoint,
            stop: Some(stop_tx),
            done: done_rx,
            thread: Some(thread),
            pushes,
            to_daemon,
        })
    }

    /// Where `/metrics` is served.
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// Where OTLP is pushed.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The end of the run: the last OTLP push (waited for, at most a few seconds). The
    /// endpoint stops with the process. Returns a line for the user when pushes failed.
    pub fn finish(mut self) -> Option<String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The daemon's last snapshot: the run's totals.
        let daemon_said = self.to_daemon.take().and_then(|(stop, thread)| {
            let _ = stop.send(());
            thread.join().ok().flatten()
        });
        let finished = self.done.recv_timeout(LAST_PUSH + Duration::from_secs(1)).is_ok();
        if finished {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        let pushes = self.pushes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(url) = self.endpoint.as_deref() else { return daemon_said };
        match (&pushes.last_error, finished) {
            (Some(e), _) => Some(format!(
                "otlp: {} of {} pushes to {url} failed; the last: {e}",
                pushes.failed,
                pushes.ok + pushes.failed
            )),
            (None, false) => Some(format!("otlp: the last push to {url} did not finish in time")),
            _ => None,
        }
    }
}

/// The thread that writes a snapshot to the daemon at every interval, and a last one
/// when told to stop. A write blocks only this thread (the daemon reads each session on
/// its own); a failed one ends the writing, and is said at the end of the run.
fn to_daemon(
    mut file: std::fs::File,
    sink: Arc<Sink>,
    every: Duration,
) -> anyhow::Result<(mpsc::Sender<()>, JoinHandle<Option<String>>)> {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("wasmtap-export-daemon".into())
        .spawn(move || loop {
            let last = !matches!(stop_rx.recv_timeout(every), Err(mpsc::RecvTimeoutError::Timeout));
            let payload = super::wire::encode(&sink.snapshot());
            if let Err(e) = super::wire::write_frame(&mut file, &payload) {
                return Some(format!("metrics: cannot write to the daemon: {e}"));
            }
            if last {
                return None;
            }
        })
        .context("cannot start the thread that writes the metrics to the daemon")?;
    Ok((stop_tx, thread))
}

/// `ADDR:PORT`, or `:PORT` for every address.
fn listen(addr: &str) -> anyhow::Result<TcpListener> {
    listen_as("--serve", addr)
}

/// Listen on `addr` (`ADDR:PORT`, or `:PORT` for every address), non-blocking; errors
/// name `what` was given it (`--serve`, `daemon.metrics`).
pub fn listen_as(what: &str, addr: &str) -> anyhow::Result<TcpListener> {
    let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.to_string() };
    let parsed: SocketAddr =
        full.parse().map_err(|_| anyhow::anyhow!("{what} {addr}: expected ADDRESS:PORT (127.0.0.1:9464) or :PORT"))?;
    let listener = TcpListener::bind(parsed).with_context(|| format!("{what} {addr}: cannot listen there"))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The push URL: `/v1/metrics` added to an endpoint with no path, as OpenTelemetry's
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
fn otlp_endpoint(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| anyhow::anyhow!("--otlp {url}: not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        bail!("--otlp {url}: OTLP/HTTP needs an http:// or https:// URL");
    }
    Ok(match parsed.path() {
        "" | "/" => format!("{}/v1/metrics", url.trim_end_matches('/')),
        _ => url.to_string(),
    })
}

/// Serve `/metrics` on `listener`, each scrape answered with what `families` makes then
/// (a run's snapshot, or the daemon's sessions).
pub async fn serve<F>(listener: TcpListener, families: F)
where
    F: Fn() -> Vec<prometheus::proto::MetricFamily> + Clone + Send + Sync + 'static,
{
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    let metrics = move |headers: axum::http::HeaderMap| {
        let families = families.clone();
        async move { answer(&headers, &families()) }
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(|| async { "wasmtap: the metrics are at /metrics\n" }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n").into_response() });
    let _ = axum::serve(listener, app).await;
}

/// A scrape's answer: OpenMetrics if the scraper asks for it, else the classic text.
pub fn answer(headers: &axum::http::HeaderMap, families: &[prometheus::proto::MetricFamily]) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (ty, body) = match super::openmetrics::asked(accept) {
        true => (super::openmetrics::CONTENT_TYPE, super::openmetrics::encode(families)),
        false => (prom::CONTENT_TYPE, prom::encode(families)),
    };
    ([(header::CONTENT_TYPE, HeaderValue::from_static(ty))], body)
}

async fn push(client: &reqwest::Client, url: &str, sink: &Sink, host: &Host, pushes: &Mutex<Pushes>, final_push: bool) {
    let body = otlp::request(&sink.snapshot(), host).encode_to_vec();
    let mut req = client.post(url).header(header::CONTENT_TYPE, "application/x-protobuf").body(body);
    if final_push {
        req = req.timeout(LAST_PUSH);
    }
    let result = match req.send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("the collector answered {}", r.status())),
        Err(e) => Err(error_chain(&e)),
    };
    let mut p = pushes.lock().unwrap_or_else(|e| e.into_inner());
    match result {
        Ok(()) => p.ok += 1,
        Err(e) => {
            if p.failed == 0 {
                eprintln!("wasmtap: otlp: push to {url} failed: {e} (retried at each interval)");
            }
            p.failed += 1;
            p.last_error = Some(e);
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
