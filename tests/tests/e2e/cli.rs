//! The command line (`agent-platform api ...`): the real binary, run as a
//! child process against a live server on a fake upstream, with a home of
//! its own (no profile file unless the test writes one) and none of the
//! `AGENT_PLATFORM_*` connection variables unless the test sets them.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// How long one command may take.
const WITHIN: Duration = Duration::from_secs(30);

struct Ctx {
    s: TestServer,
    fake: FakeUpstream,
    /// HOME and XDG_CONFIG_HOME (`<home>/config`) of every run.
    home: tempfile::TempDir,
}

/// What a run left.
#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// Standard output as JSON, asserting the run succeeded.
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "{self:?}");
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

impl Ctx {
    async fn new() -> Ctx {
        let fake = FakeUpstream::start().await;
        let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 10.0)).await;
        Ctx { s, fake, home: tempfile::tempdir().unwrap() }
    }

    /// `agent-platform api <args>` with `env` and nothing else set.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(agent_platform_tests::binary());
        cmd.arg("api")
            .args(args)
            .env_remove("AGENT_PLATFORM_URL")
            .env_remove("AGENT_PLATFORM_KEY")
            .env_remove("AGENT_PLATFORM_PROFILE")
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `api <args>` to its end, with `env` and `stdin`.
    async fn run_with(&self, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Ran {
        let mut cmd = self.command(args, env);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("the binary starts");
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(text.as_bytes()).await.unwrap();
        }
        let out = tokio::time::timeout(WITHIN, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("`api {args:?}` still ran after {WITHIN:?}"))
            .unwrap();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `api <args> --url <server>` with the server's key in the environment.
    async fn run(&self, args: &[&str]) -> Ran {
        let mut args = args.to_vec();
        args.extend(["--url", &self.s.base]);
        self.run_with(&args, &[("AGENT_PLATFORM_KEY", &self.s.key)], None).await
    }

    /// A JSON file in the home, for `--json-body`.
    fn body_file(&self, name: &str, body: Value) -> String {
        let path = self.home.path().join(name);
        std::fs::write(&path, body.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    }

    /// An agent, and a session of it, made through the command line.
    async fn agent_and_session(&self) -> (String, String) {
        let agent =
            self.run(&["agent-create", "--name", "Ada", "--about", "a research assistant"]).await.json();
        assert_eq!(agent["name"], "Ada", "{agent}");
        let agent = agent["id"].as_str().unwrap().to_string();
        let session = self.run(&["session-create", "--agent", &agent]).await.json();
        assert_eq!(session["agents"], json!([agent]), "{session}");
        (agent, session["id"].as_str().unwrap().to_string())
    }
}

/// A TCP proxy to the server whose connections the test can break.
struct Proxy {
    /// `http://127.0.0.1:<its port>`.
    url: String,
    cut: tokio::sync::broadcast::Sender<()>,
}

impl Proxy {
    async fn to(server: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (cut, _) = tokio::sync::broadcast::channel(1);
        let cuts = cut.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await else { return };
                    // Dropping both ends breaks the connection mid-answer.
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.recv() => {}
                    }
                });
            }
        });
        Proxy { url, cut }
    }

    /// Breaks every connection open now (later ones go through).
    fn cut(&self) {
        self.cut.send(()).unwrap();
    }
}

fn write_profiles(home: &Path, text: &str) {
    let dir = home.join("config").join("agent-platform");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cli.toml"), text).unwrap();
}

