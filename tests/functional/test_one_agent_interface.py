"""One agent interface: the same user path (`:Mia mode`, `/mode`, a prompt,
`:Mia sessions`) through mia's own agent and through a real external ACP
agent, in a real headless Neovim. The Lua side asks the core's `agent_*`
functions and draws what comes back; it does not pick a path by the kind
of agent, so what the user sees of an agent's modes is what that agent
announced."""

import re
import shutil

import pytest

from conftest import ROOT, scenario_setup

NODE = shutil.which("node")
TOOL_AGENT = ROOT / "tests" / "acp" / "fixtures" / "tool_agent.mjs"

pytestmark = pytest.mark.skipif(
    NODE is None or not (ROOT / "tests" / "acp" / "node_modules").exists(),
    reason="the external agent needs node and tests/acp/node_modules: run scripts/bootstrap",
)


def chat_with(editor_factory, server, tmp_path, agent):
    """An editor whose chat talks to `agent` ("mia" or the fixture agent "tools")."""
    ed = editor_factory(setup=scenario_setup(
        server,
        agents={"tools": {"command": [NODE, str(TOOL_AGENT)], "cwd": str(tmp_path)}},
        modes={"review": {"name": "Review", "description": "Reads and comments"}},
    ))
    ed.nvim.command(f"cd {tmp_path}")
    if agent != "mia":
        ed.nvim.command(f"Mia agent {agent}")
    ed.wait(f"(require('mia.agents').info('{agent}') or {{}}).modes ~= nil", 30000)
    ed.lua("""_G.changed = {}
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaModeChanged', callback = function(a) table.insert(_G.changed, a.data.modeId) end })
      _G.notes = {}
      vim.notify = function(msg, level) table.insert(_G.notes, msg) end""")
    return ed


@pytest.mark.parametrize("agent,first,switch_to", [("mia", "ask", "review"), ("tools", "careful", "bold")])
def test_mode_commands_show_and_switch_the_modes_the_chats_agent_announced(
        editor_factory, server, tmp_path, agent, first, switch_to):
    ed = chat_with(editor_factory, server, tmp_path, agent)
    announced = ed.lua(f"return require('mia_core').agent_info('{agent}').modes")
    assert announced["currentModeId"] == first
    ids = [m["id"] for m in announced["availableModes"]]
    assert switch_to in ids
    assert ed.lua("return require('mia').modes()") == announced
    # `/mode` completes, and `:Mia mode` shows, that agent's modes.
    _, items = ed.lua("return { require('mia.slash').complete('/mode ') }")
    assert [i["word"] for i in items][:len(ids)] == ids
    assert ed.lua("return vim.fn.getcompletion('Mia mode ', 'cmdline')")[:len(ids)] == ids
    ed.nvim.command("Mia mode")
    assert f"mode: {first}  ({', '.join(ids)})" in ed.messages()
    # `:Mia mode {id}` switches that agent, which announces the switch.
    ed.nvim.command(f"Mia mode {switch_to}")
    ed.wait(f"require('mia').modes().currentModeId == '{switch_to}'", 30000)
    ed.wait("#_G.changed > 0", 30000)
    assert ed.lua("return _G.changed") == [switch_to]
    # A mode the agent does not offer is refused, naming the ones it does.
    ed.nvim.command("Mia mode nosuch")
    ed.wait("#_G.notes > 0")
    refusal = [n for n in ed.lua("return _G.notes") if "nosuch" in n]
    assert refusal and ", ".join(ids) in refusal[0], ed.lua("return _G.notes")
    assert ed.lua("return require('mia').modes().currentModeId") == switch_to


@pytest.mark.parametrize("agent", ["mia", "tools"])
def test_a_prompt_goes_to_the_chats_agent_and_its_session_is_listed(editor_factory, server, tmp_path, agent):
    ed = chat_with(editor_factory, server, tmp_path, agent)
    ed.nvim.command("Mia prompt echo through one door")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    text = ed.chat_text()
    assert ed.state() == "done", text + ed.messages()
    answer = text.split("through one door", 1)[1]
    # The fixture agent prefixes its echo; mia's scenario model echoes as is.
    assert ("echo: echo through one door" in answer) == (agent == "tools"), answer
    # Its session lists through the same function whichever agent holds it.
    listed = ed.lua(f"return require('mia').sessions.list({{ agent = {'nil' if agent == 'mia' else repr(agent)} }})")
    titles = [s.get("title") for s in listed["sessions"]]
    if agent == "mia":
        assert titles == ["echo through one door"], listed
    else:
        assert titles and all(re.fullmatch(r"Fixture session \d", t) for t in titles), listed
