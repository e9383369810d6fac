use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{ApiCallPolicy, MAX_ANSWER_BYTES, run_api_call};
use crate::api::types::{ApiCallDef, HttpMethod};
use crate::tools::outbound::Outbound;

/// A local HTTP server: `/echo` answers what it got as JSON, `/text` plain
/// text, `/redirect` a 302 elsewhere, `/big` more than the cap, `/slow` late.
pub(crate) async fn target() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let service = service_fn(handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, server)
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let answer = |status: u16, content_type: &str, body: Vec<u8>| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .header("x-seen", "1")
            .header("x-seen", "2")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    Ok(match parts.uri.path() {
        "/echo" => {
            let headers: BTreeMap<String, String> = parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
                .collect();
            let echo = json!({
                "method": parts.method.as_str(),
                "query": parts.uri.query(),
                "headers": headers,
                "body": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            });
            answer(200, "application/json", echo.to_string().into_bytes())
        }
        "/text" => answer(404, "text/plain", b"not here".to_vec()),
        "/redirect" => Response::builder()
            .status(302)
            .header("location", "http://example.com/")
            .body(Full::new(Bytes::new()))
            .unwrap(),
        "/big" => answer(200, "application/octet-stream", vec![b'x'; MAX_ANSWER_BYTES + 1]),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            answer(200, "text/plain", b"late".to_vec())
        }
        _ => answer(404, "text/plain", Vec::new()),
    })
}

fn def(method: HttpMethod, url: String) -> ApiCallDef {
    ApiCallDef { method, url, headers: None, timeout_s: None }
}

fn policy(hosts: &[String]) -> ApiCallPolicy {
    ApiCallPolicy { outbound: Outbound::new(hosts).unwrap(), max_timeout: Duration::from_secs(5) }
}

#[tokio::test]
async fn post_sends_the_arguments_as_json_and_the_tools_headers_only() {
    let (addr, _server) = target().await;
    let mut d = def(HttpMethod::Post, format!("http://{addr}/echo"));
    d.headers = Some([("X-Api-Key".to_string(), "k1".to_string())].into());
    let answer = run_api_call(&d, &json!({"q": "cats", "n": 2}), &policy(&[addr.to_string()])).await.unwrap();
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["headers"]["x-seen"], "1, 2");
    let echo = &answer["json"];
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["body"], json!({"q": "cats", "n": 2}));
    assert_eq!(echo["headers"]["x-api-key"], "k1");
    assert!(echo["headers"].get("authorization").is_none(), "{echo}");
    assert!(echo["headers"].get("cookie").is_none(), "{echo}");
}

#[tokio::test]
async fn a_stored_tool_setting_a_reserved_header_is_refused_before_any_request() {
    let (addr, _server) = target().await;
    for name in ["Host", "connection", "TRANSFER-ENCODING"] {
        let mut d = def(HttpMethod::Post, format!("http://{addr}/echo"));
        d.headers = Some([(name.to_string(), "evil.test".to_string())].into());
        let err = run_api_call(&d, &json!({}), &policy(&[addr.to_string()])).await.unwrap_err();
        assert!(err.contains(name) && err.contains("may not set the header"), "{err}");
    }
}

#[tokio::test]
async fn get_sends_the_arguments_as_the_query() {
    let (addr, _server) = target().await;
    let d = def(HttpMethod::Get, format!("http://{addr}/echo?fixed=1"));
    // Allowed by host name alone: any port.
    let answer = run_api_call(
        &d,
        &json!({"q": "a b", "n": 3, "tags": ["x", "y"], "none": null}),
        &policy(&["127.0.0.1".into()]),
    )
    .await
    .unwrap();
    let echo = &answer["json"];
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["query"], "fixed=1&n=3&q=a+b&tags=x&tags=y");
    assert_eq!(echo["body"], Value::Null);
}

#[tokio::test]
async fn text_answers_and_error_statuses_are_results() {
    let (addr, _server) = target().await;
    let answer = run_api_call(
        &def(HttpMethod::Get, format!("http://{addr}/text")),
        &Value::Null,
        &policy(&[addr.to_string()]),
    )
    .await
    .unwrap();
    assert_eq!(answer["status"], 404);
    assert_eq!(answer["text"], "not here");
    assert!(answer.get("json").is_none());
}

#[tokio::test]
async fn private_hosts_not_listed_are_refused_before_any_request() {
    let (addr, _server) = target().await;
    let d = def(HttpMethod::Get, format!("http://{addr}/echo"));
    for hosts in [vec![], vec!["example.com".to_string()], vec![format!("127.0.0.1:{}", addr.port() + 1)]] {
        let err = run_api_call(&d, &json!({}), &policy(&hosts)).await.unwrap_err();
        assert!(err.contains(&format!("api_call to 127.0.0.1:{} is not allowed", addr.port())), "{err}");
        assert!(err.contains("tools.allowed_hosts"), "{err}");
    }
    // A name resolving to a private address is refused when the client resolves it.
    let d = def(HttpMethod::Get, format!("http://localhost:{}/echo", addr.port()));
    let err = run_api_call(&d, &json!({}), &policy(&[])).await.unwrap_err();
    assert!(err.contains("localhost is not allowed: it resolves to"), "{err}");
    let answer = run_api_call(&d, &json!({}), &policy(&["localhost".into()])).await.unwrap();
    assert_eq!(answer["status"], 200);
    let err =
        run_api_call(&def(HttpMethod::Get, "ftp://x/".into()), &json!({}), &policy(&[])).await.unwrap_err();
    assert!(err.contains("only http and https"), "{err}");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (addr, _server) = target().await;
    let d = def(HttpMethod::Get, format!("http://{addr}/redirect"));
    let answer = run_api_call(&d, &json!({}), &policy(&[addr.to_string()])).await.unwrap();
    assert_eq!(answer["status"], 302);
    assert_eq!(answer["headers"]["location"], "http://example.com/");
}

#[tokio::test]
async fn large_answers_are_refused() {
    let (addr, _server) = target().await;
    let d = def(HttpMethod::Get, format!("http://{addr}/big"));
    let err = run_api_call(&d, &json!({}), &policy(&[addr.to_string()])).await.unwrap_err();
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
}

#[tokio::test]
async fn the_shorter_timeout_wins() {
    let (addr, _server) = target().await;
    let mut d = def(HttpMethod::Get, format!("http://{addr}/slow"));
    d.timeout_s = Some(60);
    let p = ApiCallPolicy {
        outbound: Outbound::new([addr.to_string()]).unwrap(),
        max_timeout: Duration::from_millis(300),
    };
    let started = std::time::Instant::now();
    let err = run_api_call(&d, &json!({}), &p).await.unwrap_err();
    assert!(err.contains("took longer than 0.3 s"), "{err}");
    assert!(err.contains("executions.api_call_timeout_s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn connection_failures_say_so() {
    // A port nobody listens on (bound, then closed).
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let d = def(HttpMethod::Post, format!("http://127.0.0.1:{port}/"));
    let err = run_api_call(&d, &json!({}), &policy(&["127.0.0.1".into()])).await.unwrap_err();
    assert!(err.starts_with("api_call to 127.0.0.1 failed"), "{err}");
    let err = run_api_call(&d, &json!([1]), &policy(&["127.0.0.1".into()])).await.unwrap_err();
    assert!(err.contains("must be an object"), "{err}");
}
