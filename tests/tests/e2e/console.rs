//! The web console (`GET /console/…`): as the server serves it (the page and
//! every module it imports, with the console's headers and no API key; a
//! missing file is a 404 in the API's error shape; a server with the console
//! turned off, by config or environment, answers 404; the spec does not list
//! it), and walked in a real browser against a live server on the fake model
//! provider: each page does its job, requests nothing but this server, logs
//! no error, and has every control labelled and reached by Tab.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agent_platform::models::ModelsConfig;
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::browser::{Browser, WAIT};
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

    // The binary reads the setting from its environment too, and its
    // start-up output names the console's address only when it is on.
    let dir = tempfile::tempdir().unwrap();
    let p = Process::serve_with_env(dir.path(), &[("AGENT_PLATFORM_CONSOLE", "false")]);
    assert_eq!(get(&p.base, "/console").await.status, 404);
    let (_, said) = p.stop_and_read();
    assert!(said.contains("  health:  curl http://127.0.0.1:"), "{said}");
    assert!(!said.contains("console:"), "{said}");
    let p = Process::serve_with_env(dir.path(), &[("AGENT_PLATFORM_CONSOLE", "true")]);
    assert_eq!(get(&p.base, "/console").await.status, 200);
    let line = format!("  console: {}/console\n", p.base);
    let (_, said) = p.stop_and_read();
    assert!(said.contains(&line), "no {line:?} in:\n{said}");
}

