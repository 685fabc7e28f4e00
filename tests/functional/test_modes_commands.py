"""Modes (ask, architect, code), the switch_mode flow, and slash commands
with their completion — in a real Neovim against the scenario server."""

import pytest
from pynvim.api.common import NvimError

from conftest import scenario_setup


@pytest.fixture
def ed(editor_factory, server, tmp_path):
    e = editor_factory(setup=scenario_setup(server))
    e.lua("vim.cmd.cd(...)", str(tmp_path))
    return e


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def test_modes_use_acp_shape_and_switching_fires_an_event(ed):
    modes = ed.lua("return require('mia').modes()")
    assert modes["currentModeId"] == "ask"
    assert [m["id"] for m in modes["availableModes"]] == ["ask", "architect", "code"]
    assert all(m["name"] and m["description"] for m in modes["availableModes"])
    ed.lua("""_G.changed = nil
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaModeChanged', callback = function(a) _G.changed = a.data end })""")
    ed.nvim.command("Mia mode code")
    assert ed.lua("return changed") == {"modeId": "code", "previousModeId": "ask"}
    assert ed.lua("return require('mia').modes().currentModeId") == "code"
    assert ed.lua("return require('mia').statusline()").startswith("mia code echo $")
    with pytest.raises(NvimError, match="unknown mode `nope`. Modes: ask, architect, code"):
        ed.lua("require('mia').set_mode('nope')")


def test_an_agents_mode_update_without_the_mode_it_left_still_says_which_it_was(ed):
    """ACP's current_mode_update carries only the new mode (an external
    agent's has no _meta): MiaModeChanged names the previous one anyway."""
    ed.lua("""_G.changes = {}
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaModeChanged', callback = function(a) table.insert(_G.changes, a.data) end })""")
    ed.nvim.command("Mia mode architect")
    ed.lua("require('mia.chat')._agent_update({ sessionUpdate = 'current_mode_update', currentModeId = 'code' })")
    ed.lua("require('mia.chat')._agent_update({ sessionUpdate = 'current_mode_update', currentModeId = 'ask' })")
    assert ed.lua("return _G.changes") == [{"modeId": "architect", "previousModeId": "ask"},
                                           {"modeId": "code", "previousModeId": "architect"},
                                           {"modeId": "ask", "previousModeId": "code"}]


def test_a_mode_switch_mid_run_takes_effect_at_the_next_request(ed, server):
    ed.lua("""require('mia').register_tool({ name = 'go_architect', description = 'switch',
      execute = function() require('mia').set_mode('architect'); return 'switched' end })""")
    ed.nvim.command("Mia prompt tool go_architect {}")
    ed.wait("require('mia.chat').state() == 'done'")
    first, second = posts(server)[-2:]
    names = lambda body: {t["function"]["name"] for t in body.get("tools", [])}
    assert "write_file" in names(first["body"])
    assert "write_file" not in names(second["body"]) and "bash" not in names(second["body"])
    assert "switch_mode" in names(second["body"])
    assert "architect mode" in second["body"]["messages"][0]["content"]


def test_mias_own_agent_announces_a_mode_switch_as_a_session_update_the_chat_shows(ed):
    # A tool switches the mode mid-turn; the agent announces the switch at
    # its next request with ACP's current_mode_update, naming the mode it
    # left, as :Mia mode's own announcement does.
    ed.lua("""_G.changes = {}
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaModeChanged', callback = function(a) table.insert(_G.changes, a.data) end })
      require('mia').register_tool({ name = 'go_architect', description = 'switch',
        execute = function() require('mia').set_mode('architect'); return 'switched' end })""")
    ed.nvim.command("Mia prompt tool go_architect {}")
    ed.wait("require('mia.chat').state() == 'done'")
    switched = {"modeId": "architect", "previousModeId": "ask"}
    assert ed.lua("return _G.changes") == [switched, switched]
    assert ed.lua("return require('mia').statusline()").startswith("mia architect ")


