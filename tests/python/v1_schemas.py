"""Checks every /v1 answer the end-to-end tests received against published types.

The e2e tests append each /v1 answer they receive to a file when
AGENT_PLATFORM_TEST_RECORD_V1 names it (tests/src/record.rs). This script reads
those files and validates every answer:

- /v1/responses (a response, each streamed event, compaction) against the Open
  Responses specification's pydantic models (PyPI `openresponses-types`);
- every other route (chat completions and their chunks, conversations and
  their items, input items, models, embeddings) against OpenAI's own models
  (the `openai` package's types);
- every error against OpenAI's error shape, `{"error": {message, type, param, code}}`.

The Open Responses specification has no server-run tools: a response's
`mcp_list_tools`, `mcp_call`, `mcp_approval_request` and `file_search_call`
items, its `mcp` and `file_search` tools, and the `response.mcp_*` and
`response.file_search_call.*` events are checked against OpenAI's types
instead (the rest of the response against the specification's).

A field the type does not have is an error too (the models ignore or keep
extra fields; this walks each answer beside its validated model), except the
few listed in ALLOWED_EXTRA, each an extension that OpenAI's API has and the
Open Responses specification does not. A route or event with no type here is
an error: a new route must say which type it answers.

    python tests/python/v1_schemas.py RECORD.jsonl [RECORD.jsonl ...]
"""

import base64
import enum
import json
import re
import struct
import sys
from collections import Counter
from typing import Any

import openresponses_types as ort
from openai.types import CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.conversations import Conversation, ConversationDeletedResource, ConversationItem, ConversationItemList
from openai.types.responses import ResponseItemList, ResponseOutputItem, ResponseStreamEvent, Tool
from pydantic import BaseModel, RootModel, TypeAdapter

# (type name, field): fields a type may carry beyond its published ones.
ALLOWED_EXTRA = {
    # OpenAI's Response has `conversation` (the conversation a turn was appended to);
    # the Open Responses specification does not have conversations.
    ("ResponseResource", "conversation"),
    # OpenAI's Response echoes `user` (the request's end-user id, which OpenAI
    # keeps beside `safety_identifier`); the specification has only the latter.
    ("ResponseResource", "user"),
}

ID = r"(?:[^/?]+)"


def extras(model, raw, where):
    """Fields of `raw` that the validated `model` has no field for, as dotted paths."""
    found = []
    if isinstance(model, RootModel):
        return extras(model.root, raw, where)
    if isinstance(model, BaseModel) and isinstance(raw, dict):
        fields = {}
        for name, info in type(model).model_fields.items():
            fields[info.alias or name] = name
            fields[name] = name
        for key, value in raw.items():
            if key not in fields:
                if (type(model).__name__, key) not in ALLOWED_EXTRA:
                    found.append(f"{where}.{key} (not a field of {type(model).__name__})")
                continue
            found += extras(getattr(model, fields[key]), value, f"{where}.{key}")
    elif isinstance(model, (list, tuple)) and isinstance(raw, list):
        for i, (m, r) in enumerate(zip(model, raw)):
            found += extras(m, r, f"{where}[{i}]")
    elif isinstance(model, dict) and isinstance(raw, dict):
        for key, value in raw.items():
            if key in model:
                found += extras(model[key], value, f"{where}.{key}")
    return found


def check(kind, raw, where):
    """Validates `raw` as `kind` (a pydantic model or a TypeAdapter); returns the problems."""
    if isinstance(raw, dict) and raw.get("object") == "list" and raw.get("data") == []:
        # An empty page has no first or last item: OpenAI answers null for both,
        # where its package's list types say string.
        if raw.get("first_id") is None and raw.get("last_id") is None:
            raw = {**raw, "first_id": "", "last_id": ""}
    try:
        model = kind.validate_python(raw) if isinstance(kind, TypeAdapter) else kind.model_validate(raw)
    except Exception as e:  # pydantic's ValidationError, or a type error of a union
        return [f"{where}: not a valid {getattr(kind, '__name__', kind)}: {e}"]
    return extras(model, raw, where)


# A defect of openresponses-types 2.4.0: the `schema` of a json_schema text
# format is generated as `None` (the specification's free-form object became
# "null only"), so every real schema fails. The field is given the type the
# specification means, an object or null.
ort.JsonSchemaResponseFormat.model_fields["schema_"].annotation = dict[str, Any] | None
ort.JsonSchemaResponseFormat.model_rebuild(force=True)
for _name in [n for _ in range(3) for n in dir(ort)]:  # thrice: each after the models it uses
    _cls = getattr(ort, _name)
    if (
        isinstance(_cls, type)
        and issubclass(_cls, BaseModel)
        and _cls.__module__ == "openresponses_types.types"
        and _cls is not ort.JsonSchemaResponseFormat
    ):
        _cls.model_rebuild(force=True)

