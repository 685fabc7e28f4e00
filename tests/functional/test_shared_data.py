"""What Lua and the core both need comes from the core (`mia_core.shared()`):
built-in providers as :checkhealth shows them, money as the statusline and
:MiaCosts write it, the tools a mode offers, which tool source wins a name —
in a real Neovim against the scenario server."""

import re

import pytest
from pynvim.api.common import NvimError

from conftest import scenario_setup


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def offered(request):
    return sorted(t["function"]["name"] for t in request["body"].get("tools", []))


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def health_report(ed):
    ed.nvim.command("checkhealth mia")
    return ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")


def runtime_started(ed):
    """Whether the core's runtime runs (setup() loads the library, and starts nothing)."""
    return ed.lua("return require('mia_core').status().runtime_started")


@pytest.mark.parametrize("key", ["", "sk-test-override-0123456789"])
def test_checkhealth_shows_an_overridden_builtin_with_the_builtins_kind_and_key_variable(editor_factory, server, key):
    # only the URL is overridden: kind and api_key_env stay the built-in's, field by field
    setup = {"model": "openai/echo", "providers": {"openai": {"base_url": server.base_url}}}
    ed = editor_factory(env={"OPENAI_API_KEY": key}, setup=setup)
    assert not runtime_started(ed)  # setup() checked the kind-less override and started nothing
    report = health_report(ed)
    line = f"openai (openai) {server.base_url}: $OPENAI_API_KEY is " + ("set" if key else "NOT set")
    assert line in report, report
    assert not re.search(r"openai \(openai\) [^\n]*no API key needed", report), report
    assert "anthropic (anthropic) https://api.anthropic.com: $ANTHROPIC_API_KEY" in report
    if key:
        assert key not in report
        # what health showed is what the core uses: the answer comes from the overridden URL
        prompt(ed, "echo through the override")
        assert ed.chat_text().endswith("echo through the override")
        assert posts(server)[-1]["headers"].get("authorization") == "<redacted>"
    else:
        assert "ERROR " + line in report, report  # the default model's provider has no key: an error
        assert "Set OPENAI_API_KEY in the environment Neovim starts from" in report


def test_money_in_the_statusline_and_the_costs_window_is_written_by_the_core(editor_factory, server, tmp_path):
    # 3 output tokens at $1/6 per token: $0.50, which the core writes with two decimals
    pricing = {"scn/echo": {"input": 0, "output": 1e6 / 6}}
    ed = editor_factory(setup=scenario_setup(server, pricing=pricing))
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    assert ed.lua("return require('mia').statusline()") == "mia ask echo $0.00"
    assert not runtime_started(ed)  # the statusline never starts the core
    prompt(ed, "echo hello there")
    assert ed.lua("return require('mia.chat')._last_done().usage.output_tokens") == 3
    assert ed.lua("return require('mia').statusline()") == "mia ask echo $0.50"
    assert ed.chat_text(footers=True).endswith(" · 3 out · $0.50 ──")
    ed.nvim.command("MiaCosts")
    ed.wait("vim.startswith(vim.api.nvim_buf_get_lines(0, 0, 1, false)[1], 'Cost ')")
    lines = ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
    assert lines[0] == "Cost this session: $0.50", lines
    tokens = re.match(r"Tokens: ([\d,]+) in · 3 out", lines[1])
    assert tokens, lines
    core = ed.lua("return require('mia_core').shared().format_tokens(...)", int(tokens[1].replace(",", "")))
    assert core == tokens[1]


