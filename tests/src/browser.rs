//! A real browser for the console's tests: Debian's Chromium, headless, driven
//! over WebDriver by `chromedriver` (started here on a free port, never
//! downloaded) through `fantoccini`.
//!
//! Besides driving pages, it answers the questions every console test asks of
//! every page: which URLs did the page request (from Chromium's performance
//! log, so nothing the page does is missed), what did the browser log at the
//! error level, which controls have no accessible name, and which cannot be
//! reached with the Tab key. Screenshots go to `AGENT_PLATFORM_TEST_SCREENSHOTS`
//! (default: `target/console-screenshots` in the workspace), CI's artifact.
//!
//! Chromium and chromedriver are found at `AGENT_PLATFORM_TEST_CHROMIUM` and
//! `AGENT_PLATFORM_TEST_CHROMEDRIVER`, else `/usr/bin/chromium` and
//! `/usr/bin/chromedriver` (`apt-get install chromium chromium-driver`). Under
//! `CI=true` their absence fails the test; elsewhere [`Browser::start`] returns
//! `None` and the test says it skipped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long a page has to show what a test waits for.
pub const WAIT: Duration = Duration::from_secs(30);

/// A headless Chromium session and the chromedriver serving it (killed on drop).
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// Every URL the page has requested since the start (the performance log
    /// is drained into it on each [`Browser::requested_urls`]).
    requested: std::sync::Mutex<Vec<String>>,
    _profile: tempfile::TempDir,
}

