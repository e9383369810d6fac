//! A streamed response's events, as a function of the provider's chunks.
//!
//! [`Events::start`] gives `response.created` and `response.in_progress`;
//! [`Events::chunk`] the events of one chunk (an item opened when its first
//! text or call arrives, then its deltas); [`Events::close`] the events that
//! close the items once the provider is done; [`Events::completed`] the last
//! event, with the saved response; [`Events::failed`] what a failure ends the
//! stream with. Every event has the next `sequence_number`.
//!
//! With the agent loop (see [`crate::app::turn::rounds`]) a response is
//! several answers of the model: the calls of the server's tools are not
//! streamed as `function_call` items ([`Events::hide`] names them); once an
//! answer's calls ran, [`Events::close_round`] closes its items,
//! [`Events::ran`] adds an item per run (`mcp_call`, `file_search_call`, or
//! a `function_call` and its output for an `api_call` tool), and
//! [`Events::next_round`] starts the next answer's items.

use std::collections::{HashMap, HashSet};

use crate::api::types::{ConversationItem, ItemContent, ModelResponse, ResponseStreamEvent};
use crate::app::Error;
use crate::models::wire;

/// A failure after a streamed response started: what the last event,
/// `response.failed`, carries (the HTTP layer adds the error's code).
pub struct StreamFailure {
    pub error: Error,
    /// The response as it stands, `failed`, its `error` to fill in.
    pub response: ModelResponse,
    pub sequence_number: u64,
}

/// A function call being streamed: its output index and item id.
struct OpenCall {
    output_index: u32,
    item_id: String,
}

/// The event sequence of one streamed response.
pub struct Events {
    /// The id of the answer's message (its text item's id; its calls' ids derive from it).
    answer: uuid::Uuid,
    seq: u64,
    /// The output index of the assistant's text item, once it has text.
    text: Option<u32>,
    calls: Vec<OpenCall>,
    next_index: u32,
    /// The provider's index of each call of the answer: its place in
    /// `calls`, or `None` for a call of the server's tools (not streamed).
    by_index: HashMap<u32, Option<usize>>,
    /// The names of the server's tools.
    hidden: HashSet<String>,
}

fn event(kind: &str, e: ResponseStreamEvent) -> ResponseStreamEvent {
    ResponseStreamEvent { kind: kind.into(), ..e }
}

impl Events {
    pub fn new(answer: uuid::Uuid) -> Events {
        Events {
            answer,
            seq: 0,
            text: None,
            calls: Vec::new(),
            next_index: 0,
            by_index: HashMap::new(),
            hidden: HashSet::new(),
        }
    }

    /// Calls of these tools (the server's) are not streamed as `function_call` items.
    pub fn hide(&mut self, names: impl IntoIterator<Item = String>) {
        self.hidden.extend(names);
    }

    /// The next answer's items, its message saved as `answer`.
    pub fn next_round(&mut self, answer: uuid::Uuid) {
        self.answer = answer;
        self.text = None;
        self.calls.clear();
        self.by_index.clear();
    }

    /// An item added and done at once, with the events of its progress between.
    fn whole_item(&mut self, item: ConversationItem, progress: &[&str], out: &mut Vec<ResponseStreamEvent>) {
        let output_index = self.next_index;
        self.next_index += 1;
        let id = item.id().to_owned();
        let mut opening = item.clone();
        match &mut opening {
            ConversationItem::McpCall { status, output, error, .. } => {
                *status = "in_progress".into();
                *output = None;
                *error = None;
            }
            ConversationItem::FileSearchCall { status, .. } => *status = "in_progress".into(),
            _ => {}
        }
        let added = event(
            "response.output_item.added",
            ResponseStreamEvent {
                output_index: Some(output_index),
                item: Some(opening),
                ..Default::default()
            },
        );
        out.push(self.numbered(added));
        for kind in progress {
            let e = event(
                kind,
                ResponseStreamEvent {
                    output_index: Some(output_index),
                    item_id: Some(id.clone()),
                    ..Default::default()
                },
            );
            out.push(self.numbered(e));
        }
        let done = event(
            "response.output_item.done",
            ResponseStreamEvent { output_index: Some(output_index), item: Some(item), ..Default::default() },
        );
        out.push(self.numbered(done));
    }

