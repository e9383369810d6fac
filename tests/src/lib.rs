//! The end-to-end test harness: a real server on 127.0.0.1:0 over a real sled
//! store in a temporary directory — or, with `AGENT_PLATFORM_TEST_BACKEND=postgres`,
//! a database of its own (see [`backend`]) — driven through the generated
//! client (and a raw HTTP client for requests the typed client refuses to build).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_platform::app::App;
use agent_platform::config::Config;
use agent_platform::models::ModelsConfig;
use agent_platform::server::Running;
use agent_platform::store::{Kind, Store};
pub use agent_platform_client::Client;
pub use agent_platform_client::types;
use serde_json::Value;
use uuid::Uuid;

pub mod backend;
pub mod browser;
pub mod executions;
pub mod http_target;
pub mod mcp;
pub mod record;
pub mod sse;

pub use backend::{postgres_only, sled_only};

pub struct TestServer {
    running: Option<Running>,
    pub dir: tempfile::TempDir,
    /// The server root, e.g. `http://127.0.0.1:4711`.
    pub base: String,
    /// A key of the tenant `default`.
    pub key: String,
    /// The generated client, authenticated with `key`.
    pub client: Client,
    /// The configuration it was started with (`bind` and `data_dir` aside).
    config: Config,
    /// The environment variables the server reads (and only these).
    env: Vec<(String, String)>,
    /// The HTTP client of [`TestServer::raw_with`]: one for the server's life,
    /// as building a `reqwest::Client` costs tens of milliseconds.
    http: reqwest::Client,
}

/// A raw answer: status, headers and the body parsed as JSON (Null if empty).
pub struct Raw {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl TestServer {
    /// A server with no model provider (the environment's `OPENAI_*` are ignored).
    pub async fn start() -> Self {
        Self::with_models(ModelsConfig::default()).await
    }

    /// A server whose model providers are `models` (the environment is not read).
    pub async fn with_models(models: ModelsConfig) -> Self {
        Self::with_config(|cfg| cfg.models = models).await
    }

    /// A server with the default configuration changed by `tweak` (no model
    /// provider unless it adds one; the environment is not read).
    pub async fn with_config(tweak: impl FnOnce(&mut Config)) -> Self {
        Self::with_config_env(tweak, &[]).await
    }

    /// [`TestServer::with_config`], the server reading these environment
    /// variables (e.g. the one `secrets.key_env` names), here and after a restart.
    pub async fn with_config_env(tweak: impl FnOnce(&mut Config), env: &[(&str, &str)]) -> Self {
        let mut config = Config::default();
        config.log.level = "warn".into();
        tweak(&mut config);
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let dir = tempfile::tempdir().expect("a temp dir");
        let running = Self::serve(dir.path(), &config, &env).await;
        let key = running.first_key.clone().expect("a fresh store prints a first key");
        let base = format!("http://{}", running.local_addr());
        let client = Client::with_key(&base, &key).unwrap();
        TestServer {
            running: Some(running),
            dir,
            base,
            key,
            client,
            config,
            env,
            http: reqwest::Client::new(),
        }
    }

    async fn serve(dir: &Path, config: &Config, env: &[(String, String)]) -> Running {
        let mut cfg = config.clone();
        cfg.server.bind = "127.0.0.1:0".parse().unwrap();
        cfg.server.data_dir = dir.join("data");
        if let Some((url, _)) = backend::database_for(&cfg.server.data_dir) {
            cfg.store.backend = agent_platform::config::StoreBackend::Postgres;
            cfg.store.url = Some(url);
        }
        let env = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        agent_platform::server::start_with_env(&cfg, env).await.expect("the server starts")
    }

    /// The server's address, e.g. `127.0.0.1:4711` (for raw TCP).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.running.as_ref().expect("running").local_addr()
    }

    /// Shuts the server down and starts a new one on the same data dir (a new
    /// port: `base` and `client` are replaced; keys stay valid).
    pub async fn restart(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
        let running = Self::serve(self.dir.path(), &self.config, &self.env).await;
        assert!(running.first_key.is_none(), "a store with keys creates no first key");
        self.base = format!("http://{}", running.local_addr());
        self.client = Client::with_key(&self.base, &self.key).unwrap();
        self.running = Some(running);
    }

