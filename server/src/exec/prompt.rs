//! `prompt` and `tool_call` steps: the model, and the tools it calls.
//!
//! A `prompt` step sends its messages to the model chat would use for the
//! agent (the step's `settings.model`, else the agent's, else the default),
//! with the agent's `default_settings` under the step's `settings`, offering
//! the step's `tools` as function specs (an `mcp` tool: its server's tools,
//! listed as in chat; see [`crate::app::turn::tools`]). When the model calls
//! tools, `api_call` tools (their headers' `{{ secrets.NAME }}` put in) and
//! MCP servers' tools (but those that need a person's approval, which a task
//! cannot ask for) run here and their answers go back to the model (at most
//! [`MAX_TOOL_ROUNDS`] rounds; a call refused, as to a host not allowed, or
//! failed goes back as a tool message saying why); a `function` tool pauses the execution
//! ([`Outcome::Pause`]) with the conversation so far in the pause's state, and
//! the step resumes from that state with the tool's result.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::expr::{Context, Evaluator, offload};
use crate::api::types::{Agent, ChatSettings, PromptInput, PromptTools, Step, Task};
use crate::api::types::{DocOwner, OwnerRole, ToolDef, ToolType};
use crate::app::memory_tools::MemoryScope;
use crate::app::turn::Ask;
use crate::app::turn::plan::New;
use crate::app::turn::tools::{McpSource, Toolbox, told};
use crate::app::{App, Tenant};
use crate::models::wire::{self, ChatMessage, CompletionRequest, ToolCall, ToolChoice, ToolSpec};
use crate::store::ListQuery;
use crate::tools::api_call::{ApiCallPolicy, run_api_call};

/// Rounds of tool calls one prompt step may make before it fails.
pub const MAX_TOOL_ROUNDS: u32 = 10;

/// What a prompt or tool_call step needs from the engine.
pub struct StepEnv<'a> {
    pub app: &'a App,
    pub tenant: Tenant,
    pub agent: &'a Agent,
    pub task: &'a Task,
    /// The execution the step is of (what memory edits name).
    pub execution: Uuid,
    /// The task's tools, plus the agent's when `inherit_tools` ([`task_tools`]).
    pub tools: &'a [ToolDef],
    pub eval: &'a Arc<Evaluator>,
    pub ctx: &'a Context,
    /// Where `api_call` tools may go, and the client that keeps to it.
    pub policy: &'a ApiCallPolicy,
}

/// How a step ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Its output.
    Done(Value),
    /// A function tool was called: the execution waits for its result.
    /// `call` is `{"id", "name", "arguments"}`; `state` is what the step needs
    /// to go on (opaque: the engine stores it and hands it back on resume).
    Pause { call: Value, state: Value },
}

/// Where a paused prompt step stands: stored as JSON in [`Outcome::Pause`]'s state.
#[derive(serde::Serialize, serde::Deserialize)]
struct PausedPrompt {
    /// The conversation so far (the assistant message with its calls included).
    messages: Vec<ChatMessage>,
    /// The id of the function call whose result is awaited.
    call_id: String,
    /// The calls of the same assistant message still to run after it.
    pending: Vec<ToolCall>,
    /// Rounds of tool calls so far.
    rounds: u32,
}