fn found(var: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

impl Browser {
    /// Starts chromedriver and a headless Chromium; `None` (after saying why)
    /// when they are not installed and this is not CI.
    pub async fn start() -> Option<Browser> {
        let (Some(chromium), Some(chromedriver)) = (
            found("AGENT_PLATFORM_TEST_CHROMIUM", "/usr/bin/chromium"),
            found("AGENT_PLATFORM_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"),
        ) else {
            let msg = "Chromium and chromedriver are not installed: `apt-get install chromium chromium-driver` \
                       (or set AGENT_PLATFORM_TEST_CHROMIUM and AGENT_PLATFORM_TEST_CHROMEDRIVER)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("skipped: {msg}");
            return None;
        };
        let port = free_port();
        // In a process group of its own, which the Chromium it starts joins:
        // dropping the browser ends them all (Chromium outlives a killed
        // chromedriver otherwise).
        let mut driver = Command::new(&chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().expect("a temp dir for the browser profile");
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900", "--no-first-run", "--no-default-browser-check",
                    // Chromium's own traffic (updates, sync, safe browsing) is not the page's.
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-default-apps", "--disable-extensions",
                    // Any host but the loopback one fails to resolve: a page that reaches out
                    // shows it as a failed request and a logged error as well as in the log.
                    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        });
        let caps = caps.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await {
                Ok(client) => break client,
                Err(e) if Instant::now() > deadline => {
                    let _ = driver.kill();
                    panic!("chromedriver at {url} gives no session within {WAIT:?}: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        Some(Browser { client, driver, requested: Default::default(), _profile: profile })
    }

    /// Opens `url` and waits for the document to finish loading.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    /// The first element matching `css`, waiting up to [`WAIT`] for it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        match self.client.wait().at_most(WAIT).for_element(Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => panic!("no `{css}` within {WAIT:?}: {e}\nthe page shows:\n{}", self.text().await),
        }
    }

    /// Waits until the page's text contains `needle`; the text then.
    pub async fn wait_for_text(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text().await;
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {needle:?} within {WAIT:?}; it shows:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        match self.client.execute("return document.body ? document.body.innerText : ''", vec![]).await {
            Ok(Value::String(s)) => s,
            other => format!("(no text: {other:?})"),
        }
    }

    /// Types `text` into the field matching `css` (after clearing it).
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.unwrap_or_else(|e| panic!("cannot clear `{css}`: {e}"));
        field.send_keys(text).await.unwrap_or_else(|e| panic!("cannot type into `{css}`: {e}"));
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap_or_else(|e| panic!("cannot click `{css}`: {e}"));
    }

    /// Every URL the page has requested so far (documents, scripts, fetches,
    /// streams), in order.
    pub async fn requested_urls(&self) -> Vec<String> {
        let entries = self.log("performance").await;
        let mut requested = self.requested.lock().unwrap();
        for entry in entries {
            let Some(message) = entry["message"].as_str() else { continue };
            let Ok(message) = serde_json::from_str::<Value>(message) else { continue };
            let message = &message["message"];
            if message["method"] == "Network.requestWillBeSent"
                && let Some(url) = message["params"]["request"]["url"].as_str()
            {
                requested.push(url.to_string());
            }
        }
        requested.clone()
    }

    /// The URLs the page requested that are not on `origin` (e.g.
    /// `http://127.0.0.1:4711`); `data:` URLs stay in the page and are allowed,
    /// and `chrome://` URLs are the browser's own pages (the new tab page it
    /// starts on loads dozens), never the network.
    pub async fn requests_elsewhere(&self, origin: &str) -> Vec<String> {
        let prefix = format!("{origin}/");
        self.requested_urls()
            .await
            .into_iter()
            .filter(|url| {
                !(url.starts_with(&prefix)
                    || url == origin
                    || url.starts_with("data:")
                    || url.starts_with("chrome://"))
            })
            .collect()
    }

    /// What the browser logged at the error level (`SEVERE`) since the last call:
    /// script errors, CSP violations, failed loads.
    pub async fn logged_errors(&self) -> Vec<String> {
        self.log("browser")
            .await
            .into_iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The visible controls (links, buttons, fields) that have no accessible
    /// name: no `aria-label`, `aria-labelledby`, `<label>` or (for buttons and
    /// links) text. Each is described by its tag and outer HTML's start.
    pub async fn unlabelled_controls(&self) -> Vec<String> {
        let found = self.client.execute(UNLABELLED, vec![]).await.expect("the label check runs");
        serde_json::from_value(found).expect("a list of strings")
    }

    /// The visible, enabled controls that pressing Tab (from the top of the
    /// page, up to twice as many presses as there are controls) never focuses.
    pub async fn unreachable_by_keyboard(&self) -> Vec<String> {
        let count = self.client.execute(MARK_CONTROLS, vec![]).await.expect("the controls are marked");
        let count = count.as_u64().expect("a count") as usize;
        let mut reached = std::collections::BTreeSet::new();
        for _ in 0..(2 * count + 2) {
            let tab = KeyActions::new("keyboard".into())
                .then(KeyAction::Down { value: Key::Tab.into() })
                .then(KeyAction::Up { value: Key::Tab.into() });
            self.client.perform_actions(tab).await.expect("Tab is pressed");
            let at = self.client.execute(FOCUSED_MARK, vec![]).await.expect("the focus is read");
            if let Some(i) = at.as_u64() {
                reached.insert(i as usize);
            }
            if reached.len() == count {
                break;
            }
        }
        let missed: Vec<usize> = (0..count).filter(|i| !reached.contains(i)).collect();
        let described = self
            .client
            .execute(DESCRIBE_MARKS, vec![json!(missed)])
            .await
            .expect("the controls are described");
        serde_json::from_value(described).expect("a list of strings")
    }

    /// Writes a PNG of the window to the screenshot directory as `name.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }

    /// What every page must be: it requested nothing outside `origin`, the
    /// browser logged no error (apart from those containing one of `expected`),
    /// every control has a label and is reached by Tab. Saves `name.png`.
    pub async fn check_page(&self, name: &str, origin: &str, expected: &[&str]) {
        self.screenshot(name).await;
        let elsewhere = self.requests_elsewhere(origin).await;
        assert!(elsewhere.is_empty(), "page {name} requested URLs outside {origin}: {elsewhere:?}");
        let errors: Vec<String> = self
            .logged_errors()
            .await
            .into_iter()
            .filter(|e| !expected.iter().any(|x| e.contains(x)))
            .collect();
        assert!(errors.is_empty(), "page {name}: the browser logged errors: {errors:#?}");
        let unlabelled = self.unlabelled_controls().await;
        assert!(unlabelled.is_empty(), "page {name}: controls without a label: {unlabelled:#?}");
        let unreachable = self.unreachable_by_keyboard().await;
        assert!(unreachable.is_empty(), "page {name}: controls Tab never reaches: {unreachable:#?}");
    }

    /// Drains one of the browser's logs (`browser` or `performance`).
    async fn log(&self, kind: &str) -> Vec<Value> {
        match self.client.issue_cmd(GetLog(kind.to_string())).await {
            Ok(Value::Array(entries)) => entries,
            other => panic!("the {kind} log cannot be read: {other:?}"),
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share its process group.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where screenshots go: `AGENT_PLATFORM_TEST_SCREENSHOTS`, else the
/// workspace's `target/console-screenshots`.
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("AGENT_PLATFORM_TEST_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace")
            .join("target/console-screenshots")
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// chromedriver's log endpoint (`POST /session/{id}/se/log`), which the W3C
/// protocol lacks and fantoccini therefore does not wrap.
#[derive(Debug)]
struct GetLog(String);

impl fantoccini::wd::WebDriverCompatibleCommand for GetLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"type": self.0}).to_string()))
    }
}

