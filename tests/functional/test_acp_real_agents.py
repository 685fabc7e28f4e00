"""Gemini CLI and Codex (codex-acp) in mia's chat, as real counterparts:
the pinned npm packages (tests/acp, installed by scripts/bootstrap) run
offline against the scenario server, driven like a user in a real headless
Neovim: text, a permission through mia's picker, an edit through mia's
review exactly once, :Mia stop, and what the footer says about usage."""

import json

import pytest

from acp_agents import GEMINI_CLI, codex_command, codex_env, codex_missing, gemini_command, gemini_env
from test_acp_client import NODE, agent_editor, answer_permission_with, type_prompt
from test_acp_edit_review import after_the_answer, float_lines, frame

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: the ACP client tests need it to run the agents")

needs_gemini = pytest.mark.skipif(not GEMINI_CLI.exists(),
                                  reason="@google/gemini-cli is not installed: run scripts/bootstrap")


needs_codex = pytest.mark.skipif(codex_missing() is not None, reason=codex_missing() or "")


def gemini_agent(server, tmp_path):
    return {"command": gemini_command(), "env": gemini_env(server.port, tmp_path / "gemini-home"),
            "cwd": str(tmp_path)}


def done(ed, timeout_ms=120000):
    ed.wait("require('mia.chat').state() ~= 'streaming'", timeout_ms)
    assert ed.state() == "done", ed.chat_text() + ed.messages()


def last_answer(ed, name):
    return ed.chat_text(footers=True).split(f"## {name}\n")[-1]


@needs_gemini
def test_gemini_cli_answers_asks_through_mias_picker_and_stops_and_its_footer_says_usage_not_reported(
        editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"gemini": gemini_agent(server, tmp_path)})
    ed.nvim.command("Mia agent gemini")
    type_prompt(ed, "echo hello from the scenario server")
    done(ed)
    answer = last_answer(ed, "gemini")
    assert "hello from the scenario server" in answer, ed.chat_text()
    # Gemini CLI sends no usage: the footer says so, not zeros.
    assert answer.rstrip().endswith("── gemini · usage not reported ──"), answer
    assert " 0 in" not in answer

    # Its shell tool asks with its own options through mia's picker; "Allow" runs it.
    answer_permission_with(ed, "Allow")
    type_prompt(ed, "tool run_shell_command " + json.dumps({"command": "printf 'from-%s-%d' gemini 42"}))
    done(ed)
    asked = ed.lua("return _G.asked")
    assert asked is not None, ed.chat_text()
    assert "Allow" in asked["items"] and "from-%s-%d" in asked["prompt"], asked
    assert "from-gemini-42" in last_answer(ed, "gemini"), ed.chat_text()

    # :Mia stop cancels a streaming answer, and the next prompt is answered.
    type_prompt(ed, "slow 400 20")
    ed.wait("table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n')"
            ":find('w00003') ~= nil", 60000)
    ed.nvim.command("Mia stop")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "cancelled", ed.chat_text()
    assert "w00399" not in ed.chat_text()
    type_prompt(ed, "echo still here")
    done(ed)
    assert "still here" in last_answer(ed, "gemini")


@needs_gemini
def test_gemini_cli_edit_is_reviewed_once_in_mias_float_and_lands(editor_factory, server, tmp_path):
    target = tmp_path / "edited.txt"
    target.write_text("old line\n")
    ed = agent_editor(editor_factory, {"gemini": gemini_agent(server, tmp_path)})
    ed.nvim.command("Mia agent gemini")
    # Gemini asks with the diff, then writes the file through mia (fs/write_text_file).
    type_prompt(ed, "tool write_file " + json.dumps({"file_path": "edited.txt", "content": "new line\n"}))
    fr = frame(ed)
    assert fr["title"] == " gemini wants to edit edited.txt ", fr
    lines = float_lines(ed)
    assert "-old line" in lines and "+new line" in lines, lines
    ed.nvim.input("a")
    # ...and that write, of the text just accepted, is not reviewed again.
    assert after_the_answer(ed, fr["title"]) is None, "reviewed twice: " + ed.chat_text()
    done(ed)
    assert target.read_text() == "new line\n"
    assert "Successfully overwrote file" in last_answer(ed, "gemini"), ed.chat_text()



