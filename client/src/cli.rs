//! `agent-platform api`: the HTTP API from the command line.
//!
//! Every operation of the spec is a command named after its operation id
//! (`agent-create`, `session-chat`, ...) with progenitor's typed flags and
//! `--json-body FILE|-`; those commands are generated (`cli_generated.rs`,
//! by `cargo xtask generate`). An answer prints as pretty JSON, or as a table
//! with `--table` (`-o table`); an error prints the API's message and request
//! id on standard error and exits 1. Two commands are written here because
//! they stream: `chat` (the answer's text as it comes) and `executions-watch`
//! (an execution's transitions as they commit). The operations that answer
//! only a stream (`transition_stream`, `openai_response_socket`) have no
//! generated command, and the generated chats answer one JSON document
//! (`stream` is always false there).
//!
//! The server binary mounts [`command`] as its `api` subcommand and runs the
//! matches with [`run`]. Where the server and key come from: [`connection`].

pub mod connection;
mod table;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use futures::StreamExt;
use serde_json::Value;

pub use connection::{Connection, Flags};
pub use table::table;

use crate::cli_generated::{Cli, CliCommand, CliConfig, KEYLESS};
use crate::stream::{ChatStreamError, TransitionType};
use crate::{Client, Error, ResponseValue, builder, types};

const CHAT: &str = "chat";
/// The heading of the `api` command's own flags in each command's help.
const CONNECTION: &str = "Connection and output";
const WATCH: &str = "executions-watch";

const LONG_ABOUT: &str = "Call the HTTP API of a running server: a command per operation of its \
OpenAPI document (named after the operation id: agent-create, session-chat, ...), with a flag per \
parameter and scalar body field, or the whole body with --json-body FILE (- reads standard input). \
Answers print as pretty JSON, or as a table with --table. `chat` and `executions-watch` stream.

The server and key: --url and --key, else AGENT_PLATFORM_URL and AGENT_PLATFORM_KEY, else the \
profile (--profile, else AGENT_PLATFORM_PROFILE, else `default`) of \
$XDG_CONFIG_HOME/agent-platform/cli.toml or ~/.config/agent-platform/cli.toml:

  [profiles.default]
  url = \"http://127.0.0.1:8080\"
  key = \"ap_...\"";

/// The `api` command: global connection and output flags, the streaming
/// commands, then one command per generated operation.
pub fn command() -> Command {
    let mut api = Command::new("api")
        .about("Call the HTTP API: a command per operation, and `chat` and `executions-watch`, which stream")
        .long_about(LONG_ABOUT)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .arg(
            Arg::new("url")
                .help_heading(CONNECTION)
                .long("url")
                .global(true)
                .value_name("URL")
                .help("The server, e.g. http://127.0.0.1:8080 (else AGENT_PLATFORM_URL, else the profile's `url`)"),
        )
        .arg(Arg::new("key")
                .help_heading(CONNECTION).long("key").global(true).value_name("KEY").help(
            "The API key (else AGENT_PLATFORM_KEY, else the profile's `key`); a flag shows in the process \
             list, the variable and the profile do not",
        ))
        .arg(
            Arg::new("profile")
                .help_heading(CONNECTION)
                .long("profile")
                .global(true)
                .value_name("NAME")
                .help("The profile of cli.toml to read (else AGENT_PLATFORM_PROFILE, else `default`)"),
        )
        .arg(
            Arg::new("output")
                .help_heading(CONNECTION)
                .short('o')
                .long("output")
                .global(true)
                .value_name("FORMAT")
                .value_parser(["json", "table"])
                .help("How answers print: pretty JSON (the default) or a table"),
        )
        .arg(
            Arg::new("table")
                .help_heading(CONNECTION)
                .long("table")
                .global(true)
                .action(ArgAction::SetTrue)
                .help("Print answers as a table (-o table): a list a row per item, an object a row per field"),
        )
        .subcommand(ChatArgs::augment_args(Command::new(CHAT)).about(
            "Send a user message to a session and print the answer's text as it streams (--json: the whole answer)",
        ))
        .subcommand(WatchArgs::augment_args(Command::new(WATCH)).about(
            "Print an execution's transitions as JSON lines as they commit, until it ends (exit 1 unless it succeeded)",
        ));
    for op in CliCommand::iter() {
        api = api.subcommand(generated_command(op));
    }
    api
}

