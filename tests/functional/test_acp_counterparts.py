"""The pinned ACP counterparts work offline here, driven by the SDK's own
client (tests/acp/sdk_client.mjs on @agentclientprotocol/sdk 0.17.1): the
SDK's example agent, and claude-agent-acp 0.23.1 (Claude Code) against the
scenario server's Anthropic format.  mia's chat tests drive the same agents;
these prove that what they see comes from the agents, not from the setup."""

import json

import pytest

from acp_agents import (claude_agent_command, claude_env, example_agent_command, missing,
                        run_sdk_client)

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def kinds(turn):
    return [k for k in turn["kinds"] if k != "available_commands_update"]


# ---- the SDK's example agent ----------------------------------------------------
def test_example_agent_streams_tool_calls_and_asks_permission(tmp_path):
    run = run_sdk_client(example_agent_command(), ["hello"], tmp_path)
    assert run.returncode == 0, run.explain()
    assert run.events("initialize")[0]["protocolVersion"] == 1
    (turn,) = run.turns
    assert turn["stopReason"] == "end_turn"
    assert turn["text"].startswith("I'll help you with that.")
    assert "Perfect! I've successfully updated the configuration." in turn["text"]
    assert kinds(turn) == ["agent_message_chunk", "tool_call", "tool_call_update",
                           "agent_message_chunk", "tool_call", "tool_call_update",
                           "agent_message_chunk"]
    (perm,) = turn["permissions"]
    assert perm["toolCall"]["toolCallId"] == "call_2"
    assert [(o["optionId"], o["kind"]) for o in perm["options"]] == [
        ("allow", "allow_once"), ("reject", "reject_once")]
    assert perm["chosen"] == "allow"


def test_example_agent_rejected_permission_and_cancel(tmp_path):
    run = run_sdk_client(example_agent_command(), ["hello"], tmp_path, permission="reject_once")
    assert run.returncode == 0, run.explain()
    (turn,) = run.turns
    assert turn["permissions"][0]["chosen"] == "reject"
    assert "I'll skip the configuration update." in turn["text"]
    assert "Perfect!" not in turn["text"]

    run = run_sdk_client(example_agent_command(),
                         [{"text": "hello", "cancelOnFirstChunk": True}], tmp_path)
    assert run.returncode == 0, run.explain()
    (turn,) = run.turns
    assert turn["stopReason"] == "cancelled"
    assert "tool_call" not in turn["kinds"]
    assert run.events("cancel")


# ---- claude-agent-acp against the scenario server --------------------------------
def claude(server, tmp_path, prompts, **kwargs):
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    run = run_sdk_client(claude_agent_command(), prompts, cwd,
                         env=claude_env(server.port, tmp_path / "home"),
                         stderr_file=tmp_path / "agent.stderr", **kwargs)
    assert run.returncode == 0, run.explain() + (tmp_path / "agent.stderr").read_text()[-3000:]
    return run, cwd


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def test_claude_streams_the_scenario_answer_with_usage(server, tmp_path):
    run, _ = claude(server, tmp_path, ["echo hello from mia's tests"])
    init = run.events("initialize")[0]
    assert init["agentInfo"]["name"] == "@zed-industries/claude-agent-acp"
    assert init["agentInfo"]["version"] == "0.23.1"
    new = run.events("session_new")[0]
    assert "default" in new["modes"]["available"] and new["models"]["available"]
    (turn,) = run.turns
    assert turn["stopReason"] == "end_turn"
    # the echo scenario, chosen from the prompt inside Claude Code's markup
    assert turn["text"] == "echo hello from mia's tests"
    assert turn["kinds"].count("agent_message_chunk") >= 4  # streamed, not one block
    (usage,) = turn["usageUpdates"]
    assert usage["used"] > 0 and usage["size"] > 0
    assert usage["cost"]["currency"] == "USD" and usage["cost"]["amount"] > 0
    assert turn["usage"]["outputTokens"] == 5  # the scenario server counts the 5 words

    (req,) = posts(server)
    assert req["path"].startswith("/v1/messages")
    assert req["body"]["stream"] is True
    assert req["headers"]["x-api-key"] == "<redacted>"
    assert req["headers"]["anthropic-version"]
    tools = {t["name"] for t in req["body"]["tools"]}
    assert {"Write", "Edit", "Bash", "Read"} <= tools


def test_claude_tool_call_asks_permission_then_runs(server, tmp_path):
    target = tmp_path / "project" / "hello.txt"
    args = json.dumps({"file_path": str(target), "content": "written by Claude Code\n"})
    run, cwd = claude(server, tmp_path, [f"tool Write {args}"])
    (turn,) = run.turns
    assert turn["stopReason"] == "end_turn"
    (call,) = turn["toolCalls"]
    assert call["kind"] == "edit" and call["toolCallId"].startswith("toolu_scn")
    (perm,) = turn["permissions"]
    assert perm["toolCall"]["toolCallId"] == call["toolCallId"]
    assert {o["kind"] for o in perm["options"]} >= {"allow_once", "reject_once"}
    assert perm["chosen"] == next(o["optionId"] for o in perm["options"] if o["kind"] == "allow_once")
    assert {"toolCallId": call["toolCallId"], "status": "completed"} in turn["toolStatuses"]
    assert target.read_text() == "written by Claude Code\n"
    # the scenario server answered the tool result with its text
    assert turn["text"] == f"tool said: File created successfully at: {target}"
    assert turn["usageUpdates"]
    first, second = posts(server)
    result = second["body"]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == call["toolCallId"]


def test_claude_rejected_permission_leaves_the_file_alone(server, tmp_path):
    target = tmp_path / "project" / "no.txt"
    args = json.dumps({"file_path": str(target), "content": "x"})
    run, _ = claude(server, tmp_path, [f"tool Write {args}"], permission="reject_once")
    (turn,) = run.turns
    assert turn["permissions"][0]["chosen"] == "reject"
    assert not target.exists()
    assert turn["stopReason"] == "end_turn"
    assert {"toolCallId": turn["toolCalls"][0]["toolCallId"], "status": "failed"} in turn["toolStatuses"]
    # the refusal went back to the model as the tool result
    assert turn["text"] == "tool said: User refused permission to run tool"


def test_claude_cancel(server, tmp_path):
    # stall 3: three tokens, then silence until the client goes away
    run, _ = claude(server, tmp_path, [{"text": "stall 3", "cancelOnFirstChunk": True},
                                       "echo after cancel", "echo third"])
    first, *later = run.turns
    assert first["stopReason"] == "cancelled"
    assert first["text"].startswith("w00000 ")
    # claude-agent-acp 0.23.1 ends the prompt right after a cancel at once
    # (end_turn, nothing streamed) and streams its answer in the next turn;
    # what matters here: the session still answers, and the scenario server
    # picked the new prompt, not the interrupted one.
    assert all(t["stopReason"] == "end_turn" for t in later)
    text = "".join(t["text"] for t in later)
    assert "echo third" in text and "stall" not in text