def codex_agent(server, tmp_path):
    return {"command": codex_command(), "env": codex_env(server.port, tmp_path / "codex"), "cwd": str(tmp_path)}


@needs_codex
def test_codex_answers_asks_through_mias_picker_and_stops_and_its_footer_says_usage_not_reported(
        editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"codex": codex_agent(server, tmp_path)})
    ed.nvim.command("Mia agent codex")
    type_prompt(ed, "echo hello from the scenario server")
    done(ed)
    answer = last_answer(ed, "codex")
    assert "hello from the scenario server" in answer, ed.chat_text()
    # Codex reports only the context's size: the footer says the usage was not reported.
    assert answer.rstrip().endswith("── codex · usage not reported ──"), answer
    # Its request went to the scenario server's Responses API.
    assert any(r["path"] == "/v1/responses" for r in server.requests()), server.requests()

    # A command outside its sandbox asks with Codex's own options through mia's picker.
    answer_permission_with(ed, "Yes, proceed")
    type_prompt(ed, "tool exec_command " + json.dumps({
        "cmd": "printf 'from-%s-%d' codex 42", "sandbox_permissions": "require_escalated",
        "justification": "print it"}))
    done(ed)
    asked = ed.lua("return _G.asked")
    assert asked is not None and "Yes, proceed" in asked["items"], (asked, ed.chat_text())
    assert "from-codex-42" in last_answer(ed, "codex"), ed.chat_text()

    # :Mia stop cancels a streaming answer, and the next prompt is answered.
    type_prompt(ed, "slow 400 20")
    ed.wait("table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n')"
            ":find('w00003') ~= nil", 60000)
    ed.nvim.command("Mia stop")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "cancelled", ed.chat_text()
    assert "w00399" not in ed.chat_text()
    type_prompt(ed, "echo still here")
    done(ed)
    assert "still here" in last_answer(ed, "codex")


@needs_codex
def test_codex_apply_patch_is_reviewed_once_in_mias_float_and_lands(editor_factory, server, tmp_path):
    target = tmp_path / "edited.txt"
    target.write_text("old line\n")
    ed = agent_editor(editor_factory, {"codex": codex_agent(server, tmp_path)})
    ed.nvim.command("Mia agent codex")
    patch = "*** Begin Patch\n*** Update File: edited.txt\n@@\n-old line\n+new line\n*** End Patch\n"
    type_prompt(ed, "custom apply_patch " + json.dumps(patch))
    fr = frame(ed)
    assert fr["title"].startswith(" codex wants to edit ") and "edited.txt" in fr["title"], fr
    lines = float_lines(ed)
    assert "-old line" in lines and "+new line" in lines, lines
    ed.nvim.input("a")
    assert after_the_answer(ed, fr["title"]) is None, "reviewed twice: " + ed.chat_text()
    done(ed)
    assert target.read_text() == "new line\n"
    assert "Success. Updated the following files" in last_answer(ed, "codex"), ed.chat_text()


@needs_gemini
def test_gemini_cli_replace_is_reviewed_once_too(editor_factory, server, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("one\ntwo\nthree\n")
    ed = agent_editor(editor_factory, {"gemini": gemini_agent(server, tmp_path)})
    ed.nvim.command("Mia agent gemini")
    type_prompt(ed, "tool replace " + json.dumps({"file_path": "notes.txt", "instruction": "capitalize two", "old_string": "two", "new_string": "TWO"}))
    fr = frame(ed)
    assert fr["title"] == " gemini wants to edit notes.txt ", fr
    assert "-two" in float_lines(ed) and "+TWO" in float_lines(ed), float_lines(ed)
    ed.nvim.input("a")
    assert after_the_answer(ed, fr["title"]) is None, "reviewed twice: " + ed.chat_text()
    done(ed)
    assert target.read_text() == "one\nTWO\nthree\n", ed.chat_text()