@pytest.mark.parametrize("option,mode,reply", [
    (1, "code", "The user approved the plan (allow_always); mode is now code."),
    (2, "ask", "The user approved the plan (allow_once); mode is now ask."),
    (3, "architect", "The user chose to stay in architect mode (reject_once)."),
])
def test_switch_mode_offers_the_three_acp_options(ed, server, option, mode, reply):
    ed.nvim.command("Mia mode architect")
    ed.lua("""local option = ...
      vim.ui.select = function(items, opts, cb) _G.asked = { items = items, prompt = opts.prompt }; cb(items[option], option) end""", option)
    ed.nvim.command('Mia prompt tool switch_mode {"plan": "1. read 2. edit"}')
    ed.wait("require('mia.chat').state() == 'done'")
    asked = ed.lua("return asked")
    assert asked["items"] == ["Yes, and auto-accept all actions", "Yes, and manually accept actions", "No, stay in architect mode"]
    assert "1. read 2. edit" in asked["prompt"]
    assert ed.lua("return require('mia').modes().currentModeId") == mode
    result = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result.startswith(reply)


def test_switch_mode_is_offered_only_in_architect_mode(ed, server):
    ed.nvim.command("Mia prompt echo hi")
    ed.wait("require('mia.chat').state() == 'done'")
    assert "switch_mode" not in {t["function"]["name"] for t in posts(server)[-1]["body"]["tools"]}


def test_slash_command_names_complete_with_descriptions(ed):
    start, items = ed.lua("return { require('mia.slash').complete('/co') }")
    assert start == 0
    assert [(i["word"], i["menu"]) for i in items] == [("/costs", "cost report")]  # /compact: empty chat
    _, items = ed.lua("return { require('mia.slash').complete('/mode ') }")
    assert [i["word"] for i in items] == ["ask", "architect", "code"]
    _, items = ed.lua("return { require('mia.slash').complete('/model ') }")
    assert items[0]["abbr"] == "provider/model"


def test_the_prompt_buffer_completes_and_sends(ed, server):
    ed.nvim.command("Mia open")
    assert ed.lua("return vim.bo.filetype") == "mia_prompt"
    assert ed.lua("return vim.bo.omnifunc") == "v:lua.require'mia.prompt'.complete"
    ed.lua("vim.api.nvim_set_current_line('/he'); vim.api.nvim_win_set_cursor(0, { 1, 3 })")
    assert ed.lua("return require('mia.prompt').complete(1, '')") == 0
    assert [i["word"] for i in ed.lua("return require('mia.prompt').complete(0, '/he')")] == ["/help"]
    ed.lua("vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'echo from the prompt' })")
    ed.lua("require('mia.prompt').send()")
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.chat_text().endswith("echo from the prompt")
    assert ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)") == [""]


def test_user_commands_run_and_announce_themselves(ed):
    ed.lua("""_G.updates = {}
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaCommandsChanged', callback = function(a) table.insert(updates, a.data) end })
      require('mia').register_command({ name = 'hello', description = 'greets', input_hint = 'name',
        run = function(input) _G.greeted = input end })""")
    update = ed.lua("return updates[#updates]")
    assert update["sessionUpdate"] == "available_commands_update"
    assert {"name": "hello", "description": "greets", "input": {"hint": "name"}} in update["availableCommands"]
    ed.nvim.command("Mia prompt /hello world")
    assert ed.lua("return greeted") == "world"


def test_unknown_command_suggests_close_names_and_never_reaches_the_model(ed, server):
    with pytest.raises(NvimError, match=r"unknown command /hepl. Did you mean /help\?"):
        ed.nvim.command("Mia prompt /hepl")
    assert posts(server) == []
    with pytest.raises(NvimError, match=r"/compact is not available now"):
        ed.nvim.command("Mia prompt /compact")