    /// [`TestServer::restart`] with these environment variables in place of
    /// those it read before (e.g. another secrets key).
    pub async fn restart_with_env(&mut self, env: &[(&str, &str)]) {
        self.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.restart().await;
    }

    /// The application the server runs (same store, same search index).
    pub fn app(&self) -> &App {
        &self.running.as_ref().expect("running").app
    }

    /// A new key for `tenant` (created on first use).
    pub async fn key_for(&self, tenant: &str) -> String {
        self.app().key_create(tenant).await.expect("a key").0
    }

    /// A generated client for another tenant.
    pub async fn other_tenant(&self) -> Client {
        let key = self.key_for("other-tenant").await;
        Client::with_key(&self.base, &key).unwrap()
    }

    /// Sends a raw request with this server's key (or `key`, or none).
    pub async fn raw(&self, method: &str, path: &str, body: Option<&str>) -> Raw {
        self.raw_with(method, path, body, Some(&format!("Bearer {}", self.key))).await
    }

    pub async fn raw_with(&self, method: &str, path: &str, body: Option<&str>, auth: Option<&str>) -> Raw {
        let mut req = self.http.request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.expect("the server answers");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        record::answer(method, path, status, &body);
        Raw { status, headers, body }
    }

    /// Creates an agent named `name`.
    pub async fn create_agent(&self, name: &str) -> types::Agent {
        self.client
            .agent_create()
            .body(types::CreateAgentRequest::builder().name(name))
            .send()
            .await
            .unwrap()
            .into_inner()
    }

    /// Creates a user named `name`.
    pub async fn create_user(&self, name: &str) -> types::User {
        let body = types::CreateUserRequest::builder().name(Some(name.parse().unwrap()));
        self.client.user_create().body(body).send().await.unwrap().into_inner()
    }

    /// Creates a session of these agents and users.
    pub async fn create_session(&self, agents: &[Uuid], users: &[Uuid]) -> types::Session {
        let body = types::CreateSessionRequest::builder().agents(agents.to_vec()).users(users.to_vec());
        self.client.session_create().body(body).send().await.unwrap().into_inner()
    }

    /// Appends a user message to a session.
    pub async fn say(&self, session: Uuid, content: &str) -> types::Message {
        let body = types::CreateMessageRequest::builder().role(types::Role::User).content(content);
        self.client.message_create().id(session).body(body).send().await.unwrap().into_inner()
    }

    /// Every record whose owner or participant is gone (see [`orphans_in`]).
    pub async fn orphans(&self) -> Vec<String> {
        orphans_in(self.running.as_ref().expect("running").store.store().as_ref()).await
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        backend::forget_database(&self.dir.path().join("data"));
    }
}

impl Raw {
    /// The `loc`s of a 422's details, as JSON arrays.
    pub fn locs(&self) -> Vec<Value> {
        self.body["detail"]
            .as_array()
            .map(|d| d.iter().map(|i| i["loc"].clone()).collect())
            .unwrap_or_default()
    }

    /// Asserts a 422 with exactly one violation at `loc` of `kind`.
    #[track_caller]
    pub fn assert_422(&self, loc: Value, kind: &str) {
        assert_eq!(self.status, 422, "expected 422, got {} {}", self.status, self.body);
        let detail = self.body["detail"].as_array().expect("detail is a list");
        assert!(
            detail.iter().any(|i| i["loc"] == loc && i["type"] == kind),
            "expected a violation at {loc} of type {kind}, got {}",
            self.body
        );
    }
}

