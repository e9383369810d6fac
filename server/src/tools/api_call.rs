//! `api_call` tools, run by the server: one HTTP request built from the tool's
//! definition, where the outbound policy allows.
//!
//! - **Where:** public hosts; loopback, link-local, private and unspecified
//!   ones only when listed in `[tools] allowed_hosts` (the policy of every tool
//!   the server runs: [`crate::tools::outbound`]).
//! - **What:** the tool's method, URL and headers (never `Host`, `Connection`,
//!   `Transfer-Encoding` or another header the client sets itself: see
//!   [`RESERVED_API_CALL_HEADERS`](crate::api::types::RESERVED_API_CALL_HEADERS));
//!   the arguments are the JSON
//!   body of POST, PUT and PATCH, and the query string of GET, DELETE, HEAD and
//!   OPTIONS (appended to the URL's own). Nothing else is sent: no credentials
//!   of the service, no cookies.
//! - **How long:** the tool's `timeout_s`, at most `[executions] api_call_timeout_s`.
//! - **Answer:** `{"status", "headers", "json"}` when the answer says it is JSON
//!   and parses, `{"status", "headers", "text"}` otherwise; any status, 4xx and
//!   5xx included (the task decides). At most [`MAX_ANSWER_BYTES`].
//! - **Redirects are not followed** (they could lead where the policy refuses):
//!   a 3xx is the answer. Requests go through the policy's own client.

use std::time::Duration;

use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::api::types::{ApiCallDef, HttpMethod, api_call_header_refusal};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::tools::outbound::Outbound;

/// Largest answer an `api_call` may bring back.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Where `api_call` tools may go, and for how long.
#[derive(Clone, Debug)]
pub struct ApiCallPolicy {
    /// Where requests may go, and the client that keeps to it.
    pub outbound: Outbound,
    /// The longest any call may take.
    pub max_timeout: Duration,
}

impl ApiCallPolicy {
    pub fn from_config(tools: &ToolsConfig, executions: &ExecutionsConfig) -> Result<Self, String> {
        Ok(ApiCallPolicy {
            outbound: Outbound::from_config(tools)?,
            max_timeout: Duration::from_secs(executions.api_call_timeout_s),
        })
    }
}

/// Runs the tool's HTTP request with `arguments` (an object, or null for none).
pub async fn run_api_call(
    def: &ApiCallDef,
    arguments: &Value,
    policy: &ApiCallPolicy,
) -> Result<Value, String> {
    let mut url =
        Url::parse(&def.url).map_err(|e| format!("api_call URL {:?} is not a valid URL: {e}", def.url))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("api_call URL {:?}: only http and https URLs can be called", def.url));
    }
    policy.outbound.check_url(&url).map_err(|why| format!("api_call to {why}"))?;
    let arguments = match arguments {
        Value::Null => Map::new(),
        Value::Object(map) => map.clone(),
        other => return Err(format!("api_call arguments must be an object, not {other}")),
    };
    let method = match def.method {
        HttpMethod::Get => reqwest::Method::GET,
        HttpMethod::Post => reqwest::Method::POST,
        HttpMethod::Put => reqwest::Method::PUT,
        HttpMethod::Patch => reqwest::Method::PATCH,
        HttpMethod::Delete => reqwest::Method::DELETE,
        HttpMethod::Head => reqwest::Method::HEAD,
        HttpMethod::Options => reqwest::Method::OPTIONS,
    };
    let with_body = matches!(def.method, HttpMethod::Post | HttpMethod::Put | HttpMethod::Patch);
    if !with_body && !arguments.is_empty() {
        let mut query = url.query_pairs_mut();
        for (key, value) in &arguments {
            match value {
                Value::Null => {}
                Value::String(s) => {
                    query.append_pair(key, s);
                }
                Value::Array(items) => {
                    for item in items {
                        query.append_pair(key, &query_text(item));
                    }
                }
                other => {
                    query.append_pair(key, &query_text(other));
                }
            }
        }
    }
    let timeout = match def.timeout_s {
        Some(s) if s > 0 => policy.max_timeout.min(Duration::from_secs(s as u64)),
        _ => policy.max_timeout,
    };
    let mut request =
        policy.outbound.client().request(method, url.clone()).headers(headers(def)?).timeout(timeout);
    if with_body {
        request = request.json(&Value::Object(arguments));
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let call = async {
        let response = request.send().await.map_err(|e| describe(&host, timeout, &e))?;
        let status = response.status().as_u16();
        let answer_headers = header_object(response.headers());
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
        let body = read_capped(response, &host, timeout).await?;
        let mut answer = Map::new();
        answer.insert("status".into(), Value::from(status));
        answer.insert("headers".into(), Value::Object(answer_headers));
        match is_json.then(|| serde_json::from_slice::<Value>(&body).ok()).flatten() {
            Some(json) => answer.insert("json".into(), json),
            None => answer.insert("text".into(), Value::String(String::from_utf8_lossy(&body).into_owned())),
        };
        Ok(Value::Object(answer))
    };
    // reqwest's timeout covers the body too; this one also bounds anything it might not.
    tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| Err(too_slow(&host, timeout)))
}

/// A query string value: strings as they are, other JSON as its text.
fn query_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The tool's headers. Tools are checked when they are written; a stored one
/// that sets a reserved header (a tool stored before that header was
/// reserved) is refused here too.
fn headers(def: &ApiCallDef) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in def.headers.iter().flatten() {
        if let Some(why) = api_call_header_refusal(name, value) {
            return Err(why);
        }
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("api_call header name {name:?} is not a valid HTTP header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("api_call header {name:?} has a value that is not valid in HTTP"))?;
        map.append(header, value);
    }
    Ok(map)
}

/// The answer's headers as an object; repeated ones joined with `, `.
fn header_object(headers: &HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match out.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                out.insert(name.as_str().to_string(), Value::String(value));
            }
        }
    }
    out
}

async fn read_capped(
    mut response: reqwest::Response,
    host: &str,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let too_big = || {
        format!(
            "api_call to {host}: the answer is larger than {MAX_ANSWER_BYTES} bytes (1 MiB); it was dropped. \
             Ask the API for less (a page, a filter)"
        )
    };
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(host, timeout, &e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn too_slow(host: &str, timeout: Duration) -> String {
    format!(
        "api_call to {host} took longer than {} s (the tool's timeout_s, at most executions.api_call_timeout_s)",
        timeout.as_secs_f64()
    )
}

fn describe(host: &str, timeout: Duration, e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return too_slow(host, timeout);
    }
    let mut message = format!("api_call to {host} failed: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

#[cfg(test)]
pub(crate) mod tests;