    /// The items of `mcp_list_tools`, each added and done.
    pub fn listed(&mut self, items: &[ConversationItem]) -> Vec<ResponseStreamEvent> {
        let mut out = Vec::new();
        for item in items {
            let end = match item {
                ConversationItem::McpListTools { error: Some(_), .. } => "response.mcp_list_tools.failed",
                _ => "response.mcp_list_tools.completed",
            };
            self.whole_item(item.clone(), &["response.mcp_list_tools.in_progress", end], &mut out);
        }
        out
    }

    /// The items of the server's runs of a round (the items their saved
    /// messages are: see `conversations::items_of`), each added and done
    /// with its progress events between.
    pub fn ran(&mut self, items: Vec<ConversationItem>) -> Vec<ResponseStreamEvent> {
        let mut out = Vec::new();
        for item in items {
            let progress: &[&str] = match &item {
                ConversationItem::McpCall { error: Some(_), .. } => {
                    &["response.mcp_call.in_progress", "response.mcp_call.failed"]
                }
                ConversationItem::McpCall { .. } => {
                    &["response.mcp_call.in_progress", "response.mcp_call.completed"]
                }
                ConversationItem::FileSearchCall { .. } => &[
                    "response.file_search_call.in_progress",
                    "response.file_search_call.searching",
                    "response.file_search_call.completed",
                ],
                _ => &[],
            };
            self.whole_item(item, progress, &mut out);
        }
        out
    }

    fn numbered(&mut self, mut e: ResponseStreamEvent) -> ResponseStreamEvent {
        e.sequence_number = self.seq;
        self.seq += 1;
        e
    }

    fn answer_item_id(&self) -> String {
        crate::app::conversations::message_item_id(self.answer)
    }

    /// `response.created` and `response.in_progress`, with the response `in_progress`.
    pub fn start(&mut self, head: &ModelResponse) -> Vec<ResponseStreamEvent> {
        let created = event(
            "response.created",
            ResponseStreamEvent { response: Some(Box::new(head.clone())), ..Default::default() },
        );
        let in_progress = event(
            "response.in_progress",
            ResponseStreamEvent { response: Some(Box::new(head.clone())), ..Default::default() },
        );
        vec![self.numbered(created), self.numbered(in_progress)]
    }

    /// Opens the text item.
    fn open_text(&mut self, out: &mut Vec<ResponseStreamEvent>) -> u32 {
        if let Some(i) = self.text {
            return i;
        }
        let i = self.next_index;
        self.next_index += 1;
        self.text = Some(i);
        let item_id = self.answer_item_id();
        let item = ConversationItem::Message {
            id: item_id.clone(),
            status: "in_progress".into(),
            role: "assistant".into(),
            content: Vec::new(),
        };
        let added = event(
            "response.output_item.added",
            ResponseStreamEvent { output_index: Some(i), item: Some(item), ..Default::default() },
        );
        out.push(self.numbered(added));
        let part = ItemContent::OutputText { text: String::new(), annotations: Vec::new() };
        let part_added = event(
            "response.content_part.added",
            ResponseStreamEvent {
                output_index: Some(i),
                content_index: Some(0),
                item_id: Some(item_id),
                part: Some(part),
                ..Default::default()
            },
        );
        out.push(self.numbered(part_added));
        i
    }