def test_a_user_mode_offers_its_tools_and_an_overridden_builtin_keeps_the_cores_policy(editor_factory, server, tmp_path):
    modes = {
        "review": {"description": "Reads and searches", "tools": ["read_file", "grep", "write_file"]},
        "architect": {"name": "Plan"},
    }
    ed = editor_factory(setup=scenario_setup(server, modes=modes))
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    listed = ed.lua("return require('mia').modes().availableModes")
    assert [(m["id"], m["name"]) for m in listed] == [("ask", "Ask"), ("architect", "Plan"), ("code", "Code"), ("review", "review")]
    ed.nvim.command("Mia mode review")
    prompt(ed, "echo in review")
    # its own list, and switch_mode belongs to architect only
    assert offered(posts(server)[-1]) == ["grep", "read_file", "write_file"]
    ed.nvim.command("Mia mode architect")
    prompt(ed, "echo in plan")
    request = posts(server)[-1]
    tools = offered(request)
    assert "switch_mode" in tools and "read_file" in tools
    assert "write_file" not in tools and "bash" not in tools  # the core's architect policy: write and execute denied
    assert "architect mode" in request["body"]["messages"][0]["content"]  # the core's architect prompt


def test_a_user_tool_keeps_its_name_against_a_builtin_and_loses_it_to_a_project_one(editor_factory, server, tmp_path):
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    # registered before the library loads; the built-in editor tool of that name arrives later and loses
    ed.lua("""require('mia').register_tool({ name = 'list_buffers', description = 'mine',
      execute = function() return 'the user tool ran' end })""")
    assert not runtime_started(ed)
    prompt(ed, "tool list_buffers {}")
    result = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result == "the user tool ran"
    assert ed.lua("return require('mia.tools').register({ name = 'list_buffers', description = 'plugin', execute = function() end }, 'plugin')") is False
    assert ed.lua("return require('mia.tools').register({ name = 'list_buffers', description = 'project', execute = function() return 'project ran' end }, 'project')") is True
    prompt(ed, "tool list_buffers {}")
    result = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] == "tool"][-1]["content"]
    assert result == "project ran"
    listed = {t["name"]: t["source"] for t in ed.lua("return require('mia.tools').list()")}
    assert listed["list_buffers"] == "project"
    with pytest.raises(NvimError, match=r'unknown source "vendor" \(sources: builtin, mcp, plugin, user, project\)'):
        ed.lua("require('mia.tools').register({ name = 'x', description = 'x', execute = function() end }, 'vendor')")


def test_the_names_setup_checks_without_the_library_are_the_cores(editor):
    fallback = editor.lua("return require('mia.config')._fallback")
    editor.lua("require('mia')._core()")
    assert editor.lua("return require('mia.config')._names()") == fallback
    # and once loaded, setup() checks against the core's own list
    with pytest.raises(NvimError, match=r"`providers.x.kind` must be one of anthropic, openai, gemini, openai_compatible, azure_openai"):
        editor.lua("require('mia').setup({ providers = { x = { kind = 'olama' } } })")


def test_what_a_user_who_sets_nothing_sees_is_the_cores_configuration(editor_factory, server):
    """The defaults exist once, in the core (crates/engine/src/config.rs):
    the statusline, :checkhealth and the request the model gets show them."""
    ed = editor_factory(setup={})
    options = ed.lua("return require('mia.config').options")
    keys = ed.lua("return require('mia.settings').shared().config_keys")
    assert sorted(keys) == sorted(options)
    core = ed.lua("return require('mia.settings').shared().config_defaults")
    model = core["model"].split("/", 1)[1]
    assert ed.lua("return require('mia').statusline()") == f"mia {core['mode']} {model} $0.00"
    report = health_report(ed)
    cp = core["checkpoints"]
    assert (f"checkpoints: kept {cp['max_age_days']} days, at most {cp['max_mb']} MB, files up to "
            f"{cp['max_file_kb']} KB, scans up to {cp['max_scan_files']} files") in report, report
    assert f"default model: {core['model']}" in report
    # the model's system prompt is the core's default when `system` is unset
    ed.lua("require('mia').setup(...)", scenario_setup(server))
    prompt(ed, "echo hello")
    system = posts(server)[-1]["body"]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith(core["system"]), system
