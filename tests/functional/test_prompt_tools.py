"""A provider without a native tool field (`native_tools = false`): the tools
travel in the system prompt with their parameters, the model writes its call
as a <tool_call> block, and mia runs it like a native call, through a real
Neovim against the scenario server."""

import pytest

from conftest import scenario_setup

SHOUT = """
require('mia.tools').register({
  name = 'shout', description = 'Upper-case a word.\\nUse it to be heard.',
  parameters = { type = 'object', properties = { word = { type = 'string' } }, required = { 'word' } },
  execute = function(args) return string.upper(args.word) end,
}, 'user')
"""


@pytest.fixture
def ed(editor_factory, server):
    opts = scenario_setup(server)
    opts["providers"]["scn"]["native_tools"] = False
    e = editor_factory(setup=opts)
    e.lua(SHOUT)
    return e


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


@pytest.mark.parametrize("split", ["", "split "])
def test_a_call_written_in_the_answer_runs_the_tool_and_the_result_goes_back(ed, server, split):
    ed.nvim.command(f'Mia prompt {split}texttool shout {{"word": "quiet"}}')
    ed.wait("require('mia.chat').state() == 'done'")
    first, second = posts(server)[-2:]
    # the tools went into the system prompt, not into a tools field
    assert "tools" not in first["body"]
    system = first["body"]["messages"][0]
    assert system["role"] == "system"
    assert "## shout\nUpper-case a word.\nUse it to be heard.\nParameters (JSON Schema): " in system["content"]
    assert '"required":["word"]' in system["content"]
    # the call came back as a result in a user message, in tags
    sent = second["body"]["messages"]
    assert sent[-2]["role"] == "assistant" and '<tool_call>{"name":"shout","arguments":{"word":"quiet"}}</tool_call>' in str(sent[-2]["content"])
    assert sent[-1]["role"] == "user" and "QUIET" in str(sent[-1]["content"]) and "<tool_result" in str(sent[-1]["content"])
    chat = ed.chat_text()
    # the chat shows the words around the call and the tool's run, never the tags
    assert "Calling shout." in chat
    assert "<tool_call>" not in chat
    assert "shout" in chat and "QUIET" in chat


def test_a_block_that_is_not_a_call_stays_in_the_answer(ed, server):
    ed.nvim.command("Mia prompt texttool shout not-json")
    ed.wait("require('mia.chat').state() == 'done'")
    assert len(posts(server)) == 1  # no tool ran, no second request
    assert '<tool_call>{"name": "shout", "arguments": "not-json"}</tool_call>' in ed.chat_text()


def test_native_tools_stay_the_default_and_the_option_is_checked(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua(SHOUT)
    ed.nvim.command('Mia prompt tool shout {"word": "x"}')
    ed.wait("require('mia.chat').state() == 'done'")
    assert any(t["function"]["name"] == "shout" for t in posts(server)[0]["body"]["tools"])
    err = ed.lua("return select(2, pcall(require('mia').setup, { providers = { p = { kind = 'openai_compatible', base_url = 'http://x', native_tools = 'no' } } }))")
    assert "`providers.p.native_tools` must be a boolean" in err