#[tokio::test]
async fn chat_prints_the_answer_as_it_streams_and_json_prints_the_whole_answer() {
    let c = Ctx::new().await;
    let (_, session) = c.agent_and_session().await;

    // An answer that never ends: its first words arrive while the command still runs.
    c.fake.push(Behaviour::Endless);
    let mut child =
        c.command(&["chat", &session, "go on", "--url", &c.s.base], &[("AGENT_PLATFORM_KEY", &c.s.key)]);
    let mut child = child.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 256];
    let n = tokio::time::timeout(WITHIN, stdout.read(&mut first)).await.expect("text arrives").unwrap();
    assert!(n > 0, "the stream's text is printed as it comes");
    assert!(child.try_wait().unwrap().is_none(), "the answer has not ended, the command still runs");
    child.kill().await.unwrap();

    c.fake.push(Behaviour::StreamWithDelays {
        chunks: vec!["Hello ".into(), "from ".into(), "the fake".into()],
        delay: Duration::from_millis(5),
    });
    let ran = c.run(&["chat", &session, "hi"]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (Some(0), "Hello from the fake\n"), "{ran:?}");
    let sent = c.fake.last_request().unwrap().body;
    assert_eq!(sent["stream"], true, "{sent}");
    assert_eq!(sent["messages"].as_array().unwrap().last().unwrap()["content"], "hi", "{sent}");

    c.fake.push(Behaviour::Text("the whole answer".into()));
    let answer = c.run(&["chat", &session, "again", "--json"]).await.json();
    assert_eq!(answer["choices"][0]["message"]["content"], "the whole answer", "{answer}");

    // The generated command answers one JSON document, even when its body asks for a stream.
    c.fake.push(Behaviour::Text("not streamed".into()));
    let body =
        c.body_file("chat.json", json!({"messages": [{"role": "user", "content": "x"}], "stream": true}));
    let answer = c.run(&["session-chat", "--id", &session, "--json-body", &body]).await.json();
    assert_eq!(answer["choices"][0]["message"]["content"], "not streamed", "{answer}");
    let messages = c.run(&["message-list", "--id", &session, "--direction", "asc"]).await.json();
    let contents: Vec<&str> =
        messages["items"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["hi", "Hello from the fake", "again", "the whole answer", "x", "not streamed"]);
}

/// A task that waits for input (`{"answer": ...}`) then outputs `{"got": answer}`.
const ASKS: &str = r#"{"name": "asks", "main": [
    {"wait_for_input": {"info": {"question": "'ok?'"}}},
    {"evaluate": {"got": "_.answer"}}
]}"#;

/// The lines of a running `executions-watch`.
struct Watch {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// The types of the transitions printed so far.
    seen: Vec<String>,
}

impl Watch {
    /// The next transition printed, or `None` once the watch has ended.
    async fn next(&mut self) -> Option<Value> {
        let line =
            tokio::time::timeout(WITHIN, self.lines.next_line()).await.expect("a transition or the end");
        let t: Value = serde_json::from_str(&line.unwrap()?).unwrap();
        self.seen.push(t["type"].as_str().unwrap().to_string());
        Some(t)
    }

    /// Reads transitions until the `wait`; the watch still runs.
    async fn until_waiting(&mut self) {
        loop {
            let t = self.next().await.expect("the watch goes on while it waits");
            if t["type"] == "wait" {
                assert_eq!(t["output"], json!({"info": {"question": "ok?"}}), "{t}");
                break;
            }
        }
        assert!(self.child.try_wait().unwrap().is_none(), "the watch goes on while the execution waits");
    }

    /// Reads to the end: the exit status, what was said on standard error,
    /// and the types of every transition printed.
    async fn end(mut self) -> (std::process::ExitStatus, String, Vec<String>) {
        while self.next().await.is_some() {}
        let status = tokio::time::timeout(WITHIN, self.child.wait()).await.expect("the watch ends").unwrap();
        let mut stderr = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
        (status, stderr, self.seen)
    }
}