# The Open Responses events, by their `type` (each an enum of one value).
RESPONSE_EVENTS = {}
for _name in dir(ort):
    _cls = getattr(ort, _name)
    if isinstance(_cls, type) and issubclass(_cls, BaseModel) and _name.endswith("StreamingEvent"):
        _type = _cls.model_fields.get("type")
        if _type is not None and isinstance(_type.annotation, type) and issubclass(_type.annotation, enum.Enum):
            for member in _type.annotation:
                RESPONSE_EVENTS[member.value] = _cls


# What the Open Responses specification lacks, checked with OpenAI's types.
FOREIGN_ITEMS = {"mcp_list_tools", "mcp_call", "mcp_approval_request", "file_search_call"}
FOREIGN_TOOLS = {"mcp", "file_search"}
OPENAI_ITEM = TypeAdapter(ResponseOutputItem)
OPENAI_TOOL = TypeAdapter(Tool)
OPENAI_EVENT = TypeAdapter(ResponseStreamEvent)


def response(body, where):
    """A response: its foreign items and tools with OpenAI's types, the rest with the specification's."""
    problems = []
    if isinstance(body, dict):
        output, tools = [], []
        for i, item in enumerate(body.get("output") or []):
            if isinstance(item, dict) and item.get("type") in FOREIGN_ITEMS:
                problems += check(OPENAI_ITEM, item, f"{where}.output[{i}]")
            else:
                output.append(item)
        for i, tool in enumerate(body.get("tools") or []):
            if isinstance(tool, dict) and tool.get("type") in FOREIGN_TOOLS:
                problems += check(OPENAI_TOOL, tool, f"{where}.tools[{i}]")
            else:
                tools.append(tool)
        if "output" in body:
            body = {**body, "output": output}
        if "tools" in body:
            body = {**body, "tools": tools}
    return problems + check(ort.ResponseResource, body, where)


def response_event(data, where):
    if not isinstance(data, dict):
        return [f"{where}: no Open Responses event: {data!r}"]
    foreign_item = isinstance(data.get("item"), dict) and data["item"].get("type") in FOREIGN_ITEMS
    if data.get("type", "").startswith(("response.mcp_", "response.file_search_call.")) or foreign_item:
        return check(OPENAI_EVENT, data, where)
    if isinstance(data.get("response"), dict):
        problems = response(data["response"], f"{where}.response")
        shell = {**data, "response": {**data["response"], "output": [], "tools": []}}
        return problems + response_event_plain(shell, where)
    return response_event_plain(data, where)


def response_event_plain(data, where):
    if not isinstance(data, dict) or data.get("type") not in RESPONSE_EVENTS:
        return [f"{where}: no Open Responses event of type {data.get('type') if isinstance(data, dict) else data!r}"]
    return check(RESPONSE_EVENTS[data["type"]], data, where)


def socket_message(data, where):
    """A message of the WebSocket mode: a response's event, or an error message."""
    if isinstance(data, dict) and data.get("type") == "error":
        return check(ort.WebSocketErrorEvent, data, where)
    return response_event(data, where)


def chat_chunk(data, where):
    if data == "[DONE]":
        return []
    if isinstance(data, dict) and "error" in data and "choices" not in data:
        return error_shape(data, where)
    return check(ChatCompletionChunk, data, where)


def error_shape(body, where):
    if not isinstance(body, dict) or set(body) != {"error"}:
        return [f"{where}: an error is {{\"error\": ...}}, got {json.dumps(body)[:200]}"]
    detail = body["error"]
    if not isinstance(detail, dict) or set(detail) != {"message", "type", "param", "code"}:
        return [f"{where}: an error has message, type, param and code, got {json.dumps(detail)[:200]}"]
    if not isinstance(detail["message"], str) or not isinstance(detail["type"], str):
        return [f"{where}: an error's message and type are strings: {json.dumps(detail)[:200]}"]
    return []


def sse_events(text):
    """The `data:` of each event of a stream read whole, as JSON where it parses."""
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if data:
            joined = "\n".join(data)
            try:
                events.append(json.loads(joined))
            except ValueError:
                events.append(joined)
    return events


def models_list(body, where):
    if not isinstance(body, dict) or body.get("object") != "list" or set(body) != {"object", "data"}:
        return [f"{where}: a model list is {{object: list, data}}: {json.dumps(body)[:200]}"]
    return [p for i, m in enumerate(body["data"]) for p in check(Model, m, f"{where}.data[{i}]")]


def response_deleted(body, where):
    if body != {"id": body.get("id"), "object": "response.deleted", "deleted": True}:
        return [f"{where}: a deleted response is {{id, object: response.deleted, deleted: true}}"]
    return []


