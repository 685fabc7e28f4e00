"""External ACP agents in mia's chat (mia as the ACP client), driven like a
user in a real headless Neovim against real agent processes: the SDK's own
example agent, claude-agent-acp run offline against the scenario server,
and a small terminal-using agent written on the pinned SDK."""

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import LIB, ROOT

NODE = shutil.which("node")
ACP = ROOT / "tests" / "acp" / "node_modules"
EXAMPLE = ACP / "acp-sdk-0.17" / "dist" / "examples" / "agent.js"
CLAUDE = ACP / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
FIXTURES = ROOT / "tests" / "acp" / "fixtures"

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed: the ACP client tests need it to run the agents"),
    pytest.mark.skipif(not EXAMPLE.exists(), reason="tests/acp/node_modules is missing: run scripts/bootstrap"),
]


def agent_editor(editor_factory, agents, **extra):
    if not LIB.exists():
        pytest.fail(f"{LIB} is missing: build it with `cargo build --release`")
    setup = {"model": "scn/echo", "agents": agents}
    setup.update(extra)
    return editor_factory(setup=setup)


def type_prompt(ed, text):
    """Types `text` in the chat's prompt buffer and sends it with <CR>, as a user does."""
    ed.nvim.command("Mia open")
    ed.nvim.input("i" + text.replace("<", "<lt>") + "<Esc>")
    ed.wait("vim.fn.mode() == 'n' and vim.api.nvim_get_current_line() ~= ''")
    ed.nvim.input("<CR>")


def answer_permission_with(ed, name):
    """vim.ui.select picks the option called `name` and keeps what was shown."""
    ed.lua(
        """
        _G.asked = nil
        local want = ...
        vim.ui.select = function(items, opts, cb)
          _G.asked = { items = items, prompt = opts.prompt }
          for i, it in ipairs(items) do
            if it == want then return cb(it, i) end
          end
          cb(nil, nil)
        end
        """,
        name,
    )


def test_the_sdk_example_agent_streams_tool_blocks_and_gets_the_chosen_option_id(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}})
    answer_permission_with(ed, "Skip this change")
    ed.nvim.command("Mia agent example")
    assert ed.lua("return require('mia.agents').current()") == "example"
    type_prompt(ed, "improve the config")
    ed.wait("require('mia.chat').state() == 'done'", 60000)
    text = ed.chat_text()
    assert "## You\n\nimprove the config\n\n## example" in text
    assert "I'll help you with that. Let me start by reading some files" in text
    assert "⚙ **Reading project files** `/project/README.md`" in text
    assert "⚙ **Modifying critical configuration file** `/project/config.json`" in text
    # The agent's own options, in its order, and the question names it.
    asked = ed.lua("return _G.asked")
    assert asked["items"] == ["Allow this change", "Skip this change"]
    assert asked["prompt"] == "example wants to: Modifying critical configuration file"
    # "reject" is the optionId it got: it answers with its reject branch.
    assert "I understand you prefer not to make that change" in text
    assert "Perfect! I've successfully updated" not in text
    status = ed.lua("return require('mia.chat.blocks').status_text('call_1')")
    assert status.startswith("✓"), status


def test_a_dismissed_permission_question_is_cancelled_for_the_agent(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}})
    answer_permission_with(ed, "no such option")  # the picker is dismissed
    ed.nvim.command("Mia agent example")
    type_prompt(ed, "go")
    ed.wait("require('mia.chat').state() == 'done'", 60000)
    text = ed.chat_text()
    # A cancelled outcome: the example agent ends its turn without either branch.
    assert "Now I understand the project structure" in text
    assert "I understand you prefer not" not in text and "Perfect!" not in text


def test_completion_lists_the_configured_agents(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}, "other": {"command": ["x"]}})
    got = ed.lua("return vim.fn.getcompletion('Mia agent ', 'cmdline')")
    assert got == ["mia", "example", "other"]


def test_an_agent_config_without_command_is_refused_by_setup(editor_factory):
    ed = editor_factory()
    err = ed.lua("local ok, e = pcall(require('mia').setup, { agents = { x = { env = {} } } }) return e")
    assert "agents.x.command" in err and "must be a list" in err