/// `chat SESSION_ID MESSAGE`.
#[derive(Args, Debug)]
struct ChatArgs {
    /// The session's id.
    session_id: uuid::Uuid,
    /// The user message (`-`: read it from standard input).
    message: String,
    /// Print the whole answer as JSON when it has ended, instead of its text as it comes.
    #[arg(long)]
    json: bool,
    /// The model; overrides the agent's.
    #[arg(long)]
    model: Option<String>,
}

/// `executions-watch EXECUTION_ID`.
#[derive(Args, Debug)]
struct WatchArgs {
    /// The execution's id.
    execution_id: uuid::Uuid,
}

/// The command of an operation: named after its id, its summary in the
/// listing and its whole description in `--help`.
fn generated_command(op: CliCommand) -> Command {
    let cmd = Cli::<Printer>::get_command(op).name(command_name(op));
    let (short, long) = split_about(&cmd.get_about().map(|a| a.to_string()).unwrap_or_default());
    let cmd = cmd.about(short).long_about(long);
    if cmd.get_arguments().any(|a| a.get_id() == "json-body") {
        cmd.mut_arg("json-body", |a| {
            a.value_name("FILE").help(
                "A file holding the whole JSON body (`-`: standard input); flags given with it change its fields",
            )
        })
    } else {
        cmd
    }
}

/// `agent_create` -> `agent-create`.
fn command_name(op: CliCommand) -> String {
    op.operation_id().replace('_', "-")
}

/// Progenitor's help (`summary`, a blank line, `description`) as (the first
/// sentence, for the listing; the whole, for `--help`). A summary that is the
/// first line of a longer sentence goes on into the description.
fn split_about(text: &str) -> (String, String) {
    let (summary, description) = text.split_once("\n\n").unwrap_or((text, ""));
    let cut = !summary.is_empty() && !summary.ends_with(['.', ':', '!', '?', ')']) && !description.is_empty();
    let whole = match (cut, description.is_empty()) {
        (true, _) => format!("{summary} {description}"),
        (false, true) => summary.to_string(),
        (false, false) => format!("{summary}\n\n{description}"),
    };
    let lead = if cut { whole.split("\n\n").next().unwrap_or(&whole) } else { summary };
    let first = &lead[..lead.find(". ").map_or(lead.len(), |end| end + 1)];
    (first.trim().to_string(), whole)
}

/// Reads `--json-body`: a file, or standard input for `-`.
pub(crate) fn read_json_body(path: &Path) -> std::io::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

/// Runs the `api` command's matches; answers the exit code (0 ok, 1 an error
/// or an execution that did not succeed). Errors are printed here.
pub async fn run(matches: &ArgMatches) -> i32 {
    let reported = AtomicBool::new(false);
    let table =
        matches.get_flag("table") || matches.get_one::<String>("output").is_some_and(|o| o == "table");
    let printer = Printer { format: if table { Format::Table } else { Format::Json }, reported: &reported };
    match dispatch(matches, printer).await {
        Ok(code) => code,
        Err(e) => {
            if !reported.load(Ordering::Relaxed) {
                eprintln!("error: {e:#}");
            }
            1
        }
    }
}

async fn dispatch(matches: &ArgMatches, printer: Printer<'_>) -> anyhow::Result<i32> {
    let Some((name, sub)) = matches.subcommand() else {
        anyhow::bail!("no command given: see `agent-platform api --help`")
    };
    let flags = Flags {
        url: sub.get_one::<String>("url").cloned(),
        key: sub.get_one::<String>("key").cloned(),
        profile: sub.get_one::<String>("profile").cloned(),
    };
    let read = |path: &Path| match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    };
    let op = CliCommand::iter().find(|op| command_name(*op) == name);
    let need_key = !op.is_some_and(|op| KEYLESS.contains(&op.operation_id()));
    let env = |name: &str| std::env::var(name).ok();
    let conn = connection::resolve(&flags, &env, &read, need_key).map_err(anyhow::Error::msg)?;
    let client = match &conn.key {
        Some(key) => Client::with_key(&conn.url, key)
            .map_err(|_| anyhow::anyhow!("the API key has characters that an HTTP header cannot carry"))?,
        None => Client::new_with_client(&conn.url, reqwest::Client::new()),
    };
    match name {
        CHAT => chat(&client, ChatArgs::from_arg_matches(sub)?, &printer).await,
        WATCH => watch(&client, WatchArgs::from_arg_matches(sub)?.execution_id).await,
        _ => {
            let op = op.ok_or_else(|| anyhow::anyhow!("no command `{name}`"))?;
            Cli::new(client, printer).execute(op, sub).await?;
            Ok(0)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Table,
}

/// How the generated commands print: answers on standard output, errors on
/// standard error (noted in `reported`, so that they print once).
struct Printer<'a> {
    format: Format,
    reported: &'a AtomicBool,
}

