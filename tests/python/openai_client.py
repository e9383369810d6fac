"""OpenAI's own Python package (pinned in .ci/requirements.txt) against the
service's OpenAI-compatible routes (`/v1`), the model provider being the tests'
fake upstream (its default answer echoes the last user message; a last
message `call <tool> <arguments>` calls that tool; a tool result is answered
`the tool answered: <result>`).

Checks the model list, chat completions with an agent as the model and with a
provider's model name, streamed and not, a function-tool round trip,
conversations and their items (read back through `/api` as sessions and
messages), responses chained by `previous_response_id`, with a function tool
and streamed (typed events in order), an MCP server's tools run by the server
(listed, called, one behind an approval given in the next response's input,
streamed with its typed events), and that the package's typed errors come out
of our error answers.

Usage: python openai_client.py BASE_URL API_KEY MCP_URL
(MCP_URL: the tests' fake MCP server, `fake-mcp`; its host allowed in `tools.allowed_hosts`).
(`bash .ci/openai-client` starts the fake and the server and runs this).
"""

import json
import sys
import time
import urllib.request
import uuid

import openai
from openai import OpenAI


def api(base, key, method, path, body=None):
    """A request to the service's own `/api` routes."""
    req = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def mcp_checks(client, agent, mcp_url):
    """An MCP server's tools through the package's typed items and events."""
    fake = {"type": "mcp", "server_label": "fake", "server_url": mcp_url, "allowed_tools": ["echo", "add"]}
    ran = client.responses.create(model=agent["id"], tools=[{**fake, "require_approval": "never"}],
                                  input='call echo {"text": "from python"}')
    kinds = [item.type for item in ran.output]
    expect(kinds == ["mcp_list_tools", "mcp_call", "message"], f"listed, called, answered: {kinds}")
    listed, call = ran.output[0], ran.output[1]
    expect([t.name for t in listed.tools] == ["echo", "add"] and listed.server_label == "fake", "the allowed tools listed")
    expect(call.name == "echo" and call.output == "from python" and call.server_label == "fake", "the call ran in the server")
    expect(ran.output_text == "the tool answered: from python", "the model read its output")

    asked = client.responses.create(model=agent["id"], tools=[fake], input='call add {"a": 20, "b": 22}')
    request = asked.output[-1]
    expect(request.type == "mcp_approval_request" and request.name == "add", "add waits for approval (the default)")
    with client.responses.stream(
        model=agent["id"], tools=[fake], previous_response_id=asked.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    expect("response.mcp_call.completed" in kinds and "response.mcp_list_tools.completed" in kinds,
           "typed mcp events in the stream")
    calls = [item for item in final.output if item.type == "mcp_call"]
    expect(len(calls) == 1 and calls[0].output == "42", "approved: the call ran, 42")
    expect(final.output_text == "the tool answered: 42", "the model read it")


def background_checks(client, agent, mcp_url):
    """A background response through the package: queued, followed, polled, re-attached, cancelled."""
    fake = {"type": "mcp", "server_label": "fake", "server_url": mcp_url, "require_approval": "never"}
    queued = client.responses.create(model=agent["id"], tools=[{**fake, "allowed_tools": ["echo"]}],
                                     input='call echo {"text": "in the background"}', background=True)
    expect(queued.status == "queued" and queued.background, f"background: queued at once ({queued.status})")
    events = list(client.responses.retrieve(queued.id, stream=True))
    expect(events[0].type == "response.created" and events[-1].type == "response.completed",
           f"followed to its end: {[e.type for e in events]}")
    done = client.responses.retrieve(queued.id)
    expect(done.status == "completed" and done.output_text == "the tool answered: in the background",
           "polled: completed, the tool's answer read")
    expect([i.type for i in done.output] == ["mcp_list_tools", "mcp_call", "message"], "its items")
    again = list(client.responses.retrieve(queued.id, stream=True, starting_after=3))
    expect([e.sequence_number for e in again] == [e.sequence_number for e in events[4:]],
           "re-attached after event 3: the same events, the same numbers")

    slow = client.responses.create(model=agent["id"], tools=[{**fake, "allowed_tools": ["slow"]}],
                                   input='call slow {"ms": 60000}', background=True)
    calls = mcp_url.removesuffix("/mcp") + "/calls"
    deadline = time.time() + 20
    while json.load(urllib.request.urlopen(calls))["tools"].get("slow", 0) < 1:
        if time.time() > deadline:
            raise AssertionError("the slow call did not begin within 20 s")
        time.sleep(0.02)
    cancelled = client.responses.cancel(slow.id)
    expect(cancelled.status == "cancelled", f"cancelled mid-call ({cancelled.status})")
    expect(client.responses.retrieve(slow.id).status == "cancelled", "and stays cancelled")


def main(base, key, mcp_url):
    agent = api(base, key, "POST", "/api/agents", {"name": "Ada", "instructions": ["Be brief."]})
    tool = {"name": "get_weather", "type": "function", "description": "The weather in a city",
            "function": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    api(base, key, "POST", f"/api/agents/{agent['id']}/tools", tool)

    # Three lines, as the README says.
    client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)

    models = [m.id for m in client.models.list()]
    expect(agent["id"] in models, f"GET /v1/models lists the agent ({len(models)} models)")

    answer = client.chat.completions.create(
        model=agent["id"], messages=[{"role": "user", "content": "hello from python"}]
    )
    expect(answer.object == "chat.completion", "a chat.completion")
    expect(answer.choices[0].message.content == "hello from python", "the agent answered (echo)")
    expect(answer.choices[0].finish_reason == "stop", "finish_reason stop")
    expect(answer.usage.total_tokens > 0, f"usage {answer.usage.total_tokens} tokens")

    proxied = client.chat.completions.create(
        model="any-provider-model", messages=[{"role": "user", "content": "proxied text"}], temperature=0.2
    )
    expect(proxied.choices[0].message.content == "proxied text", "a provider's model name is proxied")

    chunks = list(
        client.chat.completions.create(
            model=agent["id"],
            messages=[{"role": "user", "content": "one two three"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expect(text == "one two three", f"streamed text in {len(chunks)} chunks")
    expect(chunks[-1].usage is not None and not chunks[-1].choices, "the last chunk carries the usage")

    # A function tool round trip: the agent's tool, called, answered.
    messages = [{"role": "user", "content": 'call get_weather {"city": "Paris"}'}]
    called = client.chat.completions.create(model=agent["id"], messages=messages)
    choice = called.choices[0]
    expect(choice.finish_reason == "tool_calls", "the model calls the agent's tool")
    call = choice.message.tool_calls[0]
    expect(call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"},
           "the call names the tool with its arguments")
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    final = client.chat.completions.create(model=agent["id"], messages=messages)
    expect(final.choices[0].message.content == "the tool answered: sunny", "the tool's result reached the model")

    # Streamed tool calls are put together by the package.
    with client.chat.completions.stream(
        model=agent["id"], messages=[{"role": "user", "content": 'call get_weather {"city": "Oslo"}'}]
    ) as stream:
        done = stream.get_final_completion()
    streamed_call = done.choices[0].message.tool_calls[0]
    expect(streamed_call.function.name == "get_weather" and json.loads(streamed_call.function.arguments)
           == {"city": "Oslo"}, "a streamed tool call, assembled by the package")

    # Conversations are sessions; their items are the session's messages.
    conv = client.conversations.create(
        metadata={"topic": "trip"},
        items=[
            {"type": "message", "role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": "Plan a trip"},
        ],
    )
    expect(conv.object == "conversation" and conv.metadata == {"topic": "trip"}, "a conversation created")
    expect(conv.id.startswith("conv_") and len(conv.id) == 37, f"a conversation id in OpenAI's form: {conv.id}")
    session_id = str(uuid.UUID(hex=conv.id.removeprefix("conv_")))
    session = api(base, key, "GET", f"/api/sessions/{session_id}")
    expect(session["id"] == session_id, "the conversation is a session at /api/sessions/{id}")
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Lyon"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "rainy"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Take an umbrella."}]},
        ],
    )
    expect([i.type for i in added.data] == ["function_call", "function_call_output", "message"], "items appended")
    # Paged by the package's cursor iterator, two at a time, oldest first.
    items = list(client.conversations.items.list(conv.id, order="asc", limit=2))
    expect([i.type for i in items] == ["message", "message", "function_call", "function_call_output", "message"],
           f"{len(items)} items read back in pages of 2")
    expect(items[4].content[0].text == "Take an umbrella.", "the assistant's text")
    one = client.conversations.items.retrieve(items[2].id, conversation_id=conv.id)
    expect(one.type == "function_call" and one.name == "get_weather", "one item by id")
    messages = api(base, key, "GET", f"/api/sessions/{session_id}/messages?direction=asc")["items"]
    expect([m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"],
           "the items are the session's messages")
    client.conversations.items.delete(items[4].id, conversation_id=conv.id)
    expect(len(list(client.conversations.items.list(conv.id))) == 4, "an item deleted")
    updated = client.conversations.update(conv.id, metadata={"topic": "holiday"})
    expect(updated.metadata == {"topic": "holiday"}, "metadata replaced")
    expect(client.conversations.retrieve(conv.id).metadata == {"topic": "holiday"}, "and read back")
    deleted = client.conversations.delete(conv.id)
    expect(deleted.deleted and deleted.id == conv.id, "the conversation deleted")
    try:
        client.conversations.retrieve(conv.id)
        raise AssertionError("a deleted conversation answered")
    except openai.NotFoundError:
        expect(True, "a deleted conversation: NotFoundError")

    # Responses: three turns chained by previous_response_id, one session.
    r1 = client.responses.create(model=agent["id"], input="My name is Bob.")
    expect(r1.status == "completed" and r1.output_text == "My name is Bob.", "a response (echo)")
    r2 = client.responses.create(model=agent["id"], input="What is my name?", previous_response_id=r1.id)
    r3 = client.responses.create(model=agent["id"], input="Thanks.", previous_response_id=r2.id)
    expect(r3.previous_response_id == r2.id, "three turns chained")
    stored = client.responses.retrieve(r2.id)
    expect(stored.id == r2.id and stored.output_text == "What is my name?", "a stored response read back")
    inputs = list(client.responses.input_items.list(r3.id))
    expect([i.content[0].text for i in inputs] == ["Thanks."], "its input items")
    sessions = api(base, key, "GET", "/api/sessions?limit=1000")["items"]
    chain = [s for s in sessions if s["agents"] == [agent["id"]]]
    expect(len(chain) == 1, "the chain is one session of the agent")
    texts = [m["content"] for m in api(base, key, "GET", f"/api/sessions/{chain[0]['id']}/messages?direction=asc")["items"]]
    expect(texts == ["My name is Bob.", "My name is Bob.", "What is my name?", "What is my name?", "Thanks.", "Thanks."],
           "its messages are the three turns")

    # A function-tool round trip through responses.
    tools = [{"type": "function", "name": "get_time", "description": "The time in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    called = client.responses.create(model="any-provider-model", tools=tools, input='call get_time {"city": "Oslo"}')
    call = called.output[0]
    expect(call.type == "function_call" and call.name == "get_time", "the model calls the request's tool")
    answered = client.responses.create(
        model="any-provider-model", tools=tools, previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "noon"}],
    )
    expect(answered.output_text == "the tool answered: noon", "the call's output reached the model")

    # Streaming: typed events in order, sequence numbers from 0.
    with client.responses.stream(model=agent["id"], input="stream these words") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    expect(kinds[0] == "response.created" and kinds[-1] == "response.completed", f"{len(events)} events, created first, completed last")
    expect([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers 0, 1, 2, ...")
    expect("".join(e.delta for e in events if e.type == "response.output_text.delta") == "stream these words",
           "text deltas")
    expect(final.output_text == "stream these words" and client.responses.retrieve(final.id).id == final.id,
           "the final response, stored")

    # A response appended to a conversation, read back through /api.
    conv2 = client.conversations.create()
    client.responses.create(model=agent["id"], conversation=conv2.id, input="In the conversation.")
    texts = [m["content"] for m in api(base, key, "GET", f"/api/sessions/{uuid.UUID(hex=conv2.id.removeprefix('conv_'))}/messages?direction=asc")["items"]]
    expect(texts == ["In the conversation.", "In the conversation."], "the turn is in the conversation's session")
    client.responses.delete(r3.id)
    try:
        client.responses.retrieve(r3.id)
        raise AssertionError("a deleted response answered")
    except openai.NotFoundError:
        expect(True, "a deleted response: NotFoundError")

    mcp_checks(client, agent, mcp_url)
    background_checks(client, agent, mcp_url)

    # Our errors, as the package's typed exceptions.
    try:
        client.chat.completions.create(model=str(uuid.uuid4()), messages=[{"role": "user", "content": "x"}])
        raise AssertionError("an unknown agent id answered")
    except openai.NotFoundError as e:
        expect(e.code == "not_found", f"unknown agent id: NotFoundError ({e.message})")
    try:
        client.chat.completions.create(model=agent["id"], messages=[{"role": "user", "content": "x"}], n=3)
        raise AssertionError("n=3 answered")
    except openai.BadRequestError as e:
        expect(e.param == "n", f"n=3: BadRequestError naming param n ({e.message})")
    try:
        client.chat.completions.create(model=agent["id"], messages=[{"role": "user", "content": "x"}], temperature=7)
        raise AssertionError("temperature=7 answered")
    except openai.BadRequestError as e:
        expect(e.param == "temperature", f"temperature=7: BadRequestError naming param temperature")
    try:
        OpenAI(base_url=base + "/v1", api_key="ap_not_a_key", max_retries=0).models.list()
        raise AssertionError("a wrong key answered")
    except openai.AuthenticationError as e:
        expect(e.code == "unauthorized", "a wrong key: AuthenticationError")
    print("openai package: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3])