/// A `prompt` step, from the start (`resume` None) or resumed with
/// `(state, result)`: the state of its [`Outcome::Pause`] and the function's result.
pub async fn prompt_step(
    env: &StepEnv<'_>,
    step: &Step,
    resume: Option<(Value, Value)>,
) -> Result<Outcome, String> {
    let Step::Prompt { prompt, tools, tool_choice, settings, unwrap } = step else {
        return Err(format!("prompt_step called with a {} step", step.kind()));
    };
    let offered = offered_tools(env.tools, tools.as_ref())?;
    let (provider, mut request, toolbox) =
        base_request(env, settings.as_ref(), &offered, tool_choice.as_ref()).await?;
    let mut rounds = 0;
    match resume {
        None => request.messages = offload(env.eval, prompt, env.ctx, messages).await?,
        Some((state, result)) => {
            let paused: PausedPrompt = serde_json::from_value(state)
                .map_err(|e| format!("the paused prompt step's state cannot be read: {e}"))?;
            request.messages = paused.messages;
            request.messages.push(ChatMessage::tool_result(paused.call_id, as_text(&result)));
            rounds = paused.rounds;
            if let Some(pause) =
                run_calls(env, &offered, &toolbox, &mut request.messages, paused.pending, rounds).await?
            {
                return Ok(pause);
            }
        }
    }
    loop {
        let answer = provider.chat(&request).await.map_err(|e| format!("prompt step: {e}"))?;
        let Some(message) = answer.message().cloned() else {
            return Err("prompt step: the model provider's answer has no message".into());
        };
        let calls = message.tool_calls.clone().unwrap_or_default();
        if calls.is_empty() {
            return Ok(Outcome::Done(output(&message, *unwrap)));
        }
        rounds += 1;
        if rounds > MAX_TOOL_ROUNDS {
            return Err(format!(
                "prompt step: the model kept calling tools after {MAX_TOOL_ROUNDS} rounds \
                 (the limit of tool-call rounds per prompt step)"
            ));
        }
        request.messages.push(message);
        if let Some(pause) = run_calls(env, &offered, &toolbox, &mut request.messages, calls, rounds).await? {
            return Ok(pause);
        }
    }
}

/// A `tool_call` step, its arguments evaluated: an `api_call` tool runs now,
/// a `function` tool pauses (state `null`) for the client to run it.
pub async fn tool_call_step(env: &StepEnv<'_>, tool: &str, arguments: Value) -> Result<Outcome, String> {
    let def = find_tool(env.tools, tool)?;
    match def.kind {
        ToolType::ApiCall => {
            let call = def.api_call.as_ref().ok_or_else(|| format!("tool {tool:?} has no api_call"))?;
            let call = Box::pin(env.app.api_call_with_secrets(env.tenant, call)).await?;
            Ok(Outcome::Done(Box::pin(run_api_call(&call, &arguments, env.policy)).await?))
        }
        ToolType::Mcp => Err(format!(
            "tool {tool:?} is an MCP server: a tool_call step calls one tool; offer the server's tools \
             to a prompt step instead"
        )),
        ToolType::Memory | ToolType::ConversationSearch => Err(format!(
            "tool {tool:?} is one of the server's memory tools: the model calls those; offer it to a \
             prompt step instead"
        )),
        ToolType::FileSearch => {
            let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default();
            let owner = DocOwner { id: env.agent.id, role: OwnerRole::Agent };
            let toolbox = Toolbox::default().with_file_search_as(tool, None, vec![owner]);
            let call = ToolCall {
                id: format!("call_{}", Uuid::now_v7().simple()),
                kind: "function".into(),
                function: wire::FunctionCall {
                    name: tool.into(),
                    arguments: json!({"query": query}).to_string(),
                },
            };
            let runs = Box::pin(env.app.run_tools(env.tenant, &toolbox, std::slice::from_ref(&call))).await;
            match (&runs[0].output, &runs[0].error) {
                (_, Some(error)) => Err(format!("tool {tool:?}: {error}")),
                (Some(output), None) => Ok(Outcome::Done(
                    serde_json::from_str(output).unwrap_or_else(|_| Value::String(output.clone())),
                )),
                (None, None) => Ok(Outcome::Done(Value::Null)),
            }
        }
        ToolType::Function => Ok(Outcome::Pause {
            call: json!({"id": format!("call_{}", Uuid::now_v7().simple()), "name": tool, "arguments": arguments}),
            state: Value::Null,
        }),
    }
}