impl Ctx {
    /// An execution of [`ASKS`], started through the command line (the body from standard input).
    async fn waiting_execution(&self) -> String {
        let (agent, _) = self.agent_and_session().await;
        let task = self.body_file("task.json", serde_json::from_str(ASKS).unwrap());
        let task = self.run(&["task-create", "--id", &agent, "--json-body", &task]).await.json();
        let started = self
            .run_with(
                &[
                    "execution-create",
                    "--task-id",
                    task["id"].as_str().unwrap(),
                    "--json-body",
                    "-",
                    "--url",
                    &self.s.base,
                ],
                &[("AGENT_PLATFORM_KEY", &self.s.key)],
                Some(r#"{"input": {}}"#),
            )
            .await;
        started.json()["id"].as_str().unwrap().to_string()
    }

    /// `executions-watch` of `execution` on the server at `url`.
    fn watch(&self, execution: &str, url: &str) -> Watch {
        let mut child = self
            .command(&["executions-watch", execution, "--url", url], &[("AGENT_PLATFORM_KEY", &self.s.key)])
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Watch { child, lines, seen: Vec::new() }
    }

    /// Resumes `execution` with `{"answer": 42}` through the command line.
    async fn resume(&self, execution: &str) {
        let resumed = self
            .run_with(
                &["execution-update", "--id", execution, "--json-body", "-", "--url", &self.s.base],
                &[("AGENT_PLATFORM_KEY", &self.s.key)],
                Some(r#"{"status": "running", "input": {"answer": 42}}"#),
            )
            .await
            .json();
        assert!(matches!(resumed["status"].as_str(), Some("running" | "succeeded")), "{resumed}");
    }

    /// Asserts that `execution` succeeded with `{"got": 42}`.
    async fn assert_succeeded(&self, execution: &str) {
        let ended = self.run(&["execution-get", "--id", execution]).await.json();
        assert_eq!(
            (&ended["status"], &ended["output"]),
            (&json!("succeeded"), &json!({"got": 42})),
            "{ended}"
        );
    }
}

#[tokio::test]
async fn an_execution_is_watched_as_it_waits_then_resumed_and_ends_succeeded() {
    let c = Ctx::new().await;
    let execution = c.waiting_execution().await;
    let mut watch = c.watch(&execution, &c.s.base);
    watch.until_waiting().await;
    c.resume(&execution).await;
    let (status, stderr, seen) = watch.end().await;
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(seen, ["init", "wait", "resume", "step", "finish"], "{stderr}");
    c.assert_succeeded(&execution).await;
}

#[tokio::test]
async fn a_watch_whose_connection_breaks_goes_on_after_the_last_transition_it_printed() {
    let c = Ctx::new().await;
    let execution = c.waiting_execution().await;
    let proxy = Proxy::to(c.s.addr()).await;
    let mut watch = c.watch(&execution, &proxy.url);
    watch.until_waiting().await;
    proxy.cut();
    c.resume(&execution).await;
    let (status, stderr, seen) = watch.end().await;
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("; connecting again after transition "), "{stderr}");
    assert_eq!(seen, ["init", "wait", "resume", "step", "finish"], "each once: {stderr}");
    c.assert_succeeded(&execution).await;
}

#[tokio::test]
async fn a_watched_execution_that_fails_exits_non_zero_saying_why() {
    let c = Ctx::new().await;
    let (agent, _) = c.agent_and_session().await;
    let task = c.body_file("fails.json", json!({"name": "fails", "main": [{"error": "it broke"}]}));
    let task = c.run(&["task-create", "--id", &agent, "--json-body", &task]).await.json();
    let body = c.body_file("input.json", json!({"input": {}}));
    let execution =
        c.run(&["execution-create", "--task-id", task["id"].as_str().unwrap(), "--json-body", &body]).await;
    let execution = execution.json()["id"].as_str().unwrap().to_string();
    let ran = c.run(&["executions-watch", &execution]).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let last: Value = serde_json::from_str(ran.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error", "{ran:?}");
    assert!(ran.stderr.contains(&format!("execution {execution} is failed: ")), "{ran:?}");
    assert!(ran.stderr.contains("it broke"), "{ran:?}");
}

#[tokio::test]
async fn table_output_is_a_row_per_item_or_a_row_per_field() {
    let c = Ctx::new().await;
    let (agent, _) = c.agent_and_session().await;
    // A body file, one of its fields changed by a flag.
    let body = c.body_file("bob.json", json!({"name": "Bob", "about": "from the file", "model": "m"}));
    let bob = c.run(&["agent-create", "--json-body", &body, "--about", "from a flag"]).await.json();
    assert_eq!(
        (&bob["name"], &bob["about"], &bob["model"]),
        (&json!("Bob"), &json!("from a flag"), &json!("m"))
    );
    let ran = c.run(&["agent-list", "--table", "--direction", "asc"]).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and a row per agent: {ran:?}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert!(header.contains(&"ID") && header.contains(&"NAME"), "{ran:?}");
    assert!(!header.contains(&"INSTRUCTIONS"), "lists are not columns: {ran:?}");
    let cells = |line: &str| line.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert!(cells(lines[1]).contains(&agent) && cells(lines[1]).contains(&"Ada".to_string()), "{ran:?}");
    assert!(cells(lines[2]).contains(&"Bob".to_string()), "{ran:?}");

    let ran = c.run(&["agent-get", "--id", &agent, "-o", "table"]).await;
    assert_eq!(ran.code, Some(0), "{ran:?}");
    let first = ran.stdout.lines().next().unwrap_or_default();
    assert_eq!(first.split_whitespace().collect::<Vec<_>>(), ["FIELD", "VALUE"], "{ran:?}");
    assert!(
        ran.stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["name", "Ada"]),
        "{ran:?}"
    );
    assert!(
        ran.stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["id", agent.as_str()]),
        "{ran:?}"
    );
}