    /// The events of one of the provider's chunks (its first choice).
    pub fn chunk(&mut self, chunk: wire::CompletionChunk) -> Vec<ResponseStreamEvent> {
        let mut out = Vec::new();
        let Some(choice) = chunk.choices.into_iter().find(|c| c.index == 0) else { return out };
        if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
            let i = self.open_text(&mut out);
            let delta = event(
                "response.output_text.delta",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(self.answer_item_id()),
                    delta: Some(text),
                    logprobs: Some(Vec::new()),
                    ..Default::default()
                },
            );
            out.push(self.numbered(delta));
        }
        for call in choice.delta.tool_calls.into_iter().flatten() {
            let index = call.index.unwrap_or(0);
            let place = match self.by_index.get(&index) {
                Some(place) => *place,
                None => {
                    let name = call.function.as_ref().and_then(|f| f.name.as_deref()).unwrap_or_default();
                    let place = (!self.hidden.contains(name)).then_some(self.calls.len());
                    self.by_index.insert(index, place);
                    place
                }
            };
            let Some(n) = place else { continue };
            if n >= self.calls.len() {
                let output_index = self.next_index;
                self.next_index += 1;
                let function = call.function.clone().unwrap_or_default();
                let open = OpenCall {
                    output_index,
                    item_id: crate::app::conversations::call_item_id(self.answer, self.calls.len()),
                };
                let item = ConversationItem::FunctionCall {
                    id: open.item_id.clone(),
                    call_id: call.id.clone().unwrap_or_default(),
                    name: function.name.clone().unwrap_or_default(),
                    arguments: String::new(),
                    status: "in_progress".into(),
                };
                self.calls.push(open);
                let added = event(
                    "response.output_item.added",
                    ResponseStreamEvent {
                        output_index: Some(output_index),
                        item: Some(item),
                        ..Default::default()
                    },
                );
                out.push(self.numbered(added));
            }
            let Some(open) = self.calls.get(n.min(self.calls.len() - 1)) else { continue };
            let (output_index, item_id) = (open.output_index, open.item_id.clone());
            if let Some(piece) = call.function.and_then(|f| f.arguments).filter(|a| !a.is_empty()) {
                let delta = event(
                    "response.function_call_arguments.delta",
                    ResponseStreamEvent {
                        output_index: Some(output_index),
                        item_id: Some(item_id),
                        delta: Some(piece),
                        ..Default::default()
                    },
                );
                out.push(self.numbered(delta));
            }
        }
        out
    }

    /// Once the provider is done: the events that close the items, given the
    /// whole text and the calls streamed (a text item is opened, empty, when
    /// there was neither).
    pub fn close(&mut self, text: &str, calls: &[wire::ToolCall]) -> Vec<ResponseStreamEvent> {
        let mut out = Vec::new();
        if self.text.is_none() && self.calls.is_empty() {
            self.open_text(&mut out);
        }
        out.extend(self.close_round(text, calls));
        out
    }

    /// Closes the items an answer opened (none when it only called the
    /// server's tools), given its text and its calls that were streamed.
    pub fn close_round(&mut self, text: &str, calls: &[wire::ToolCall]) -> Vec<ResponseStreamEvent> {
        let mut out = Vec::new();
        if let Some(i) = self.text {
            let item_id = self.answer_item_id();
            let part = ItemContent::OutputText { text: text.to_owned(), annotations: Vec::new() };
            let text_done = event(
                "response.output_text.done",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(item_id.clone()),
                    text: Some(text.to_owned()),
                    logprobs: Some(Vec::new()),
                    ..Default::default()
                },
            );
            out.push(self.numbered(text_done));
            let part_done = event(
                "response.content_part.done",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(item_id.clone()),
                    part: Some(part.clone()),
                    ..Default::default()
                },
            );
            out.push(self.numbered(part_done));
            let item = ConversationItem::Message {
                id: item_id,
                status: "completed".into(),
                role: "assistant".into(),
                content: vec![part],
            };
            let item_done = event(
                "response.output_item.done",
                ResponseStreamEvent { output_index: Some(i), item: Some(item), ..Default::default() },
            );
            out.push(self.numbered(item_done));
        }
        let open = std::mem::take(&mut self.calls);
        for (open, call) in open.iter().zip(calls) {
            let args_done = event(
                "response.function_call_arguments.done",
                ResponseStreamEvent {
                    output_index: Some(open.output_index),
                    item_id: Some(open.item_id.clone()),
                    arguments: Some(call.function.arguments.clone()),
                    ..Default::default()
                },
            );
            out.push(self.numbered(args_done));
            let item = ConversationItem::FunctionCall {
                id: open.item_id.clone(),
                call_id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
                status: "completed".into(),
            };
            let item_done = event(
                "response.output_item.done",
                ResponseStreamEvent {
                    output_index: Some(open.output_index),
                    item: Some(item),
                    ..Default::default()
                },
            );
            out.push(self.numbered(item_done));
        }
        out
    }

    /// The events of a stored response as it stands (see
    /// `openai_response_get`): `start` with `head` (the response as created),
    /// then each item of `now`'s output added and done, a message's content
    /// between (its text in one delta), then the end when `now` has ended
    /// (none when it was cancelled).
    /// The events of a longer output begin with those of a shorter one, so
    /// their sequence numbers do not change as a background response goes on.
    pub fn replay(head: &ModelResponse, now: &ModelResponse, ended: bool) -> Vec<ResponseStreamEvent> {
        let mut events = Events::new(uuid::Uuid::nil());
        let mut out = events.start(head);
        for item in &now.output {
            match item {
                ConversationItem::McpListTools { .. } => {
                    out.extend(events.listed(std::slice::from_ref(item)))
                }
                ConversationItem::Message { id, role, content, .. } => {
                    let i = events.next_index;
                    events.next_index += 1;
                    let opening = ConversationItem::Message {
                        id: id.clone(),
                        status: "in_progress".into(),
                        role: role.clone(),
                        content: Vec::new(),
                    };
                    let e = ResponseStreamEvent {
                        output_index: Some(i),
                        item: Some(opening),
                        ..Default::default()
                    };
                    out.push(events.numbered(event("response.output_item.added", e)));
                    for (c, part) in content.iter().enumerate() {
                        let at = |e: ResponseStreamEvent| ResponseStreamEvent {
                            output_index: Some(i),
                            content_index: Some(c as u32),
                            item_id: Some(id.clone()),
                            ..e
                        };
                        let empty = match part {
                            ItemContent::OutputText { .. } => {
                                ItemContent::OutputText { text: String::new(), annotations: Vec::new() }
                            }
                            other => other.clone(),
                        };
                        let added = at(ResponseStreamEvent { part: Some(empty), ..Default::default() });
                        out.push(events.numbered(event("response.content_part.added", added)));
                        if let ItemContent::OutputText { text, .. } = part {
                            let delta = at(ResponseStreamEvent {
                                delta: Some(text.clone()),
                                logprobs: Some(Vec::new()),
                                ..Default::default()
                            });
                            out.push(events.numbered(event("response.output_text.delta", delta)));
                            let done = at(ResponseStreamEvent {
                                text: Some(text.clone()),
                                logprobs: Some(Vec::new()),
                                ..Default::default()
                            });
                            out.push(events.numbered(event("response.output_text.done", done)));
                        }
                        let done = at(ResponseStreamEvent { part: Some(part.clone()), ..Default::default() });
                        out.push(events.numbered(event("response.content_part.done", done)));
                    }
                    let e = ResponseStreamEvent {
                        output_index: Some(i),
                        item: Some(item.clone()),
                        ..Default::default()
                    };
                    out.push(events.numbered(event("response.output_item.done", e)));
                }
                other => out.extend(events.ran(vec![other.clone()])),
            }
        }
        // OpenAI's events have none for a cancelled response: its stream just ends.
        if ended && now.status != "cancelled" {
            let kind = match now.status.as_str() {
                "incomplete" => "response.incomplete",
                "failed" => "response.failed",
                _ => "response.completed",
            };
            let e = ResponseStreamEvent { response: Some(Box::new(now.clone())), ..Default::default() };
            out.push(events.numbered(event(kind, e)));
        }
        out
    }

    /// `response.completed` (or `response.incomplete`, as its status says),
    /// with the response as saved.
    pub fn completed(&mut self, response: ModelResponse) -> ResponseStreamEvent {
        let kind = if response.status == "incomplete" { "response.incomplete" } else { "response.completed" };
        let e = event(kind, ResponseStreamEvent { response: Some(Box::new(response)), ..Default::default() });
        self.numbered(e)
    }

    /// What ends a stream that failed: `response` (`failed`) and the next sequence number.
    pub fn failed(&mut self, error: Error, response: ModelResponse) -> StreamFailure {
        let sequence_number = self.seq;
        self.seq += 1;
        StreamFailure { error, response, sequence_number }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(v: serde_json::Value) -> wire::CompletionChunk {
        serde_json::from_value(v).unwrap()
    }

    fn response() -> ModelResponse {
        let head = super::super::Head {
            id: uuid::Uuid::nil(),
            created_at: chrono::Utc::now(),
            model: "m".into(),
            instructions: None,
            previous_response_id: None,
            conversation: None,
            temperature: 1.0,
            top_p: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            top_logprobs: 0,
            max_output_tokens: None,
            max_tool_calls: None,
            tools: Vec::new(),
            tool_choice: json!("auto"),
            parallel_tool_calls: true,
            text: Default::default(),
            reasoning: None,
            truncation: Default::default(),
            service_tier: "default".into(),
            safety_identifier: None,
            prompt_cache_key: None,
            user: None,
            store: true,
            metadata: Default::default(),
            background: false,
        };
        super::super::model_response(&head, super::super::Status::InProgress, Vec::new(), None)
    }

    fn kinds(events: &[ResponseStreamEvent]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    fn run(chunks: Vec<serde_json::Value>, text: &str, calls: &[wire::ToolCall]) -> Vec<ResponseStreamEvent> {
        let mut events = Events::new(uuid::Uuid::nil());
        let mut out = events.start(&response());
        for c in chunks {
            out.extend(events.chunk(chunk(c)));
        }
        out.extend(events.close(text, calls));
        out.push(events.completed(response()));
        out
    }

    #[test]
    fn text_opens_one_item_and_every_event_is_numbered_in_order() {
        let out = run(
            vec![
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
                json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
            ],
            "Hello",
            &[],
        );
        assert_eq!(
            kinds(&out),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let seqs: Vec<u64> = out.iter().map(|e| e.sequence_number).collect();
        assert_eq!(seqs, (0..out.len() as u64).collect::<Vec<_>>());
        assert_eq!(out[4].delta.as_deref(), Some("Hel"));
        assert_eq!(out[6].text.as_deref(), Some("Hello"));
        assert!(out[2..9].iter().all(|e| e.output_index == Some(0)));
    }

    #[test]
    fn calls_open_their_own_items_after_the_text_and_close_with_their_whole_arguments() {
        let call = |id: &str, name: &str, args: &str| wire::ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: wire::FunctionCall { name: name.into(), arguments: args.into() },
        };
        let out = run(
            vec![
                json!({"choices": [{"index": 0, "delta": {"content": "Checking."}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"ci"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\":1}"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}}]}}]}),
                // another choice than the first is not streamed
                json!({"choices": [{"index": 1, "delta": {"content": "ignored"}}]}),
            ],
            "Checking.",
            &[call("c1", "weather", "{\"city\":1}"), call("c2", "time", "{}")],
        );
        assert_eq!(
            kinds(&out),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert_eq!(out[5].output_index, Some(1));
        assert_eq!(out[8].output_index, Some(2));
        assert_eq!(out[13].arguments.as_deref(), Some("{\"city\":1}"));
        let ids: Vec<_> = [5, 8].iter().map(|&i| out[i].item.as_ref().unwrap().id().to_owned()).collect();
        assert_ne!(ids[0], ids[1], "each call is its own item");
    }

    #[test]
    fn an_answer_with_nothing_still_has_an_empty_text_item_and_a_failure_takes_the_next_number() {
        let mut events = Events::new(uuid::Uuid::nil());
        let mut out = events.start(&response());
        out.extend(events.close("", &[]));
        assert_eq!(
            kinds(&out)[2..],
            [
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
            ]
        );
        let failure = events.failed(Error::Upstream("gone".into()), response());
        assert_eq!(failure.sequence_number, out.len() as u64);
    }
}
