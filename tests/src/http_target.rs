//! A local HTTP server for `api_call` tools to call: [`HttpTarget`] listens on
//! `127.0.0.1:0`, records every request, and answers each with JSON saying
//! what it received. A path starting with `/slow` answers after
//! [`HttpTarget::SLOW`] (to outlast a tool's timeout); `/status/<code>`
//! answers that status.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// One request the target received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    /// E.g. `/weather`.
    pub path: String,
    /// The query string, without `?` (empty if none).
    pub query: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::Null` if empty or not JSON).
    pub body: Value,
}

impl Received {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// The running server; dropping it stops it.
pub struct HttpTarget {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for HttpTarget {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl HttpTarget {
    /// How long a `/slow` path waits before it answers.
    pub const SLOW: Duration = Duration::from_secs(30);

    pub async fn start() -> HttpTarget {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let server = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let log = log.clone();
                        connections.spawn(async move {
                            let service = service_fn(move |req| answer(log.clone(), req));
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        HttpTarget { addr, received, server }
    }

    /// `127.0.0.1`: the host to allow in `[tools] allowed_hosts`.
    pub fn host(&self) -> String {
        self.addr.ip().to_string()
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn answer(
    log: Arc<Mutex<Vec<Received>>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    log.lock().unwrap_or_else(|e| e.into_inner()).push(received.clone());
    if received.path.starts_with("/slow") {
        tokio::time::sleep(HttpTarget::SLOW).await;
    }
    let status = received.path.strip_prefix("/status/").and_then(|c| c.parse().ok()).unwrap_or(200);
    let text = json!({
        "method": received.method, "path": received.path, "query": received.query, "body": received.body,
    })
    .to_string();
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    response
        .headers_mut()
        .insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    Ok(response)
}