#[tokio::test]
async fn flags_beat_the_environment_which_beats_the_profile_file() {
    let c = Ctx::new().await;
    let (s, good) = (&c.s, c.s.key.as_str());
    let wrong = "ap_notakeyofthisserver000000000000";
    write_profiles(
        c.home.path(),
        &format!(
            "[profiles.default]\nurl = \"{}\"\nkey = \"{wrong}\"\n\n[profiles.good]\nurl = \"{}\"\nkey = \"{good}\"\n",
            s.base, s.base
        ),
    );
    let list = ["agent-list"];
    // The default profile: its URL is used, its key is refused (and never printed).
    let ran = c.run_with(&list, &[], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.starts_with("error: 401 Unauthorized: "), "{ran:?}");
    assert!(!ran.stderr.contains(wrong) && !ran.stdout.contains(wrong), "{ran:?}");
    // The environment's key beats the profile's.
    c.run_with(&list, &[("AGENT_PLATFORM_KEY", good)], None).await.json();
    // A profile named by flag or by the environment.
    c.run_with(&["agent-list", "--profile", "good"], &[], None).await.json();
    c.run_with(&list, &[("AGENT_PLATFORM_PROFILE", "good")], None).await.json();
    // The flag's key beats the environment's; the environment's URL beats the profile's.
    let ran = c.run_with(&["agent-list", "--key", wrong], &[("AGENT_PLATFORM_KEY", good)], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let nowhere = "http://127.0.0.1:9";
    let ran =
        c.run_with(&list, &[("AGENT_PLATFORM_URL", nowhere), ("AGENT_PLATFORM_PROFILE", "good")], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains("127.0.0.1:9"), "{ran:?}");
    c.run_with(
        &["agent-list", "--url", &s.base],
        &[("AGENT_PLATFORM_URL", nowhere), ("AGENT_PLATFORM_PROFILE", "good")],
        None,
    )
    .await
    .json();
    // A profile that is not there.
    let ran = c.run_with(&["agent-list", "--profile", "staging"], &[], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(ran.stderr.contains("no profile 'staging'"), "{ran:?}");
}

#[tokio::test]
async fn api_errors_print_the_apis_message_and_request_id_and_exit_1() {
    let c = Ctx::new().await;
    let missing = uuid::Uuid::now_v7().to_string();
    let ran = c.run(&["agent-get", "--id", &missing]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (Some(1), ""), "{ran:?}");
    let line = ran.stderr.trim_end();
    assert!(
        line.starts_with(&format!("error: 404 Not Found: agent {missing} not found (not_found, request id ")),
        "{ran:?}"
    );
    assert_eq!(ran.stderr.lines().count(), 1, "said once: {ran:?}");

    let ran = c.run(&["agent-list", "--limit", "5000"]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (Some(1), ""), "{ran:?}");
    assert!(ran.stderr.starts_with("error: 422 Unprocessable Entity: query.limit: "), "{ran:?}");
    assert!(ran.stderr.trim_end().ends_with(')') && ran.stderr.contains("(request id "), "{ran:?}");
}

#[tokio::test]
async fn a_missing_key_or_url_is_a_clear_error_where_one_is_needed() {
    let c = Ctx::new().await;
    let ran = c.run_with(&["agent-list", "--url", &c.s.base], &[], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    let profile = c.home.path().join("config/agent-platform/cli.toml");
    assert_eq!(
        ran.stderr,
        format!(
            "error: no API key: pass --key, set AGENT_PLATFORM_KEY, or set `key` under [profiles.default] in {}\n",
            profile.display()
        )
    );
    let ran = c.run_with(&["agent-list"], &[("AGENT_PLATFORM_KEY", &c.s.key)], None).await;
    assert_eq!(ran.code, Some(1), "{ran:?}");
    assert!(
        ran.stderr.starts_with("error: no server URL: pass --url, set AGENT_PLATFORM_URL, or set `url`"),
        "{ran:?}"
    );
    // The operations that need no key go without.
    let health = c.run_with(&["healthz", "--url", &c.s.base], &[], None).await.json();
    assert_eq!(health["status"], "ok", "{health}");
}