/// Every record, in any tenant, whose owner or participant is gone: a
/// message or stored response without its session, a tool, task or doc
/// without its agent (or user), a memory block without its agent or user, an
/// edit without its block, a learning policy without its agent, a session naming a missing participant or
/// left with users but without agents.
pub async fn orphans_in(store: &dyn Store) -> Vec<String> {
    let exists =
        async |tenant: Uuid, kind: Kind, id: Uuid| store.get(tenant, kind, id).await.unwrap().is_some();
    let mut found = Vec::new();
    for (tenant, s) in store.scan_kind(Kind::Session).await.unwrap() {
        let ids = |field: &str| -> Vec<Uuid> { serde_json::from_value(s.data[field].clone()).unwrap() };
        let (agents, users) = (ids("agents"), ids("users"));
        // A conversation made through /v1 has no participant at all; a session
        // with users but no agent lost its last one.
        if agents.is_empty() && !users.is_empty() {
            found.push(format!("session {} has no agent", s.id));
        }
        for (kind, id) in
            agents.iter().map(|a| (Kind::Agent, *a)).chain(users.iter().map(|u| (Kind::User, *u)))
        {
            if !exists(tenant, kind, id).await {
                found.push(format!("session {} names the missing {} {id}", s.id, kind.name()));
            }
        }
    }
    for (kind, parents) in [
        (Kind::Message, &[Kind::Session][..]),
        (Kind::Response, &[Kind::Session][..]),
        (Kind::Tool, &[Kind::Agent][..]),
        (Kind::Task, &[Kind::Agent][..]),
        (Kind::Doc, &[Kind::Agent, Kind::User][..]),
        (Kind::Block, &[Kind::Agent, Kind::User][..]),
        (Kind::BlockEdit, &[Kind::Block][..]),
        (Kind::LearningPolicy, &[Kind::Agent][..]),
    ] {
        for (tenant, r) in store.scan_kind(kind).await.unwrap() {
            let mut owned = false;
            for parent in parents {
                owned = owned || exists(tenant, *parent, r.scope).await;
            }
            // A scan is no snapshot: a record purged with its owner while the
            // scan ran can be in it. An orphan is one still there read by id.
            if !owned && exists(tenant, kind, r.id).await {
                found.push(format!("{} {} has lost its owner {}", kind.name(), r.id, r.scope));
            }
        }
    }
    found
}

/// The status code of a generated client's error.
pub fn status_of<T: std::fmt::Debug>(r: Result<T, agent_platform_client::Error<types::Error>>) -> u16 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.status().map(|s| s.as_u16()).unwrap_or_else(|| panic!("no status: {e}")),
    }
}

/// The `agent-platform` binary as the sources are now: cargo runs once per
/// test process (quick when nothing changed) and names the executable it made,
/// so a binary left in `target/` by an older build is never the one tested —
/// unless `AGENT_PLATFORM_BIN` names the one to test, as CI does.
pub fn binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| match std::env::var_os("AGENT_PLATFORM_BIN") {
            // CI names the binary its `cargo test --workspace` built (`cargo xtask test-binaries`).
            Some(path) => {
                let path = PathBuf::from(path);
                assert!(path.exists(), "AGENT_PLATFORM_BIN={} does not exist", path.display());
                path
            }
            None => build_binary(),
        })
        .clone()
}

/// Builds the binary into this test binary's own target dir and profile, by
/// asking cargo for what `cargo test --workspace` builds: the same target
/// selection resolves the same features, so after the README's test command
/// everything is fresh and nothing is compiled. (Any narrower selection, such as
/// `cargo build --workspace --bins`, leaves out dev-dependencies or targets,
/// resolves some shared dependencies with other features and compiles them and
/// the server a second time.) The server binary is the `agent-platform` bin
/// built as a program (not as its unit tests' harness).
fn build_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    let target_dir = profile_dir.parent().expect("target/<profile>");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "--workspace", "--no-run", "--quiet", "--message-format=json-render-diagnostics"])
        .arg("--target-dir")
        .arg(target_dir);
    // `target/debug` is the dev profile's (and the test profile's); any other
    // profile's dir is named after it.
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some(profile) => {
            build.args(["--profile", profile]);
        }
        None => panic!("{} is not a cargo profile dir", profile_dir.display()),
    }
    // Diagnostics go to stderr as cargo renders them; stdout is one JSON message a line.
    let out = build.stderr(Stdio::inherit()).output().expect("cargo runs");
    assert!(out.status.success(), "`cargo test --workspace --no-run` failed: see its errors above");
    let executable = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "agent-platform")
        .filter(|m| m["target"]["kind"] == serde_json::json!(["bin"]) && m["profile"]["test"] == false)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo built no `agent-platform` executable");
    assert!(executable.exists(), "{} is missing after the build", executable.display());
    executable
}