def embeddings(body, where):
    """An embedding list; a base64 vector (`encoding_format: base64`) is decoded
    first, as the openai package does before it builds its model."""
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        data = []
        for item in body["data"]:
            if isinstance(item, dict) and isinstance(item.get("embedding"), str):
                raw = base64.b64decode(item["embedding"])
                if len(raw) % 4:
                    return [f"{where}: a base64 embedding is little-endian float32s, got {len(raw)} bytes"]
                item = {**item, "embedding": list(struct.unpack(f"<{len(raw) // 4}f", raw))}
            data.append(item)
        body = {**body, "data": data}
    return check(CreateEmbeddingResponse, body, where)


def response_or_stream(body, where):
    if isinstance(body, str):
        return [p for i, e in enumerate(sse_events(body)) for p in response_event(e, f"{where} event {i}")]
    return response(body, where)


def chat_or_stream(body, where):
    if isinstance(body, str):
        return [p for i, e in enumerate(sse_events(body)) for p in chat_chunk(e, f"{where} chunk {i}")]
    return check(ChatCompletion, body, where)


ITEM = TypeAdapter(ConversationItem)

# (method, path pattern) -> the check of a 2xx answer's body.
ROUTES = [
    ("POST", r"/v1/responses", response_or_stream),
    ("POST", r"/v1/responses/compact", lambda b, w: check(ort.CompactResource, b, w)),
    ("GET", rf"/v1/responses/{ID}", response_or_stream),
    ("DELETE", rf"/v1/responses/{ID}", response_deleted),
    ("GET", rf"/v1/responses/{ID}/input_items", lambda b, w: check(ResponseItemList, b, w)),
    ("POST", rf"/v1/responses/{ID}/cancel", response),
    ("POST", r"/v1/chat/completions", chat_or_stream),
    ("POST", r"/v1/conversations", lambda b, w: check(Conversation, b, w)),
    ("GET", rf"/v1/conversations/{ID}", lambda b, w: check(Conversation, b, w)),
    ("POST", rf"/v1/conversations/{ID}", lambda b, w: check(Conversation, b, w)),
    ("DELETE", rf"/v1/conversations/{ID}", lambda b, w: check(ConversationDeletedResource, b, w)),
    ("GET", rf"/v1/conversations/{ID}/items", lambda b, w: check(ConversationItemList, b, w)),
    ("POST", rf"/v1/conversations/{ID}/items", lambda b, w: check(ConversationItemList, b, w)),
    ("GET", rf"/v1/conversations/{ID}/items/{ID}", lambda b, w: check(ITEM, b, w)),
    ("DELETE", rf"/v1/conversations/{ID}/items/{ID}", lambda b, w: check(Conversation, b, w)),
    ("GET", r"/v1/models", models_list),
    ("GET", rf"/v1/models/{ID}", lambda b, w: check(Model, b, w)),
    ("POST", r"/v1/embeddings", embeddings),
]

# Path pattern -> the check of one event of a stream read event by event.
STREAMS = [
    (r"/v1/responses", response_event),
    (r"/v1/responses#socket", socket_message),
    (rf"/v1/responses/{ID}", response_event),
    (r"/v1/chat/completions", chat_chunk),
]


def check_record(record, where):
    path = record["path"].split("?")[0]
    status = record["status"]
    if "event" in record:
        if status >= 400:
            return error_shape(record["data"], where)
        for pattern, checker in STREAMS:
            if re.fullmatch(pattern, path):
                return checker(record["data"], where)
        return [f"{where}: no type known for events of {path}"]
    if status >= 400:
        return error_shape(record["body"], where)
    for method, pattern, checker in ROUTES:
        if record["method"] == method and re.fullmatch(pattern, path):
            return checker(record["body"], where)
    return [f"{where}: no type known for {record['method']} {path}"]


def main(paths):
    problems, seen = [], Counter()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                record = json.loads(line)
                route = re.sub(r"/(?:resp|conv|msg|fc)_[0-9a-f_]+|/[0-9a-fA-F-]{36}", "/{id}", record["path"].split("?")[0])
                seen[(record["method"] or "stream", route, "event" if "event" in record else record["status"])] += 1
                problems += check_record(record, f"{path}:{n} {record['method'] or ''} {record['path']}".strip())
    for (method, route, status), n in sorted(seen.items(), key=str):
        print(f"{n:6} {method} {route} {status}")
    total = sum(seen.values())
    if not total:
        print("no /v1 answers were recorded: nothing was checked")
        return 1
    for p in problems[:200]:
        print("FAIL", p)
    unique = len(set(problems))
    print(f"{total} recorded /v1 answers and events checked: {unique} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