/// The tools of a task: its own, then the agent's when `inherit_tools` (one
/// of the agent's with a name the task already has is left out).
pub async fn task_tools(app: &App, tenant: Tenant, task: &Task) -> crate::app::Result<Vec<ToolDef>> {
    let mut tools = task.tools.clone();
    if task.inherit_tools {
        let all = ListQuery::oldest_first(0, usize::MAX);
        for tool in app.tool_list(tenant, task.agent_id, &all).await? {
            if !tools.iter().any(|t| t.name == tool.name) {
                tools.push(ToolDef {
                    name: tool.name,
                    kind: tool.kind,
                    description: tool.description,
                    function: tool.function,
                    api_call: tool.api_call,
                    mcp: tool.mcp,
                });
            }
        }
    }
    Ok(tools)
}

fn find_tool<'t>(tools: &'t [ToolDef], name: &str) -> Result<&'t ToolDef, String> {
    tools.iter().find(|t| t.name == name).ok_or_else(|| {
        let known: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        format!(
            "no tool named {name:?} in the task's tools (it has: {}); add it to the task's `tools`, \
             or to the agent's with `inherit_tools`",
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        )
    })
}

/// The tools the step offers the model: none, all, or those named.
fn offered_tools<'t>(tools: &'t [ToolDef], wanted: Option<&PromptTools>) -> Result<Vec<&'t ToolDef>, String> {
    match wanted {
        None => Ok(Vec::new()),
        Some(PromptTools::All) => Ok(tools.iter().collect()),
        Some(PromptTools::Named(names)) => names.iter().map(|n| find_tool(tools, n)).collect(),
    }
}

fn tool_spec(tool: &ToolDef) -> ToolSpec {
    let parameters = match (&tool.function, tool.kind) {
        (Some(f), _) => Value::Object(f.parameters.clone()),
        // An api_call tool says nothing of its arguments: any object.
        (
            None,
            ToolType::ApiCall
            | ToolType::Mcp
            | ToolType::FileSearch
            | ToolType::Memory
            | ToolType::ConversationSearch,
        ) => {
            json!({"type": "object"})
        }
        (None, ToolType::Function) => json!({"type": "object", "properties": {}}),
    };
    let description = (!tool.description.is_empty()).then(|| tool.description.clone());
    ToolSpec::function(&tool.name, description, parameters)
}