impl Printer<'_> {
    fn print(&self, value: &Value) {
        let text = match self.format {
            Format::Json => serde_json::to_string_pretty(value).unwrap_or_default() + "\n",
            Format::Table => table(value),
        };
        // A closed pipe (`| head`) is no error of ours.
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }

    fn report(&self, message: String) {
        eprintln!("error: {message}");
        self.reported.store(true, Ordering::Relaxed);
    }
}

impl CliConfig for Printer<'_> {
    fn success_item<T>(&self, value: &ResponseValue<T>)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
        self.print(&serde_json::to_value(&**value).unwrap_or(Value::Null));
    }

    fn success_no_item(&self, _: &ResponseValue<()>) {}

    fn error<T>(&self, value: &Error<T>)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
        self.report(describe(value));
    }

    // The list_* hooks serve paginated operations (`x-dropshot-pagination`);
    // the spec has none, so each list prints as the one answer it is.
    fn list_start<T>(&self)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
    }

    fn list_item<T>(&self, value: &T)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
        self.print(&serde_json::to_value(value).unwrap_or(Value::Null));
    }

    fn list_end_success<T>(&self)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
    }

    fn list_end_error<T>(&self, value: &Error<T>)
    where
        T: schemars::JsonSchema + serde::Serialize + std::fmt::Debug,
    {
        self.report(describe(value));
    }

    // A body from --json-body may ask for a stream; these commands print one answer.
    fn execute_session_chat(
        &self,
        _: &ArgMatches,
        request: &mut builder::SessionChat<'_>,
    ) -> anyhow::Result<()> {
        *request = request.clone().body_map(|body| body.stream(false));
        Ok(())
    }

    fn execute_openai_chat_completion(
        &self,
        _: &ArgMatches,
        request: &mut builder::OpenaiChatCompletion<'_>,
    ) -> anyhow::Result<()> {
        *request = request.clone().body_map(|body| body.stream(false));
        Ok(())
    }

    fn execute_openai_response_create(
        &self,
        _: &ArgMatches,
        request: &mut builder::OpenaiResponseCreate<'_>,
    ) -> anyhow::Result<()> {
        *request = request.clone().body_map(|body| body.stream(false));
        Ok(())
    }
}

/// A client error as one line: an API error as its status, message and request id.
fn describe<T: serde::Serialize + std::fmt::Debug>(e: &Error<T>) -> String {
    match e {
        Error::ErrorResponse(answer) => api_message(
            answer.status(),
            request_id(answer.headers()),
            &serde_json::to_value(&**answer).unwrap_or(Value::Null),
        ),
        Error::UnexpectedResponse(answer) => {
            let id = request_id(answer.headers()).map(|id| format!(" (request id {id})")).unwrap_or_default();
            format!("{}: an answer the API does not describe{id}", answer.status())
        }
        other => other.to_string(),
    }
}

fn request_id(headers: &reqwest::header::HeaderMap) -> Option<&str> {
    headers.get("x-request-id").and_then(|v| v.to_str().ok())
}

