"""Seeds records for .ci/fuzz and prints the schemathesis config that uses them.

Usage: python fuzz_seed.py BASE_URL API_KEY > seeded.toml

Creates, through the API, one of each record with an id in a path (a user, an
agent, a session of both with a message, a document of each, a tool and a
task of the agent, an execution of another task, run to its end, and its first
transition, a secret), then prints TOML `[dictionaries]` of their ids and
`[[operations]]` that draw ids from them half of the time (path ids, and the
participants of sessions and chats), so that the fuzzer's valid cases reach
real records (chat on a real session, a document that exists, ...) instead
of 404s. DELETE operations are left out, so the
records stay for the whole run (the stateful phase deletes what it created,
following the spec's links).
"""

import json
import sys
import time
import urllib.request


def call(base: str, key: str, method: str, path: str, body: "dict | None") -> dict:
    req = urllib.request.Request(
        base + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def main() -> None:
    base, key = sys.argv[1], sys.argv[2]
    user = call(base, key, "POST", "/api/users", {"name": "Ada Lovelace", "about": "seeded by .ci/fuzz"})["id"]
    agent = call(base, key, "POST", "/api/agents", {"name": "Helper", "instructions": ["Be brief."]})["id"]
    session = call(base, key, "POST", "/api/sessions", {"agent": agent, "user": user})["id"]
    call(base, key, "POST", f"/api/sessions/{session}/messages", {"role": "user", "content": "Hello"})
    doc = {"title": "Notes", "content": ["The analytical engine weaves algebraic patterns."]}
    agent_doc = call(base, key, "POST", f"/api/agents/{agent}/docs", doc)["id"]
    user_doc = call(base, key, "POST", f"/api/users/{user}/docs", doc)["id"]
    tool = call(
        base,
        key,
        "POST",
        f"/api/agents/{agent}/tools",
        {"name": "lookup", "type": "function", "function": {"description": "Looks a word up."}},
    )["id"]
    task = call(
        base,
        key,
        "PUT",
        f"/api/agents/{agent}/tasks",
        {"name": "greet", "main": [{"prompt": "Say hello."}]},
    )["id"]
    # An execution that has ended: its transitions' stream ends at once (one
    # still running would hold a stream open until the fuzzer's timeout).
    counting = call(base, key, "POST", f"/api/agents/{agent}/tasks", {"name": "count", "main": [{"evaluate": {"n": 1}}]})
    execution = call(base, key, "POST", f"/api/tasks/{counting['id']}/executions", {"input": {}})["id"]
    deadline = time.monotonic() + 30
    while call(base, key, "GET", f"/api/executions/{execution}", None)["status"] != "succeeded":
        if time.monotonic() > deadline:
            sys.exit(f"the seeded execution {execution} did not succeed within 30 s")
        time.sleep(0.05)
    transition = call(base, key, "GET", f"/api/executions/{execution}/transitions", None)["items"][0]["id"]

    secret = call(base, key, "POST", "/api/secrets", {"name": "SEEDED_TOKEN", "value": "seeded by .ci/fuzz"})["name"]

    ids = {
        "users": user,
        "agents": agent,
        "sessions": session,
        "agent_docs": agent_doc,
        "user_docs": user_doc,
        "tools": tool,
        "tasks": [task, counting["id"]],
        "executions": execution,
        "transitions": transition,
        "secrets": secret,
    }
    out = ["", "# Seeded by .ci/fuzz_seed.py."]
    for name, value in ids.items():
        values = ", ".join(f'"{v}"' for v in (value if isinstance(value, list) else [value]))
        out += [f"[dictionaries.{name}]", f"values = [{values}]"]
    # (path prefix, {path parameter: dictionary})
    for prefix, params in (
        ("/api/users/", {"user_id": "users", "doc_id": "user_docs"}),
        ("/api/agents/", {"id": "agents", "doc_id": "agent_docs", "tool_id": "tools", "task_id": "tasks"}),
        ("/api/tasks/", {"task_id": "tasks"}),
        ("/api/executions/", {"id": "executions", "transition_id": "transitions"}),
        ("/api/secrets/", {"name": "secrets"}),
        (
            "/api/sessions",
            {
                "id": "sessions",
                "body.agent": "agents",
                "body.agents[*]": "agents",
                "body.user": "users",
                "body.users[*]": "users",
            },
        ),
    ):
        bindings = ", ".join(
            f'"{param if "." in param else "path." + param}" = {{ dictionary = "{dictionary}", probability = 0.5 }}'
            for param, dictionary in params.items()
        )
        out += [
            "[[operations]]",
            f'include-path-regex = "^{prefix}"',
            'exclude-method = "DELETE"',
            f"parameters = {{ {bindings} }}",
        ]
    print("\n".join(out))
    print(f"seeded: {ids}", file=sys.stderr)


if __name__ == "__main__":
    main()