/// The provider and the request without its messages: the turn's plan (see
/// [`crate::app::turn`]) for the agent, with the step's `settings` (its
/// `model` over the agent's) and the tools it offers.
async fn base_request(
    env: &StepEnv<'_>,
    settings: Option<&crate::api::types::JsonObject>,
    offered: &[&ToolDef],
    tool_choice: Option<&Value>,
) -> Result<(crate::models::Provider, CompletionRequest, Toolbox), String> {
    let mut settings = settings.cloned().unwrap_or_default();
    let model = match settings.remove("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m),
        Some(other) => return Err(format!("prompt step: settings.model must be a string, not {other}")),
    };
    let response_format = settings.remove("response_format").filter(|v| !v.is_null());
    let step_settings: ChatSettings =
        serde_json::from_value(Value::Object(settings)).map_err(|e| format!("prompt step: settings: {e}"))?;
    let mut tools: Vec<ToolSpec> = offered
        .iter()
        .filter(|t| {
            !matches!(
                t.kind,
                ToolType::Mcp | ToolType::FileSearch | ToolType::Memory | ToolType::ConversationSearch
            )
        })
        .map(|t| tool_spec(t))
        .collect();
    // An mcp tool offers its server's tools (see `app::turn::tools`).
    let mut toolbox = Toolbox::default();
    let sources: Vec<McpSource<'_>> = offered
        .iter()
        .filter_map(|t| match (t.kind, &t.mcp) {
            (ToolType::Mcp, Some(def)) => Some(McpSource { label: &t.name, def, approval_by_default: false }),
            _ => None,
        })
        .collect();
    // Boxed: a step's future sits inside its parents' (nested steps); this one is large.
    let listed = Box::pin(env.app.add_mcp_tools(env.tenant, &mut toolbox, &sources)).await;
    // A file_search tool searches the agent's documents.
    for t in offered.iter().filter(|t| t.kind == ToolType::FileSearch) {
        let owner = DocOwner { id: env.agent.id, role: OwnerRole::Agent };
        let description = (!t.description.is_empty()).then(|| t.description.clone());
        toolbox = toolbox.with_file_search_as(&t.name, description, vec![owner]);
    }
    // Memory tools edit the agent's blocks and search nothing but this step's (no session).
    for t in offered.iter().filter(|t| t.kind == ToolType::Memory) {
        let scope = MemoryScope {
            agent: Some(env.agent.id),
            execution: Some(env.execution),
            ..MemoryScope::default()
        };
        toolbox = toolbox.with_memory_tool(t.kind, &t.name, &t.description, scope);
    }
    if let Some(unavailable) = listed.note() {
        return Err(format!("prompt step: {unavailable}"));
    }
    tools.extend(toolbox.specs().cloned());
    let tool_choice = match tool_choice.filter(|c| !c.is_null()) {
        Some(c) if !tools.is_empty() => Some(
            serde_json::from_value::<ToolChoice>(c.clone())
                .map_err(|e| format!("prompt step: tool_choice: {e}"))?,
        ),
        _ => None,
    };
    let ask = Ask {
        agent: Some(env.agent),
        model: model.as_deref(),
        settings: step_settings,
        tools,
        recall: None,
        system: None,
        instructions: None,
        history: None,
        new: New::Sent(Vec::new()),
        render_templates: false,
        tool_choice,
        response_format,
        stream: false,
    };
    let plan = env.app.plan(env.tenant, ask).await.map_err(|e| format!("prompt step: {e}"))?;
    Ok((plan.provider, plan.request, toolbox))
}

/// The step's messages: one user message from a template, a list of
/// `{role, content}` templates, or an expression giving either.
fn messages(eval: &Evaluator, prompt: &PromptInput, ctx: &Context) -> Result<Vec<ChatMessage>, String> {
    let messages = match prompt {
        PromptInput::Text(template) => messages_from(eval.render(template, ctx)?)?,
        PromptInput::Messages(list) => list
            .iter()
            .map(|m| {
                let content = eval.render_text(&m.content, ctx)?;
                messages_from(json!([{"role": m.role, "content": content}])).map(|mut v| v.remove(0))
            })
            .collect::<Result<_, _>>()?,
        PromptInput::Expr(expr) => messages_from(eval.eval(expr, ctx)?)?,
    };
    if messages.is_empty() {
        return Err("prompt step: no messages to send".into());
    }
    Ok(messages)
}

/// A string (one user message) or a list of message objects (`role`,
/// `content`; a content that is not text is sent as its JSON).
fn messages_from(value: Value) -> Result<Vec<ChatMessage>, String> {
    match value {
        Value::String(text) => Ok(vec![ChatMessage::user(text)]),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let Value::Object(mut m) = item else {
                    return Err(format!("prompt step: message {i} is not an object of role and content"));
                };
                if let Some(content) = m.get_mut("content")
                    && !matches!(content, Value::String(_) | Value::Null)
                {
                    *content = Value::String(content.to_string());
                }
                serde_json::from_value(Value::Object(m)).map_err(|e| format!("prompt step: message {i}: {e}"))
            })
            .collect(),
        other => Err(format!("prompt step: the prompt must be text or a list of messages, not {other}")),
    }
}