/// The real binary serving a data dir, killable.
pub struct Process {
    pub child: Child,
    pub base: String,
    pub key: Option<String>,
    /// Standard output, when no first key was read from it (see [`Process::stop`]).
    stdout: Option<std::process::ChildStdout>,
    /// A reading handle on the file the server writes its standard error to.
    stderr: std::fs::File,
}

impl Process {
    /// Starts `agent-platform serve` on a free port and waits until it answers.
    pub fn serve(data_dir: &Path) -> Process {
        Self::serve_with_env(data_dir, &[])
    }

    /// [`Process::serve`] with extra environment variables (e.g. `OPENAI_BASE_URL`).
    /// On an empty data dir it also waits for the first key the binary prints.
    pub fn serve_with_env(data_dir: &Path, env: &[(&str, &str)]) -> Process {
        Self::serve_with(data_dir, &[], env)
    }

    /// [`Process::serve_with_env`] with extra arguments to `serve` (e.g. `--accept-data-loss`).
    pub fn serve_with(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Process {
        Self::try_serve_with(data_dir, args, env).unwrap_or_else(|said| panic!("{said}"))
    }

    /// [`Process::serve_with`], answering what the server said when it exits
    /// instead of serving (a store it refuses).
    pub fn try_serve_with(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Process, String> {
        // A store that is not there yet creates a first key and prints it.
        let (database, fresh) = match backend::database_for(data_dir) {
            Some((url, created)) => (backend::env_of(url), created),
            None => (Vec::new(), std::fs::read_dir(data_dir).map_or(true, |mut d| d.next().is_none())),
        };
        // The server binds a port of its own choosing and says which on
        // standard error: a port picked here could be taken by another test's
        // server before this one binds it, and then answer in its place.
        // The server appends to its own open file; the test reads through
        // another, so that its reads never move the offset the server writes at.
        let file = tempfile::NamedTempFile::new().expect("a temp file for the server's stderr");
        let writer = std::fs::OpenOptions::new().append(true).open(file.path()).unwrap();
        let mut stderr = std::fs::File::open(file.path()).unwrap();
        let mut child = Command::new(binary())
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("AGENT_PLATFORM_LOG_LEVEL", "error")
            .envs(database.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(writer)
            .spawn()
            .expect("the binary starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!("the server exited early ({status}): {}", read_from_start(&mut stderr)));
            }
            let listening = read_from_start(&mut stderr);
            if let Some(port) = listening
                .split_once(" listening on http://127.0.0.1:")
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|port| port.parse::<u16>().ok())
            {
                break port;
            }
            assert!(std::time::Instant::now() < deadline, "the server did not start: {listening}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let base = format!("http://127.0.0.1:{port}");
        // The first key is printed on stdout once the server listens.
        let key = fresh.then(|| child.stdout.take()).flatten().map(|stdout| {
            use std::io::BufRead;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = std::io::BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send(line.trim().to_string());
            });
            let key = rx.recv_timeout(Duration::from_secs(20)).ok();
            assert!(
                key.as_ref().is_some_and(|k| k.starts_with("ap_")),
                "a fresh store prints a first key, got {key:?}"
            );
            key.unwrap()
        });
        let stdout = child.stdout.take();
        Ok(Process { child, base, key, stdout, stderr })
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and waits (at most 20 s) for a clean exit. Returns what it
    /// printed on standard output (nothing read before: no first key).
    pub fn stop(self) -> String {
        self.stop_and_read().0
    }

    /// [`Process::stop`], answering what the server printed on standard
    /// output (as `stop` does) and everything it printed on standard error.
    pub fn stop_and_read(mut self) -> (String, String) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(sent.success(), "kill -TERM failed");
        let status = wait_with_deadline(&mut self.child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("the server did not stop within 20 s of SIGTERM"));
        assert!(status.success(), "the server stopped with {status}");
        let mut out = String::new();
        if let Some(mut stdout) = self.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        }
        (out, read_from_start(&mut self.stderr))
    }
}

