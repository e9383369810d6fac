"""The OpenAI Agents SDK (PyPI `openai-agents`, pinned in .ci/requirements.txt)
against the service's `/v1` routes, the model provider being the tests' fake
upstream (its default answer echoes the last user message; a last message
`call <tool> <arguments>` calls that tool; a tool result is answered `the tool
answered: <result>`; with a json_schema response format it answers the JSON
object of the schema's properties, strings being the message's text and
integers its length).

Checks, each through the SDK's Runner on the Responses API: a plain answer; a
function-tool round trip (the SDK runs the tool, the server carries the call
and its output); structured output (`output_type`: the schema must reach the
model for the answer to parse); a chain by `previous_response_id` (read back
from the server); and `OpenAIConversationsSession` (a conversation whose items
the SDK reads back).

Usage: python agents_sdk.py BASE_URL API_KEY
(`bash .ci/agents-sdk` starts the fake and the server and runs this).
"""

import asyncio
import json
import sys
import urllib.request

from agents import (
    Agent,
    OpenAIConversationsSession,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel


def api(base, key, method, path):
    req = urllib.request.Request(base + path, method=method, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Answer(BaseModel):
    answer: str
    letters: int


async def main(base, key):
    client = AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("responses")
    set_tracing_disabled(True)
    model = "fake-chat"

    agent = Agent(name="assistant", model=model, tools=[get_weather])
    r = await Runner.run(agent, "hello from the agents sdk")
    expect(r.final_output == "hello from the agents sdk", f"a plain answer: {r.final_output!r}")

    r = await Runner.run(agent, 'call get_weather {"city": "Paris"}')
    expect(
        r.final_output == "the tool answered: sunny in Paris",
        f"a tool round trip, the SDK running the tool: {r.final_output!r}",
    )

    typed = Agent(name="typed", model=model, output_type=Answer)
    r = await Runner.run(typed, "forty-two")
    expect(
        r.final_output == Answer(answer="forty-two", letters=9),
        f"structured output: the schema reached the model: {r.final_output!r}",
    )

    first = await Runner.run(agent, "My name is Ann.")
    second = await Runner.run(agent, "What is my name?", previous_response_id=first.last_response_id)
    stored = api(base, key, "GET", f"/v1/responses/{second.last_response_id}")
    expect(
        stored["previous_response_id"] == first.last_response_id and stored["status"] == "completed",
        "previous_response_id: the second response continues the first",
    )

    session = OpenAIConversationsSession(openai_client=client)
    await Runner.run(agent, "first turn", session=session)
    r = await Runner.run(agent, "second turn", session=session)
    items = await session.get_items()
    texts = [i["content"] if isinstance(i.get("content"), str) else i["content"][0]["text"] for i in items]
    expect(r.final_output == "second turn", "a session's second turn")
    expect(
        texts == ["first turn", "first turn", "second turn", "second turn"],
        f"OpenAIConversationsSession reads back the conversation's items: {texts}",
    )
    conversation = await session._get_session_id()
    expect(conversation.startswith("conv_"), f"the session is a conversation of the service: {conversation}")
    print("agents sdk: all checks passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
