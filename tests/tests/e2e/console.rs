//! The web console (`GET /console/…`), as the server serves it: the page and
//! every module it imports, with the console's headers and no API key; a
//! missing file is a 404 in the API's error shape; a server with the console
//! turned off (config or environment) answers 404; the spec does not list it.

use std::collections::BTreeSet;

use agent_platform_tests::{Process, TestServer};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Got {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

/// A GET with no API key.
async fn get(base: &str, path: &str) -> Got {
    let r = reqwest::get(format!("{base}{path}")).await.expect("the server answers");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    Got { status, headers, text: r.text().await.unwrap() }
}

fn header<'a>(got: &'a Got, name: &str) -> &'a str {
    got.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or_default()
}

/// Every answer of the console carries these, whatever its status.
fn assert_console_headers(got: &Got, path: &str) {
    assert_eq!(header(got, "content-security-policy"), CSP, "{path}");
    assert_eq!(header(got, "x-content-type-options"), "nosniff", "{path}");
    assert_eq!(header(got, "referrer-policy"), "no-referrer", "{path}");
}

/// Whether some tag has an `on…=` attribute (`onclick=`, `onload=`, …).
fn has_handler_attribute(html: &str) -> bool {
    html.match_indices(" on").any(|(i, _)| {
        let rest = &html[i + 3..];
        let name_len = rest.chars().take_while(char::is_ascii_lowercase).count();
        name_len > 0 && rest[name_len..].starts_with('=')
    })
}

/// The relative imports of an ES module (`from "./x.js"`, `import "./x.js"`),
/// resolved against its own path below `/console/`.
fn imports(module_path: &str, text: &str) -> Vec<String> {
    let dir = module_path.rsplit_once('/').map_or("", |(d, _)| d);
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if !line.starts_with("import ") && !line.starts_with("} from ") {
            continue;
        }
        let Some(spec) = line.split('"').nth(1) else { continue };
        let mut parts: Vec<&str> = if dir.is_empty() { Vec::new() } else { dir.split('/').collect() };
        for seg in spec.split('/') {
            match seg {
                "." => {}
                ".." => {
                    parts.pop();
                }
                s => parts.push(s),
            }
        }
        out.push(parts.join("/"));
    }
    out
}

#[tokio::test]
async fn the_page_and_every_module_it_imports_are_served_with_the_console_headers() {
    let s = TestServer::start().await;
    let page = get(&s.base, "/console").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_console_headers(&page, "/console");
    // No inline script or style (the CSP would block them): every script
    // has a src of this server, and no element carries a style.
    assert_eq!(page.text.matches("<script").count(), 1, "{}", page.text);
    assert!(page.text.contains(r#"<script type="module" src="/console/app.js"></script>"#), "{}", page.text);
    assert!(!page.text.contains("<style") && !page.text.contains(" style="), "{}", page.text);
    assert!(!has_handler_attribute(&page.text), "an inline event handler: {}", page.text);
    assert!(page.text.contains(r#"<link rel="stylesheet" href="/console/console.css">"#), "{}", page.text);

    // The stylesheet, the icon, and the module graph from app.js: each
    // found, each with its type and the console's headers.
    for (path, kind) in [("console.css", "text/css; charset=utf-8"), ("favicon.svg", "image/svg+xml")] {
        let got = get(&s.base, &format!("/console/{path}")).await;
        assert_eq!((got.status, header(&got, "content-type")), (200, kind), "{path}");
        assert_console_headers(&got, path);
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec!["app.js".to_string()];
    while let Some(path) = todo.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let got = get(&s.base, &format!("/console/{path}")).await;
        assert_eq!(got.status, 200, "{path} is imported, so it is served: {}", got.text);
        assert_eq!(header(&got, "content-type"), "text/javascript; charset=utf-8", "{path}");
        assert_console_headers(&got, &path);
        // Nothing is loaded from anywhere but this server. (The spec's text
        // and the vendored library's license comment may name web pages.)
        if path != "api.gen.js" && !path.starts_with("vendor/") {
            assert!(
                !got.text.contains("http://") && !got.text.contains("https://"),
                "{path} names another host"
            );
        }
        todo.extend(imports(&path, &got.text));
    }
    for module in
        ["api.gen.js", "api.js", "sse.js", "ui.js", "pages/agents.js", "pages/tasks.js", "vendor/js-yaml.mjs"]
    {
        assert!(seen.contains(module), "app.js reaches {module}: {seen:?}");
    }
    // The generated module is the one in the repository (built in).
    let generated = get(&s.base, "/console/api.gen.js").await.text;
    let on_disk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../server/console/api.gen.js"))
            .unwrap();
    assert_eq!(generated, on_disk);
    assert!(
        generated.contains("  agent_create: { method: \"POST\", path: \"/api/agents\","),
        "its operations"
    );
    s.stop().await;
}

#[tokio::test]
async fn routes_of_the_page_answer_the_page_and_a_missing_file_is_a_404_in_the_api_shape() {
    let s = TestServer::start().await;
    let page = get(&s.base, "/console").await.text;
    for path in ["/console/", "/console/agents", "/console/agents/0193-x/docs"] {
        let got = get(&s.base, path).await;
        assert_eq!((got.status, got.text.as_str()), (200, page.as_str()), "{path}");
    }
    for path in ["/console/nope.js", "/console/pages/nope.css", "/console/..%2FCargo.toml"] {
        let got = get(&s.base, path).await;
        assert_eq!(got.status, 404, "{path}: {}", got.text);
        assert_eq!(header(&got, "content-type"), "application/json", "{path}");
        assert_console_headers(&got, path);
        let body: serde_json::Value = serde_json::from_str(&got.text).unwrap();
        assert_eq!(body["code"], "not_found", "{body}");
        assert_eq!(body["request_id"], header(&got, "x-request-id"), "{body}");
        assert!(body["detail"].as_str().unwrap().contains("the console has no file"), "{body}");
    }
    // The console is no part of the API: the spec does not list it.
    let spec = get(&s.base, "/api/openapi.json").await;
    let spec: serde_json::Value = serde_json::from_str(&spec.text).unwrap();
    let paths: Vec<&String> = spec["paths"].as_object().unwrap().keys().collect();
    assert!(paths.iter().all(|p| !p.starts_with("/console")), "{paths:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_server_with_the_console_off_answers_404_there() {
    let s = TestServer::with_config(|c| c.server.console = false).await;
    for path in ["/console", "/console/app.js", "/console/agents"] {
        let got = get(&s.base, path).await;
        assert_eq!(got.status, 404, "{path}: {}", got.text);
        assert!(got.text.contains("the console is turned off"), "{path}: {}", got.text);
    }
    assert_eq!(get(&s.base, "/api/healthz").await.status, 200, "the API is served");
    s.stop().await;

    // The binary reads the setting from its environment too.
    let dir = tempfile::tempdir().unwrap();
    let p = Process::serve_with_env(dir.path(), &[("AGENT_PLATFORM_CONSOLE", "false")]);
    assert_eq!(get(&p.base, "/console").await.status, 404);
    p.stop();
    let p = Process::serve_with_env(dir.path(), &[("AGENT_PLATFORM_CONSOLE", "true")]);
    assert_eq!(get(&p.base, "/console").await.status, 200);
    p.stop();
}