/// Waits until `script` (a function body) answers something truthy; answers it.
async fn until(b: &Browser, what: &str, script: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = b.client.execute(script, vec![]).await.expect("the script runs");
        if !(got.is_null() || got == false || got == "") {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "never {what} within {WAIT:?}; the page shows:\n{}",
            b.text().await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Goes to a page of the console by its navigation link (as a person would).
async fn nav(b: &Browser, hash: &str, shows: &str) {
    b.click(&format!("nav a[href='{hash}']")).await;
    b.wait_for_text(shows).await;
}

/// Sign in, then each page does its job: an agent made, a document added
/// and searched (scores shown), a chat whose answer streams in piece by
/// piece, a task (YAML) whose execution's transitions arrive live and which
/// is resumed with input, a /v1 response and a conversation opened, a key
/// created and revoked, the health page. Every page: nothing requested but
/// the server, no error logged, every control labelled and reached by Tab; a
/// screenshot of each.
#[tokio::test]
async fn each_page_does_its_job_in_a_real_browser() {
    let Some(b) = Browser::start().await else { return };
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(ModelsConfig {
        embedding_model: Some("embedder".into()),
        ..agent_platform_tests::fake_models(&fake, 30.0)
    })
    .await;
    let origin = s.base.clone();

    // Sign-in: a wrong key is refused with the API's message and request id;
    // the right one opens the agents.
    b.open(&format!("{origin}/console")).await;
    b.fill("input[name=key]", "ap_not_a_key_at_all").await;
    b.click("form[aria-label='Sign in'] button[type=submit]").await;
    let refused = b.wait_for_text("Error 401").await;
    assert!(refused.contains("request id"), "{refused}");
    b.check_page("sign-in", &origin, &["401"]).await;
    b.fill("input[name=key]", &s.key).await;
    b.click("form[aria-label='Sign in'] button[type=submit]").await;
    b.wait_for_text("New agent").await;
    let stored: String = serde_json::from_value(
        b.client
            .execute("return sessionStorage.getItem('agent-platform.console.key')", vec![])
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored, s.key, "the key is kept for the tab's session");
    let local = b.client.execute("return localStorage.length", vec![]).await.unwrap();
    assert_eq!(local, 0, "nothing in localStorage");

    // Agents: create one; it opens.
    b.fill("input[name=name]", "Helper").await;
    b.fill("textarea[name=instructions]", "Be brief.\nCite documents.").await;
    b.click("form[aria-label='New agent'] button[type=submit]").await;
    b.wait_for_text("Search tester").await;
    let agents = s.raw("GET", "/api/agents", None).await;
    assert_eq!(agents.body["items"][0]["name"], "Helper", "{}", agents.body);
    assert_eq!(agents.body["items"][0]["instructions"], serde_json::json!(["Be brief.", "Cite documents."]));
    let agent = agents.body["items"][0]["id"].as_str().unwrap().to_string();

    // Its tools: add one.
    b.fill("input[name=tool-name]", "weather").await;
    b.fill("input[name=tool-description]", "The weather in a city.").await;
    b.fill(
        "textarea[name=tool-definition]",
        r#"{"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}"#,
    )
    .await;
    b.click("form[aria-label='New tool'] button[type=submit]").await;
    b.wait_for_text("The weather in a city.").await;
    let tools = s.raw("GET", &format!("/api/agents/{agent}/tools"), None).await;
    assert_eq!(tools.body["items"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
    b.click("button[aria-label='Delete tool weather']").await;
    until(
        &b,
        "the tool gone",
        "return !document.querySelector(\"button[aria-label='Delete tool weather']\")",
    )
    .await;
    let tools = s.raw("GET", &format!("/api/agents/{agent}/tools"), None).await;
    assert_eq!(tools.body["items"], serde_json::json!([]), "deleted");

    // Its settings: the model and default settings changed and saved.
    b.fill("form[aria-label='Agent settings'] input[name=model]", "fake-model").await;
    b.fill("textarea[name=default_settings]", r#"{"temperature": 0.25}"#).await;
    b.click("form[aria-label='Agent settings'] button[type=submit]").await;
    b.wait_for_text("Agent Helper saved.").await;
    let saved = s.raw("GET", &format!("/api/agents/{agent}"), None).await;
    assert_eq!(
        (&saved.body["model"], &saved.body["default_settings"]["temperature"]),
        (&serde_json::json!("fake-model"), &serde_json::json!(0.25))
    );

    // A document, then a search of it: text, then hybrid (the fake embeds).
    b.fill("input[name=doc-title]", "Pets").await;
    b.fill("textarea[name=doc-content]", "Cats purr when they are content.\n\nDogs bark at strangers.").await;
    b.click("form[aria-label='New document'] button[type=submit]").await;
    until(
        &b,
        "the document listed",
        "return [...document.querySelectorAll('td')].some((td) => td.textContent === 'Pets')",
    )
    .await;
    b.fill("input[name=search-text]", "purr").await;
    b.click("form[aria-label='Search tester'] button[type=submit]").await;
    b.wait_for_text("(text)").await;
    let scores = until(&b, "scores shown", "const s = [...document.querySelectorAll('.score')].map((e) => e.textContent); return s.length ? s : null").await;
    let top: f64 = scores[0].as_str().unwrap().parse().unwrap();
    assert!(top > 0.0, "{scores}");
    assert!(b.text().await.contains("Cats purr when they are content."));
    b.find("select[name=search-mode]").await.select_by_value("hybrid").await.unwrap();
    b.click("form[aria-label='Search tester'] button[type=submit]").await;
    b.wait_for_text("(hybrid)").await;
    b.check_page("agent", &origin, &[]).await;
    nav(&b, "#/agents", "All agents").await;
    b.check_page("agents", &origin, &[]).await;

    // Sessions: a user, a session of the agent and the user, a chat whose
    // answer streams in: part of it shows while the rest is on its way.
    nav(&b, "#/sessions", "New session").await;
    b.fill("input[name=user-name]", "Ada").await;
    b.click("form[aria-label='New user'] button[type=submit]").await;
    until(
        &b,
        "the user in the select",
        "return document.querySelectorAll('select[name=users] option:checked').length === 1",
    )
    .await;
    b.click("form[aria-label='New session'] button[type=submit]").await;
    b.find("form[aria-label=Chat]").await;
    let pieces = ["Streamed ", "answers ", "arrive ", "piece ", "by ", "piece."];
    fake.push(Behaviour::StreamWithDelays {
        chunks: pieces.iter().map(|p| p.to_string()).collect(),
        delay: Duration::from_millis(300),
    });
    b.fill("textarea[name=chat-message]", "Tell me about streams").await;
    b.click("form[aria-label=Chat] button[type=submit]").await;
    let partial = until(
        &b,
        "part of the answer shown",
        "const t = document.querySelector('.chat-out')?.innerText || ''; \
         return t.includes('Streamed') && !t.includes('piece.') ? t : null",
    )
    .await;
    assert!(!partial.as_str().unwrap().contains("Done"), "{partial}");
    until(
        &b,
        "the whole answer",
        "return (document.querySelector('.chat-out')?.innerText || '').includes('Done (stop)')",
    )
    .await;
    let text = b.wait_for_text("Streamed answers arrive piece by piece.").await;
    assert!(text.contains("Tell me about streams"), "the history shows the question: {text}");
    b.check_page("session", &origin, &[]).await;
    nav(&b, "#/sessions", "All sessions").await;
    b.check_page("sessions", &origin, &[]).await;

    // Tasks: a task that is not valid shows the API's message and request
    // id; the example (YAML, a wait for input) is created; an execution
    // started from the form its input_schema makes; its transitions arrive
    // live; resumed with input, it finishes.
    nav(&b, "#/tasks", "New task for this agent").await;
    let example = b.find("textarea[name=task-definition]").await.prop("value").await.unwrap().unwrap();
    b.fill("textarea[name=task-definition]", "name: broken\nmain: []\n").await;
    b.click("form[aria-label='New task'] button[type=submit]").await;
    let shown = b.wait_for_text("Error 422").await;
    assert!(shown.contains("request id") && shown.contains("main"), "{shown}");
    b.check_page("tasks", &origin, &["422"]).await;
    b.fill("textarea[name=task-definition]", &example).await;
    b.click("form[aria-label='New task'] button[type=submit]").await;
    b.fill("input[name=input-name]", "Ada").await;
    b.check_page("task", &origin, &[]).await;
    b.click("form[aria-label='Start an execution'] button[type=submit]").await;
    until(&b, "the wait transition", "return document.querySelector('.timeline li.t-wait')").await;
    b.wait_for_text("How are you, Ada?").await;
    b.wait_for_text("awaiting_input").await;
    b.check_page("execution-waiting", &origin, &[]).await;
    b.fill("textarea[name=resume-input]", r#"{"mood": "fine"}"#).await;
    b.click("form[aria-label='Resume the execution'] button[type=submit]").await;
    until(&b, "the finish transition", "return document.querySelector('.timeline li.t-finish')").await;
    let done = b.wait_for_text("ended.").await;
    assert!(done.contains("Glad you are fine") && done.contains("succeeded"), "{done}");
    let kinds = b
        .client
        .execute("return [...document.querySelectorAll('.timeline li')].map((li) => li.className)", vec![])
        .await
        .unwrap();
    assert_eq!(kinds, serde_json::json!(["t-init", "t-step", "t-wait", "t-resume", "t-step", "t-finish"]));
    b.check_page("execution", &origin, &[]).await;
    // Another execution, cancelled while it waits.
    b.click("a[href^='#/tasks/']").await;
    b.fill("input[name=input-name]", "Bob").await;
    b.click("form[aria-label='Start an execution'] button[type=submit]").await;
    b.wait_for_text("How are you, Bob?").await;
    b.fill("input[name=cancel-reason]", "changed my mind").await;
    b.click("form[aria-label='Cancel the execution'] button[type=submit]").await;
    until(&b, "the cancelled transition", "return document.querySelector('.timeline li.t-cancelled')").await;
    let cancelled = b.wait_for_text("ended.").await;
    assert!(cancelled.contains("changed my mind"), "{cancelled}");

    // /v1: a response made on the page opens with its items; a conversation opens.
    nav(&b, "#/openai", "New response").await;
    b.fill("textarea[name=response-input]", "What is up?").await;
    b.click("form[aria-label='New response'] button[type=submit]").await;
    b.wait_for_text("Input items").await;
    until(&b, "the response's items", "return document.querySelectorAll('.message').length >= 2").await;
    let shown = b.text().await;
    assert!(
        shown.contains("completed") && shown.matches("What is up?").count() >= 2,
        "input and echoed output: {shown}"
    );
    b.check_page("response", &origin, &[]).await;
    nav(&b, "#/openai", "Conversations").await;
    b.check_page("openai", &origin, &[]).await;
    b.click("a[href^='#/openai/conversations/']").await;
    b.wait_for_text("Items").await;
    until(&b, "the conversation's items", "return document.querySelectorAll('.message').length >= 2").await;
    b.check_page("conversation", &origin, &[]).await;

    // Keys: one created is shown once and works; revoked, it is refused.
    nav(&b, "#/keys", "New key").await;
    b.click("main section button").await;
    let key = until(&b, "the new key", "return document.querySelector('.new-key')?.textContent").await;
    let key = key.as_str().unwrap().to_string();
    assert!(key.starts_with("ap_"), "{key}");
    let auth = format!("Bearer {key}");
    assert_eq!(s.raw_with("GET", "/api/agents", None, Some(&auth)).await.status, 200, "the new key works");
    until(&b, "two keys listed", "return document.querySelectorAll('tbody tr').length === 2").await;
    b.check_page("keys", &origin, &[]).await;
    b.click(&format!("button[aria-label='Revoke key {}']", &key[..11])).await;
    until(&b, "one key listed", "return document.querySelectorAll('tbody tr').length === 1").await;
    assert_eq!(
        s.raw_with("GET", "/api/agents", None, Some(&auth)).await.status,
        401,
        "the revoked key is refused"
    );

    // Health: the store, search and the fake provider.
    nav(&b, "#/health", "Providers and their models").await;
    let health = b.wait_for_text("ready").await;
    assert!(health.contains("1 agent(s) answer as models"), "{health}");
    b.check_page("health", &origin, &[]).await;

    // Signing out forgets the key.
    b.click("#sign-out").await;
    b.find("input[name=key]").await;
    let gone = b
        .client
        .execute("return sessionStorage.getItem('agent-platform.console.key')", vec![])
        .await
        .unwrap();
    assert_eq!(gone, serde_json::Value::Null, "the key is forgotten");
    s.stop().await;
}

/// Opens the console and signs in with `key`.
async fn sign_in(b: &Browser, origin: &str, key: &str) {
    b.open(&format!("{origin}/console")).await;
    b.fill("input[name=key]", key).await;
    b.click("form[aria-label='Sign in'] button[type=submit]").await;
    b.wait_for_text("New agent").await;
}

/// The chat playground with an agent whose MCP server's tools need approval:
/// the streamed turn stops at the call, the page asks, the person approves,
/// the call runs in the server and the model goes on; the history shows the
/// call and its output inline.
#[tokio::test]
async fn a_call_that_needs_approval_is_approved_on_the_chat_playground() {
    let Some(b) = Browser::start().await else { return };
    let fake = FakeUpstream::start().await;
    let mcp = agent_platform_tests::mcp::FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = agent_platform_tests::fake_models(&fake, 30.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let agent = s.create_agent("Calculator").await;
    let tool = serde_json::json!({"name": "fake", "type": "mcp", "mcp": {"server_url": mcp.url, "allowed_tools": ["add"], "require_approval": "always"}});
    let made = s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let session = s.create_session(&[agent.id], &[]).await;
    let origin = s.base.clone();

    sign_in(&b, &origin, &s.key).await;
    b.open(&format!("{origin}/console#/sessions/{}", session.id)).await;
    b.find("form[aria-label=Chat]").await;
    fake.push(Behaviour::ToolCalls(vec![("add".into(), r#"{"a": 2, "b": 3}"#.into())]));
    b.fill("textarea[name=chat-message]", "What is 2 + 3?").await;
    b.click("form[aria-label=Chat] button[type=submit]").await;
    let asked = b.wait_for_text("Waiting for your approval").await;
    assert!(asked.contains("Run add of fake?") && asked.contains("approval_required"), "{asked}");
    b.check_page("chat-approval", &origin, &[]).await;
    assert_eq!(mcp.calls_of("add").await, 0, "not run before the approval");

    b.click(".approval ~ button").await;
    let text = b.wait_for_text("Done (stop)").await;
    assert!(text.contains("Ran add"), "the server's run of the call: {text}");
    assert_eq!(mcp.calls_of("add").await, 1, "run once, on approval");
    // The history: the assistant's call of add with its arguments, and its output.
    until(&b, "the call's output in the history", "return [...document.querySelectorAll('.messages .message.tool pre')].some((p) => p.textContent === '5')").await;
    let history =
        b.client.execute("return document.querySelector('.messages').innerText", vec![]).await.unwrap();
    let history = history.as_str().unwrap();
    assert!(history.contains("Calls add") && history.contains("\"a\": 2"), "{history}");
    assert!(history.contains("Output of call"), "{history}");
    b.check_page("session-tool-calls", &origin, &[]).await;
    s.stop().await;
}
