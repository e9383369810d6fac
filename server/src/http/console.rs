//! The web console (`GET /console/…`): static files compiled into the binary.
//!
//! The files are `server/console/` (hand-written ES modules, one stylesheet,
//! the page), `server/console/api.gen.js` (written by `cargo xtask
//! generate` from the spec) and `server/console/vendor/` (js-yaml, as
//! published, for task definitions in YAML). Each is in [`ASSETS`], embedded with
//! `include_bytes!`: the binary serves them with no file on disk, and a file
//! of that directory missing from the table fails a test. Every answer
//! carries [`CSP`] and the other headers of [`headers`]: the page runs only
//! its own scripts and styles and talks only to this server.
//!
//! `/console` and any path below it that names no file (no `.` in its last
//! segment) answer the page; a missing file is a 404 in the API's error shape.

use dropshot::{Body, ErrorStatusCode, Path, RequestContext};
use http::{HeaderValue, Response, StatusCode, header};

use super::context::Ctx;
use crate::api::ApiError;
use crate::api::types::ConsolePath;

/// The Content-Security-Policy of every console answer: nothing but this
/// server's own scripts, styles, images and API; no inline script or style,
/// no plugin, no frame around the page, no form posted anywhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                       img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its path below `/console/` and its bytes.
#[derive(Debug)]
pub struct Asset {
    pub path: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal),* $(,)?) => {
        &[$(Asset { path: $path, bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/", $path)) }),*]
    };
}

/// Every file of `server/console/`.
pub const ASSETS: &[Asset] = assets![
    "index.html",
    "console.css",
    "favicon.svg",
    "api.gen.js",
    "api.js",
    "app.js",
    "ui.js",
    "sse.js",
    "pages/agents.js",
    "pages/sessions.js",
    "pages/tasks.js",
    "pages/openai.js",
    "pages/keys.js",
    "pages/health.js",
    "vendor/js-yaml.mjs",
    "vendor/js-yaml.LICENSE.txt",
];

/// The page every route of the console loads.
const INDEX: &str = "index.html";

/// The Content-Type of a file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// The asset a request path names: the page for `/console` and for any path
/// whose last segment has no `.` (a route of the page), else the file itself.
fn lookup(segments: &[String]) -> Result<&'static Asset, String> {
    let path = segments.join("/");
    let wanted = match segments.last() {
        Some(last) if last.contains('.') => path.as_str(),
        _ => INDEX,
    };
    ASSETS.iter().find(|a| a.path == wanted).ok_or(path)
}

/// The console's headers, on every answer of it (a 404 too).
fn headers(response: &mut Response<Body>, content_type: &'static str) {
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    // The files change with the binary: the browser asks again each time
    // (cheap: they are small and served from memory).
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

pub async fn console(
    rqctx: RequestContext<Ctx>,
    path: Path<ConsolePath>,
) -> Result<Response<Body>, ApiError> {
    let found = if rqctx.context().console { lookup(&path.into_inner().path) } else { Err(String::new()) };
    Ok(match found {
        Ok(asset) => {
            let mut r = Response::new(Body::from(bytes::Bytes::from_static(asset.bytes)));
            headers(&mut r, content_type(asset.path));
            r
        }
        Err(missing) => {
            let detail = if !rqctx.context().console {
                "the console is turned off on this server ([server] console = false)".to_string()
            } else {
                format!("the console has no file {missing:?}")
            };
            let error = ApiError::new(ErrorStatusCode::NOT_FOUND, "not_found", detail, &rqctx.request_id);
            let mut r = Response::new(Body::from(error.body_json()));
            *r.status_mut() = StatusCode::NOT_FOUND;
            headers(&mut r, "application/json");
            r
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table and the directory hold the same files: a file added to
    /// `server/console/` and not to [`ASSETS`] would never be served.
    #[test]
    fn every_file_of_the_console_directory_is_embedded() {
        fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, root, out);
                } else {
                    out.push(path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
        let mut on_disk = Vec::new();
        walk(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn routes_of_the_page_answer_the_page_and_files_answer_themselves() {
        let seg = |p: &str| p.split('/').filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
        assert_eq!(lookup(&seg("")).unwrap().path, "index.html");
        assert_eq!(lookup(&seg("agents/123")).unwrap().path, "index.html");
        assert_eq!(lookup(&seg("pages/agents.js")).unwrap().path, "pages/agents.js");
        assert_eq!(lookup(&seg("nope.js")).unwrap_err(), "nope.js");
        assert_eq!(lookup(&seg("../Cargo.toml")).unwrap_err(), "../Cargo.toml");
        assert_eq!(content_type("a/b.js"), "text/javascript; charset=utf-8");
    }
}