def test_compact_becomes_available_once_the_chat_has_messages(ed, server):
    ed.lua("""_G.updates = {}
      vim.api.nvim_create_autocmd('User', { pattern = 'MiaCommandsChanged', callback = function(a) table.insert(updates, a.data) end })""")
    ed.nvim.command("Mia prompt echo one")
    ed.wait("require('mia.chat').state() == 'done'")
    names = [c["name"] for c in ed.lua("return require('mia.slash').available()")]
    assert "compact" in names
    ed.nvim.command("Mia prompt /compact")
    ed.wait("vim.tbl_contains(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '> _context compacted_')")
    assert posts(server)[-1]["body"]["messages"][-1]["content"].startswith("Summarize the conversation so far:")
    # the next request sends the summary in place of what it covers
    ed.nvim.command("Mia prompt echo two")
    ed.wait("require('mia.chat').state() == 'done'")
    sent = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] != "system"]
    assert sent[0]["content"].startswith("(Summary of the earlier conversation)")
    assert [m["content"] for m in sent[1:]] == ["echo two"]


def test_a_configured_mode_has_its_own_prompt_tools_and_policy(editor_factory, server, tmp_path):
    opts = scenario_setup(server, modes={"review": {
        "name": "Review", "description": "Reads and comments",
        "system": "You review code and never change it.",
        "tools": ["read_file", "grep"],
        "permissions": {"read": "allow", "write": "deny", "execute": "deny"},
    }})
    ed = editor_factory(setup=opts)
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    assert {"id": "review", "name": "Review", "description": "Reads and comments"} in ed.lua("return require('mia').modes().availableModes")
    ed.nvim.command("Mia mode review")
    ed.nvim.command("Mia prompt echo look at this")
    ed.wait("require('mia.chat').state() == 'done'")
    body = posts(server)[-1]["body"]
    assert sorted(t["function"]["name"] for t in body["tools"]) == ["grep", "read_file"]
    assert "You review code and never change it." in body["messages"][0]["content"]


def test_slash_commands_complete_as_typed_with_omni_and_user_completion(editor_factory, server):
    """Typing `/c` then <C-x><C-o> (or <C-x><C-u>) in the prompt buffer lists
    the matching commands; a user command's input hint shows in the menu."""
    from conftest import scenario_setup
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua("""require('mia').register_command({ name = 'deploy', description = 'deploys',
      input_hint = 'staging | production', run = function() end })""")
    ed.nvim.command("Mia open")
    words = "vim.tbl_map(function(i) return i.word end, vim.fn.complete_info({ 'items' }).items)"
    for keys in ("<C-x><C-o>", "<C-x><C-u>"):
        ed.nvim.input("S/c" + keys)
        ed.wait(f"vim.tbl_contains({words}, '/costs')")
        got = ed.lua(f"return {words}")
        assert "/clear" in got and all(w.startswith("/c") for w in got), got
        ed.nvim.input("<C-e><Esc>")
        ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("S/dep<C-x><C-o>")
    ed.wait(f"vim.tbl_contains({words}, '/deploy')")
    item = ed.lua("for _, i in ipairs(vim.fn.complete_info({ 'items' }).items) do if i.word == '/deploy' then return i end end")
    assert item["menu"] == "deploys" and item["info"] == "staging | production", item


def test_compact_is_offered_after_a_plain_prompt_with_nobody_listening(ed, server):
    # No `User MiaCommandsChanged` autocommand: the core's commands wait in
    # the chat until a "/" is typed, and /compact is offered and runs then.
    ed.nvim.command("Mia prompt echo one")
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.lua("return package.loaded['mia.slash'] == nil"), "a plain prompt loads no command module"
    ed.nvim.command("Mia open")
    ed.nvim.input("i/comp")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '/compact')")
    ed.nvim.input("<C-e>act<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    assert ed.nvim.current.line == "/compact"
    ed.nvim.input("<CR>")
    ed.wait("vim.tbl_contains(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '> _context compacted_')")
    assert posts(server)[-1]["body"]["messages"][-1]["content"].startswith("Summarize the conversation so far:")