/// An error answer as `STATUS: message (code, request id ID)`. It reads the
/// API's error (`detail`, `code`, `request_id`), its validation error (each
/// `loc: msg`) and the OpenAI-compatible routes' (`error.message`); anything
/// else is shown as the JSON it is.
pub fn api_message(status: reqwest::StatusCode, header_request_id: Option<&str>, body: &Value) -> String {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let (message, code) = if let Some(detail) = text(&body["detail"]) {
        (detail, text(&body["code"]))
    } else if let Some(violations) = body["detail"].as_array() {
        let each = violations.iter().map(|v| {
            let mut loc = String::new();
            for part in v["loc"].as_array().into_iter().flatten() {
                match part {
                    Value::Number(i) => loc.push_str(&format!("[{i}]")),
                    other => {
                        if !loc.is_empty() {
                            loc.push('.');
                        }
                        loc.push_str(other.as_str().unwrap_or_default());
                    }
                }
            }
            format!("{loc}: {}", v["msg"].as_str().unwrap_or_default())
        });
        (each.collect::<Vec<_>>().join("; "), None)
    } else if let Some(message) = text(&body["error"]["message"]) {
        (message, text(&body["error"]["code"]).or_else(|| text(&body["error"]["type"])))
    } else if body.is_null() {
        (String::from("no body"), None)
    } else {
        (body.to_string(), None)
    };
    let request_id = text(&body["request_id"]).or_else(|| header_request_id.map(str::to_string));
    let notes: Vec<String> =
        code.into_iter().chain(request_id.map(|id| format!("request id {id}"))).collect();
    if notes.is_empty() {
        format!("{status}: {message}")
    } else {
        format!("{status}: {message} ({})", notes.join(", "))
    }
}

/// A stream's error as what the API said.
fn stream_error(e: ChatStreamError) -> anyhow::Error {
    match e {
        ChatStreamError::Status { status, body } => {
            let status =
                reqwest::StatusCode::from_u16(status).unwrap_or(reqwest::StatusCode::INTERNAL_SERVER_ERROR);
            let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
            anyhow::anyhow!(api_message(status, None, &body))
        }
        other => anyhow::anyhow!(other.to_string()),
    }
}

/// `chat`: one user message; its answer's text printed as it streams, or
/// (`--json`) the whole answer printed when it has ended.
async fn chat(client: &Client, args: ChatArgs, printer: &Printer<'_>) -> anyhow::Result<i32> {
    let content = if args.message == "-" { read_json_body(Path::new("-"))? } else { args.message };
    let message = types::CreateMessageRequest::builder().role(types::Role::User).content(content);
    let mut body = types::ChatRequest::builder().messages(vec![message.try_into()?]);
    if let Some(model) = args.model {
        body = body.model(Some(types::ChatRequestModel::try_from(model)?));
    }
    let body: types::ChatRequest = body.try_into()?;
    if args.json {
        return match client.session_chat().id(args.session_id).body(body).send().await {
            Ok(answer) => {
                printer.success_item(&answer);
                Ok(0)
            }
            Err(e) => {
                printer.error(&e);
                Err(anyhow::Error::new(e))
            }
        };
    }
    let mut chunks = client.session_chat_stream(args.session_id, body).await.map_err(stream_error)?;
    let mut out = std::io::stdout().lock();
    let (mut at_line_start, mut finish) = (true, None);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(stream_error)?;
        if let Some(run) = &chunk.tool_run {
            let failed = run.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
            eprintln!("[tool {} ran in {} ms{failed}]", run.name, run.ms);
        }
        for choice in &chunk.choices {
            if let Some(text) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
                let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                at_line_start = text.ends_with('\n');
            }
            if let Some(reason) = &choice.finish_reason {
                finish = Some(reason.clone());
            }
        }
        if let Some(pending) = chunk.pending_approvals.as_ref().filter(|p| !p.is_empty()) {
            eprintln!(
                "{} tool calls wait for approval: send `approvals` with `api session-chat`",
                pending.len()
            );
        }
    }
    if !at_line_start {
        let _ = writeln!(out);
    }
    match finish.as_deref() {
        None | Some("stop") => {}
        Some("tool_calls") => eprintln!(
            "the answer asks for tool calls: run them and send `tool` messages with `api session-chat --json-body`"
        ),
        Some(other) => eprintln!("the answer ended: {other}"),
    }
    Ok(0)
}

/// The most times `executions-watch` connects again in a row without
/// receiving a transition, when its stream breaks.
const RECONNECTS: u32 = 3;