/// Everything in `file`, from its start (the server's standard error, read
/// through a handle of the test's own).
fn read_from_start(file: &mut std::fs::File) -> String {
    let mut text = String::new();
    std::io::Seek::rewind(file).unwrap();
    std::io::Read::read_to_string(file, &mut text).unwrap();
    text
}

/// What a run of the binary that was expected to end by itself left behind.
#[derive(Debug)]
pub struct Exited {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `agent-platform <args>` and waits (at most `within`) for it to exit by
/// itself, e.g. `serve` on a data dir it refuses (`serve` gets a free port
/// unless `--bind` is given).
/// Kills it and panics if it does not.
pub fn run_to_exit(args: &[&std::ffi::OsStr], within: Duration) -> Exited {
    use std::io::Read;
    let mut cmd = Command::new(binary());
    cmd.args(args);
    if args.first().is_some_and(|a| *a == "serve") && !args.iter().any(|a| *a == "--bind") {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        cmd.args(["--bind", &format!("127.0.0.1:{port}")]);
    }
    // On PostgreSQL, the database of the `--data-dir` given.
    if let Some(dir) = args.iter().position(|a| *a == "--data-dir").and_then(|i| args.get(i + 1)) {
        cmd.envs(backend::env_for(Path::new(dir)));
    }
    let mut child = cmd
        .env("AGENT_PLATFORM_LOG_LEVEL", "error")
        .env_remove("AGENT_PLATFORM_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    // Read both pipes as the child writes, so a full pipe cannot stall it.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = pipe.read_to_string(&mut out);
            out
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = wait_with_deadline(&mut child, within);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let status = status.unwrap_or_else(|| {
        panic!("`agent-platform {args:?}` still ran after {within:?}\nstdout: {stdout}\nstderr: {stderr}")
    });
    Exited { status, stdout, stderr }
}

fn wait_with_deadline(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Model providers of one provider, `fake` (its models all served; default
/// model `fake-model`), with `timeout_s` for answers and stream pauses.
pub fn fake_models(
    fake: &agent_platform::models::fake_upstream::FakeUpstream,
    timeout_s: f64,
) -> ModelsConfig {
    ModelsConfig {
        request_timeout_s: Some(timeout_s),
        stream_idle_timeout_s: Some(timeout_s),
        ..fake.models_config("fake-model")
    }
}

/// A JSON object as metadata (panics on anything else).
pub fn meta(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().expect("metadata is a JSON object").clone()
}

/// A document body with these snippets.
pub fn doc(title: &str, snippets: &[&str]) -> types::builder::CreateDocRequest {
    let content = snippets.iter().map(|s| types::DocContentArrayItem::try_from(*s).unwrap()).collect();
    types::CreateDocRequest::builder().title(title).content(types::DocContent::Array(content))
}

impl TestServer {
    /// Adds a document to an agent.
    pub async fn agent_doc(&self, agent: uuid::Uuid, body: types::builder::CreateDocRequest) -> types::Doc {
        self.client
            .agent_doc_create()
            .id(agent)
            .body(body)
            .send()
            .await
            .expect("agent_doc_create")
            .into_inner()
    }

    /// The index's snippet count for an owner of the tenant `default` (what
    /// search sees, beyond what the API can show).
    pub async fn indexed_snippets(&self, owner: uuid::Uuid) -> usize {
        let tenant = self.app().authenticate(&self.key).await.unwrap().expect("the key is known");
        self.app().searchable_snippets(tenant, owner).await.unwrap()
    }
}

/// Copies a directory tree (a data dir, a fixture) file by file.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The session a `/v1` conversation id names: `conv_` and its 32 hex digits.
pub fn session_of(conversation: &str) -> uuid::Uuid {
    let hex = conversation.strip_prefix("conv_").unwrap_or_else(|| panic!("a conv_ id: {conversation}"));
    assert_eq!(hex.len(), 32, "{conversation}");
    uuid::Uuid::try_parse(hex).unwrap()
}

/// The text of a `/v1/responses` answer's message items, joined.
pub fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap_or_else(|| panic!("{response}"))
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .filter_map(|c| c["text"].as_str())
        .collect()
}

/// The messages of a chat completion request, as (role, text content).
pub fn sent_messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or("").to_owned()))
        .collect()
}
