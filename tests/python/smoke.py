"""Smoke test of the Python client generated from spec/openapi.json.

Creates a user, an agent, a session with both and a message in it, then lists
users, agents, sessions and the session's messages and checks that the created
records are there, all through the generated client's typed models.

Usage: python smoke.py [BASE_URL [API_KEY]]
(defaults: $AGENT_PLATFORM_URL, $AGENT_PLATFORM_KEY). `bash .ci/python-client`
generates the client (package `agent_platform_client`) and runs this.
"""

import json
import os
import sys
import uuid
from http import HTTPStatus

from agent_platform_client import AuthenticatedClient
from agent_platform_client.api.agents import agent_create, agent_get, agent_list
from agent_platform_client.api.sessions import message_create, message_list, session_create, session_list
from agent_platform_client.api.users import user_create, user_get, user_list
from agent_platform_client.models import (
    Agent,
    CreateAgentRequest,
    CreateAgentRequestMetadataType0,
    CreateMessageRequest,
    CreateSessionRequest,
    CreateUserRequest,
    CreateUserRequestMetadataType0,
    Direction,
    ErrorResponse,
    ListResponseForAgent,
    ListResponseForMessage,
    ListResponseForSession,
    ListResponseForUser,
    Message,
    Role,
    Session,
    User,
)
from agent_platform_client.types import Response

checks = 0


def check(cond: bool, what: str, failure_detail: str = "") -> None:
    global checks
    if not cond:
        print(f"smoke: FAILED: {what} {failure_detail}", file=sys.stderr)
        print(f"smoke: {checks} passed, 1 failed")
        sys.exit(1)
    checks += 1
    print(f"  ok  {what}")


def expect(resp: Response, status: HTTPStatus, model: type, what: str):
    """The parsed body of `resp`, checked to be `model` with status `status`."""
    body = resp.parsed
    check(
        resp.status_code == status and isinstance(body, model),
        f"{what}: {status.value} {model.__name__}",
        f"(got {resp.status_code.value} {type(body).__name__}: {resp.content[:300]!r})",
    )
    return body


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AGENT_PLATFORM_URL", "")
    key = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("AGENT_PLATFORM_KEY", "")
    if not base or not key:
        sys.exit(__doc__)
    run = uuid.uuid4().hex[:8]
    client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True, timeout=30.0)

    with client:
        # Names use the Unicode name pattern: letters of any script, then identifier characters.
        user = expect(
            user_create.sync_detailed(
                client=client,
                body=CreateUserRequest(
                    name="Zoë_Ångström",
                    about="made by tests/python/smoke.py",
                    project="smoke",
                    metadata=CreateUserRequestMetadataType0.from_dict({"run": run}),
                ),
            ),
            HTTPStatus.CREATED,
            User,
            "create user",
        )
        check(user.name == "Zoë_Ångström" and user.project == "smoke", "the user has the name and project sent")
        got = expect(user_get.sync_detailed(user.id, client=client), HTTPStatus.OK, User, "get user")
        check(got.id == user.id and got.metadata.to_dict() == {"run": run}, "get user answers the created user")

        agent = expect(
            agent_create.sync_detailed(
                client=client,
                body=CreateAgentRequest(
                    name="Helper",
                    about="answers questions",
                    instructions=["Be brief.", "Be kind."],
                    metadata=CreateAgentRequestMetadataType0.from_dict({"run": run}),
                ),
            ),
            HTTPStatus.CREATED,
            Agent,
            "create agent",
        )
        check(agent.instructions == ["Be brief.", "Be kind."], "the agent has the instructions sent")
        got = expect(agent_get.sync_detailed(agent.id, client=client), HTTPStatus.OK, Agent, "get agent")
        check(got.id == agent.id and got.name == "Helper", "get agent answers the created agent")

        session = expect(
            session_create.sync_detailed(
                client=client,
                body=CreateSessionRequest(agent=agent.id, user=user.id, situation="a smoke test"),
            ),
            HTTPStatus.CREATED,
            Session,
            "create session",
        )
        check(session.agents == [agent.id] and session.users == [user.id], "the session has the agent and the user")

        message = expect(
            message_create.sync_detailed(
                session.id,
                client=client,
                body=CreateMessageRequest(role=Role.USER, content="Hello from Python!", name="Zoë"),
            ),
            HTTPStatus.CREATED,
            Message,
            "create message",
        )
        check(
            message.session_id == session.id and message.role == Role.USER and message.token_count > 0,
            "the message belongs to the session, with a token count",
        )

        users = expect(user_list.sync_detailed(client=client), HTTPStatus.OK, ListResponseForUser, "list users")
        check(user.id in [u.id for u in users.items], "the user is listed")
        mine = expect(
            user_list.sync_detailed(client=client, metadata_filter=json.dumps({"run": run})),
            HTTPStatus.OK,
            ListResponseForUser,
            "list users by metadata",
        )
        check([u.id for u in mine.items] == [user.id], "the metadata filter finds the user alone")

        agents = expect(agent_list.sync_detailed(client=client), HTTPStatus.OK, ListResponseForAgent, "list agents")
        check(agent.id in [a.id for a in agents.items], "the agent is listed")

        sessions = expect(
            session_list.sync_detailed(client=client), HTTPStatus.OK, ListResponseForSession, "list sessions"
        )
        check(session.id in [s.id for s in sessions.items], "the session is listed")

        messages = expect(
            message_list.sync_detailed(session.id, client=client, direction=Direction.ASC),
            HTTPStatus.OK,
            ListResponseForMessage,
            "list messages",
        )
        check(
            [(m.id, m.content) for m in messages.items] == [(message.id, "Hello from Python!")],
            "the session's messages are the one sent",
        )

        # An error answers the documented error model.
        missing = expect(
            user_get.sync_detailed(uuid.uuid4(), client=client),
            HTTPStatus.NOT_FOUND,
            ErrorResponse,
            "get a missing user",
        )
        check(missing.code == "not_found", "a missing user is code not_found", f"(got {missing.code!r})")

    print(f"smoke: {checks} passed, 0 failed")


if __name__ == "__main__":
    main()