/// Runs `calls` in order: api_call tools now (their answers, or why there is
/// none, appended as tool messages); the first function tool pauses, keeping
/// the rest for the resume.
async fn run_calls(
    env: &StepEnv<'_>,
    offered: &[&ToolDef],
    toolbox: &Toolbox,
    messages: &mut Vec<ChatMessage>,
    calls: Vec<ToolCall>,
    rounds: u32,
) -> Result<Option<Outcome>, String> {
    let mut calls = calls.into_iter();
    while let Some(call) = calls.next() {
        let name = &call.function.name;
        if toolbox.get(name).is_some() {
            // A tool of an MCP server: run by the tool runner (one that
            // needs a person's approval cannot run in a task).
            let result = if toolbox.needs_approval(name) {
                format!(
                    "error: {name:?} needs a person's approval (its mcp tool's require_approval), \
                     which a task step cannot ask for"
                )
            } else {
                let runs =
                    Box::pin(env.app.run_tools(env.tenant, toolbox, std::slice::from_ref(&call))).await;
                told(&runs[0])
            };
            messages.push(ChatMessage::tool_result(&call.id, result));
            continue;
        }
        let Some(tool) = offered.iter().find(|t| &t.name == name) else {
            // Told to the model, which may correct itself.
            messages
                .push(ChatMessage::tool_result(&call.id, format!("error: there is no tool named {name:?}")));
            continue;
        };
        let arguments = if call.function.arguments.trim().is_empty() {
            Ok(Value::Object(Map::new()))
        } else {
            serde_json::from_str::<Value>(&call.function.arguments)
        };
        match (tool.kind, arguments) {
            (_, Err(e)) => messages.push(ChatMessage::tool_result(
                &call.id,
                format!("error: the arguments are not valid JSON: {e}"),
            )),
            (ToolType::ApiCall, Ok(arguments)) => {
                let def = tool.api_call.as_ref().ok_or_else(|| format!("tool {name:?} has no api_call"))?;
                // A call that is refused (a host not allowed) or fails is told
                // to the model, which may do without it or answer why not.
                let def = Box::pin(env.app.api_call_with_secrets(env.tenant, def)).await;
                let answer = match async { Box::pin(run_api_call(&def?, &arguments, env.policy)).await }.await
                {
                    Ok(answer) => answer.to_string(),
                    Err(why) => format!("error: {why}"),
                };
                messages.push(ChatMessage::tool_result(&call.id, answer));
            }
            // The server's name is not one of its tools' (those are in the toolbox).
            (ToolType::Mcp, Ok(_)) => messages.push(ChatMessage::tool_result(
                &call.id,
                format!("error: {name:?} is an MCP server, not one of its tools"),
            )),
            // Offered through the toolbox, run above.
            (ToolType::FileSearch | ToolType::Memory | ToolType::ConversationSearch, Ok(_)) => messages.push(
                ChatMessage::tool_result(&call.id, format!("error: {name:?} is not offered in this step")),
            ),
            (ToolType::Function, Ok(arguments)) => {
                let paused = PausedPrompt {
                    messages: std::mem::take(messages),
                    call_id: call.id.clone(),
                    pending: calls.collect(),
                    rounds,
                };
                let state = serde_json::to_value(&paused).map_err(|e| e.to_string())?;
                let call = json!({"id": call.id, "name": name, "arguments": arguments});
                return Ok(Some(Outcome::Pause { call, state }));
            }
        }
    }
    Ok(None)
}

/// The step's output: the assistant message, or its content when `unwrap`.
fn output(message: &ChatMessage, unwrap: bool) -> Value {
    let content = message.content_text().map(|t| Value::String(t.into_owned())).unwrap_or(Value::Null);
    if unwrap {
        return content;
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::String(wire::Role::Assistant.as_str().into()));
    out.insert("content".into(), content);
    if let Some(calls) = message.tool_calls.as_ref().filter(|c| !c.is_empty()) {
        out.insert("tool_calls".into(), serde_json::to_value(calls).unwrap_or(Value::Null));
    }
    Value::Object(out)
}

/// A tool's result as the text of a tool message.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