/// `executions-watch`: each transition as a JSON line, until a terminal one;
/// 0 when the execution succeeded, 1 when it failed or was cancelled.
async fn watch(client: &Client, id: uuid::Uuid) -> anyhow::Result<i32> {
    let (mut last, mut tries) = (None, 0);
    let mut out = std::io::stdout().lock();
    let end = 'connect: loop {
        let mut transitions = client.execution_transitions_stream(id, last).await.map_err(stream_error)?;
        while let Some(t) = transitions.next().await {
            match t {
                Ok(t) => {
                    let line = serde_json::to_string(&t)? + "\n";
                    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
                    (last, tries) = (Some(t.id), 0);
                    if matches!(
                        t.type_,
                        TransitionType::Finish | TransitionType::Error | TransitionType::Cancelled
                    ) {
                        break 'connect t.type_;
                    }
                }
                // A connection that broke (it ended, or its body failed mid-event).
                Err(e @ (ChatStreamError::Cut | ChatStreamError::Http(_) | ChatStreamError::Invalid(_)))
                    if tries < RECONNECTS =>
                {
                    tries += 1;
                    let after = last.map(|id| format!(" after transition {id}")).unwrap_or_default();
                    eprintln!("the stream broke ({e}); connecting again{after}");
                    continue 'connect;
                }
                Err(e) => return Err(stream_error(e)),
            }
        }
    };
    if end == TransitionType::Finish {
        return Ok(0);
    }
    let execution = client.execution_get().id(id).send().await.map_err(|e| anyhow::anyhow!(describe(&e)))?;
    let why = execution.error.clone().unwrap_or_default();
    eprintln!("execution {id} is {}: {why}", execution.status);
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_commands_are_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn every_operation_is_a_command_but_the_streams() {
        let api = command();
        let names: Vec<&str> = api.get_subcommands().map(|c| c.get_name()).collect();
        assert!(names.contains(&"agent-create") && names.contains(&"session-chat"), "{names:?}");
        assert!(names.contains(&CHAT) && names.contains(&WATCH), "{names:?}");
        assert!(!names.contains(&"transition-stream") && !names.contains(&"openai-response-socket"));
        let chat = api.find_subcommand("session-chat").unwrap();
        assert!(chat.get_arguments().all(|a| a.get_id() != "stream"), "chats have no --stream");
    }

    #[test]
    fn api_help_lists_every_operation_with_its_summary() {
        let help = command().render_help().to_string();
        for op in CliCommand::iter() {
            let about =
                Cli::<Printer>::get_command(op).get_about().map(|a| a.to_string()).unwrap_or_default();
            let (summary, _) = split_about(&about);
            let line = help.lines().find(|l| l.split_whitespace().next() == Some(&command_name(op)));
            let line = line.unwrap_or_else(|| panic!("{} is not listed:\n{help}", command_name(op)));
            let first_word =
                summary.split_whitespace().next().unwrap_or_else(|| panic!("{op:?} has no summary"));
            assert!(line.contains(first_word), "{line}");
        }
    }

    #[test]
    fn the_listing_shows_a_sentence_and_help_the_whole() {
        assert_eq!(split_about("Get an agent."), ("Get an agent.".into(), "Get an agent.".into()));
        let (short, long) = split_about("Change some fields.\n\nOnly the fields sent change.");
        assert_eq!(
            (short.as_str(), long.as_str()),
            ("Change some fields.", "Change some fields.\n\nOnly the fields sent change.")
        );
        let (short, long) = split_about("Delete an agent, with its\n\ntools. Then more.\n\nAnd more.");
        assert_eq!(short, "Delete an agent, with its tools.");
        assert_eq!(long, "Delete an agent, with its tools. Then more.\n\nAnd more.");
    }

    #[test]
    fn api_errors_say_the_message_code_and_request_id() {
        let not_found = json!({"code": "not_found", "detail": "agent 1 not found", "request_id": "r1"});
        assert_eq!(
            api_message(reqwest::StatusCode::NOT_FOUND, Some("other"), &not_found),
            "404 Not Found: agent 1 not found (not_found, request id r1)"
        );
        let invalid = json!({"detail": [
            {"loc": ["body", "messages", 0, "content"], "msg": "too long", "type": "string_too_long"},
            {"loc": ["query", "limit"], "msg": "at most 1000", "type": "less_than_equal"},
        ]});
        assert_eq!(
            api_message(reqwest::StatusCode::UNPROCESSABLE_ENTITY, Some("r2"), &invalid),
            "422 Unprocessable Entity: body.messages[0].content: too long; query.limit: at most 1000 (request id r2)"
        );
        let openai =
            json!({"error": {"message": "n must be 1", "type": "invalid_request_error", "code": null}});
        assert_eq!(
            api_message(reqwest::StatusCode::BAD_REQUEST, None, &openai),
            "400 Bad Request: n must be 1 (invalid_request_error)"
        );
    }
}