/// The visible, enabled controls of the page (`controls`), as the label and
/// keyboard checks see them.
macro_rules! controls_js {
    () => {
        r#"
const visible = (e) => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length)
    && getComputedStyle(e).visibility !== 'hidden';
const controls = [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex="-1"])')]
    .filter((e) => visible(e) && !e.disabled);
"#
    };
}

const UNLABELLED: &str = concat!(
    controls_js!(),
    r#"
const named = (e) => {
    if ((e.getAttribute('aria-label') || '').trim()) return true;
    const by = e.getAttribute('aria-labelledby');
    if (by && by.split(/\s+/).some((id) => (document.getElementById(id)?.textContent || '').trim())) return true;
    if (e.labels && [...e.labels].some((l) => l.textContent.trim())) return true;
    const tag = e.tagName.toLowerCase();
    if ((tag === 'button' || tag === 'a') && e.textContent.trim()) return true;
    if (tag === 'input' && ['submit', 'button', 'reset'].includes(e.type) && (e.value || '').trim()) return true;
    return !!(e.getAttribute('title') || '').trim();
};
return controls.filter((e) => !named(e)).map((e) => e.tagName.toLowerCase() + ': ' + e.outerHTML.slice(0, 160));
"#
);

/// Numbers the visible controls (`data-kb` attributes), moves the focus to
/// the top of the page, and answers how many there are.
const MARK_CONTROLS: &str = concat!(
    controls_js!(),
    r#"
document.querySelectorAll('[data-kb]').forEach((e) => e.removeAttribute('data-kb'));
controls.forEach((e, i) => e.setAttribute('data-kb', String(i)));
if (document.activeElement) document.activeElement.blur();
window.getSelection()?.removeAllRanges();
return controls.length;
"#
);

/// The mark of the focused control, or null.
const FOCUSED_MARK: &str = r#"
const at = document.activeElement?.getAttribute('data-kb');
return at === null || at === undefined ? null : Number(at);
"#;

/// Describes the marked controls whose numbers are given.
const DESCRIBE_MARKS: &str = r#"
return arguments[0].map((i) => {
    const e = document.querySelector('[data-kb="' + i + '"]');
    return e ? e.tagName.toLowerCase() + ': ' + e.outerHTML.slice(0, 160) : 'control ' + i + ' (gone)';
});
"#;
