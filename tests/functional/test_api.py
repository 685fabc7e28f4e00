"""The Lua API, the loader, :checkhealth and the bridge's guarantees, in a real Neovim."""

import os
import shutil
import time

import pytest
from pynvim.api.common import NvimError

from conftest import LIB, ROOT, scenario_setup

STREAM = """
local events = {}
_G.got = { deltas = {}, done = nil, err = nil }
_G.h = require('mia').stream(..., {
  on_delta = function(d) table.insert(got.deltas, d) end,
  on_done = function(d) got.done = d end,
  on_error = function(e) got.err = e end,
})
return h.id
"""


def test_stream_api_delivers_text_usage_and_done(editor):
    editor.lua(STREAM, {"messages": [{"role": "user", "content": "echo a b c"}], "system": "sys words"})
    editor.wait("got.done ~= nil or got.err ~= nil")
    got = editor.lua("return got")
    assert got.get("err") is None
    text = "".join(d["text"] for d in got["deltas"] if d["type"] == "text")
    assert text == "echo a b c"
    usage_deltas = [d for d in got["deltas"] if d["type"] == "usage"]
    # the scenario server counts words of every message: 2 (system) + 4 (user)
    assert usage_deltas[-1]["usage"]["input_tokens"] == 6
    done = got["done"]
    assert done["text"] == "echo a b c"
    assert done["stop_reason"] == "end_turn"
    assert done["usage"]["input_tokens"] == 6 and done["usage"]["output_tokens"] == 4
    assert done["usage"]["estimated"] is False
    assert done["cost"] == {"known": False}
    assert done["tool_calls"] == []


def test_stream_handle_cancel_reports_cancelled(editor):
    editor.lua(STREAM, {"messages": [{"role": "user", "content": "slow 1000 100"}]})
    editor.wait("#got.deltas > 0")
    editor.lua("h:cancel()")
    editor.wait("got.err ~= nil")
    err = editor.lua("return got.err")
    assert err["class"] == "cancelled" and err["retryable"] is False
    assert editor.lua("return got.done == nil") is True


def test_one_callback_error_does_not_lose_another_streams_text(editor):
    editor.lua("""
      _G.good = { text = '', done = false }
      require('mia').stream({ messages = { { role = 'user', content = 'slow 40 400' } } }, {
        on_delta = function() error('boom in a user callback') end,
      })
      require('mia').stream({ messages = { { role = 'user', content = 'slow 40 400' } } }, {
        on_delta = function(d) if d.type == 'text' then good.text = good.text .. d.text end end,
        on_done = function() good.done = true end,
      })
    """)
    editor.wait("good.done")
    assert editor.lua("return good.text") == "".join("w%05d " % i for i in range(40))
    editor.lua("vim.wait(50)")
    assert "boom in a user callback" in editor.messages()


def test_invalid_request_is_a_clear_lua_error(editor):
    with pytest.raises(NvimError, match=r"request.messages: expected table, got nil"):
        editor.lua("require('mia').stream({ model = 'scn/x' }, {})")
    with pytest.raises(NvimError, match=r"a message needs `content`"):
        editor.lua("require('mia').stream({ messages = { { role = 'user' } } }, {})")


def test_unknown_provider_lists_the_configured_ones(editor):
    editor.lua(STREAM, {"model": "nope/x", "messages": [{"role": "user", "content": "hi"}]})
    editor.wait("got.err ~= nil")
    err = editor.lua("return got.err")
    assert err["class"] == "invalid_request"
    assert err["message"] == (
        "unknown provider `nope` in model `nope/x`. Configured providers: anthropic, gemini, ollama, openai, scn. "
        "Add it under `providers` in setup()."
    )


def test_the_plugin_loads_nothing_and_setup_loads_the_library_but_starts_nothing(editor_factory, server):
    editor = editor_factory()
    # the plugin alone: :Mia is defined, the library is not mapped into the process
    assert "libmia_core" not in open(f"/proc/{editor.pid}/maps").read()
    assert editor.lua("return require('mia.core').is_loaded()") is False
    assert editor.lua("return vim.fn.exists(':Mia')") == 2
    # setup() loads it to check the options with the core's own type, and starts nothing
    editor.lua("require('mia').setup(...)", scenario_setup(server))
    assert editor.lua("return require('mia.core').is_loaded()") is True
    assert editor.lua("return require('mia_core').status().runtime_started") is False
    assert editor.lua("return package.loaded['mia.api'] == nil or not package.loaded['mia.api']._started") is True
    editor.nvim.command("Mia prompt echo now")
    editor.wait("require('mia.chat').state() == 'done'")
    lib_name = os.path.basename(editor.lua("return require('mia.core').lib_path()"))
    assert lib_name in open(f"/proc/{editor.pid}/maps").read()


def test_subcommands_complete(editor):
    assert editor.lua("return vim.fn.getcompletion('Mia ', 'cmdline')") == ["prompt", "edit", "agent", "stop", "paste", "open", "new", "sessions", "rename", "mode", "tools", "context", "costs", "clear", "health",
                                                                                "checkpoints", "undo", "review", "mcp", "install"]
    assert editor.lua("return vim.fn.getcompletion('Mia st', 'cmdline')") == ["stop"]
    assert editor.lua("return vim.fn.getcompletion('Mia cont', 'cmdline')") == ["context"]
    assert editor.lua("return vim.fn.getcompletion('Mia review a', 'cmdline')") == ["accept", "accept_all"]


def test_unknown_subcommand_lists_the_available_ones(editor):
    with pytest.raises(NvimError, match="mia: unknown subcommand `frobnicate`. Available: agent, checkpoints, clear, context, costs, edit, health, install, mcp, mode, new, open, paste, prompt, rename, review, sessions, stop, tools, undo"):
        editor.nvim.command("Mia frobnicate")


def test_setup_rejects_a_bad_provider_kind_with_one_clear_error(editor):
    with pytest.raises(NvimError, match=r'mia.setup: `providers.x.kind` must be one of anthropic, openai, gemini, openai_compatible, azure_openai, ollama \(got "olama"\)'):
        editor.lua("require('mia').setup({ providers = { x = { kind = 'olama' } } })")


def test_library_missing_says_what_to_run(editor_factory, server):
    ed = editor_factory(env={"MIA_CORE_PATH": "/nonexistent/libmia_core.so"}, setup=scenario_setup(server))
    with pytest.raises(NvimError) as exc:
        ed.nvim.command("Mia prompt hello")
    msg = str(exc.value)
    assert "mia: the native library is not built (no /nonexistent/libmia_core.so). Run `:Mia install` (lazy.nvim: `:Lazy build " + ROOT.name + "`) or `cargo build --release` in " + str(ROOT) in msg
    assert "module 'mia_core' not found" not in msg and "traceback" not in msg
    assert ed.chat_text() == ""  # nothing half-done in the chat


def test_library_from_another_version_is_refused(editor_factory, server):
    ed = editor_factory()
    ed.lua("package.loaded['mia.version'] = { version = '0.0.9', protocol = 1 }")
    ed.lua("require('mia').setup(...)", scenario_setup(server))  # setup() says nothing: the command does
    with pytest.raises(NvimError) as exc:
        ed.nvim.command("Mia prompt hello")
    assert "mia: the native library is version 0.1.0 but the Lua code is version 0.0.9: it was built from another version of mia. Run `:Mia install` (lazy.nvim: `:Lazy build " + ROOT.name + "`) or `cargo build --release` in " in str(exc.value)


def plugin_copy(plugin):
    """A copy of the plugin with a built library in it; returns the library."""
    for part in ("lua", "plugin", "src", "crates"):
        shutil.copytree(ROOT / part, plugin / part)
    shutil.copy(ROOT / "Cargo.toml", plugin / "Cargo.toml")
    (plugin / "target" / "release").mkdir(parents=True)
    lib = plugin / "target" / "release" / "libmia_core.so"
    shutil.copy(LIB, lib)
    return lib


def test_library_older_than_its_sources_is_refused(editor_factory, server, tmp_path):
    plugin = tmp_path / "plugin-copy"
    lib = plugin_copy(plugin)
    old = time.time() - 3600
    os.utime(lib, (old, old))
    ed = editor_factory(setup=None, env={"MIA_CORE_PATH": ""})
    ed.lua("vim.opt.rtp:remove(...); vim.opt.rtp:prepend(select(2, ...))", str(ROOT), str(plugin))
    ed.lua("for k in pairs(package.loaded) do if k:match('^mia') then package.loaded[k] = nil end end")
    ed.lua("require('mia').setup(...)", scenario_setup(server))
    with pytest.raises(NvimError) as exc:
        ed.nvim.command("Mia prompt hello")
    assert "was built from an older version of the code (" in str(exc.value)
    assert "Run `:Mia install` (lazy.nvim: `:Lazy build plugin-copy`) or `cargo build --release` in " + str(plugin) in str(exc.value)


def test_only_the_librarys_own_inputs_make_it_stale(editor_factory, server, tmp_path):
    """cargo's dep-info next to the library names its inputs: a newer
    Cargo.toml (say, a test dependency, which does not rebuild the library)
    leaves it usable; a newer source it was built from does not."""
    plugin = tmp_path / "plugin copy"
    lib = plugin_copy(plugin)
    telemetry = plugin / "crates" / "engine" / "src" / "telemetry" / "mod.rs"
    inputs = [plugin / "src" / "lib.rs", telemetry, plugin / "lua" / "mia" / "version.lua"]
    (plugin / "target" / "release" / "libmia_core.d").write_text(
        f"{lib}: " + " ".join(str(f).replace(" ", "\\ ") for f in inputs) + "\n")
    old = time.time() - 3600
    for f in [lib, *inputs]:
        os.utime(f, (old - 60, old - 60) if f != lib else (old, old))

    def first_prompt():
        ed = editor_factory(setup=None, env={"MIA_CORE_PATH": ""})
        ed.lua("vim.opt.rtp:remove(...); vim.opt.rtp:prepend(select(2, ...))", str(ROOT), str(plugin))
        ed.lua("for k in pairs(package.loaded) do if k:match('^mia') then package.loaded[k] = nil end end")
        ed.lua("require('mia').setup(...)", scenario_setup(server))
        ed.nvim.command("Mia prompt echo fresh enough")
        return ed

    # Cargo.toml and every other file in the copy are newer than the library.
    ed = first_prompt()
    ed.wait("require('mia.chat').state() == 'done'")
    assert "fresh enough" in ed.chat_text()
    os.utime(telemetry)
    with pytest.raises(NvimError) as exc:
        first_prompt()
    assert "was built from an older version of the code (" in str(exc.value)
    assert "telemetry/mod.rs changed since" in str(exc.value), str(exc.value)


def test_reloading_the_module_reuses_the_runtime(editor):
    editor.nvim.command("Mia prompt echo first")
    editor.wait("require('mia.chat').state() == 'done'")
    # a second luaopen over the same process statics must work and stream
    again = editor.lua("""
      local core = require('mia.core')
      local opener = package.loadlib(core.lib_path(), 'luaopen_mia_core')
      local m = opener()
      return { m.version, m.init({}) }
    """)
    assert again[0] == "0.1.0" and again[1] > 0
    editor.nvim.command("Mia prompt echo second")
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text().endswith("echo second")


def test_quit_while_streaming_exits_promptly(editor):
    editor.nvim.command("Mia prompt slow 100000 100")
    editor.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] > 0")
    pid = editor.pid
    try:
        editor.nvim.command("qa!")
    except Exception:
        pass  # the RPC channel closes with the process
    for _ in range(1000):  # a guard against a hang, not a timing assertion
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split()[2] == "Z":
                return
    pytest.fail("Neovim did not exit within 10 s of :qa! while streaming")


def test_checkhealth_reports_library_providers_and_never_the_key(editor_factory, server):
    secret = "sk-live-must-not-appear-0123456789"
    ed = editor_factory(env={"OPENAI_API_KEY": secret}, setup=scenario_setup(server))
    ed.nvim.command("checkhealth mia")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    assert "Neovim 0." in report
    assert "library loaded: version 0.1.0, protocol 1 (matches)" in report
    acp = ROOT / "target" / "release" / "mia-acp"
    assert f"{acp}, version 0.1.0: an ACP client starts it as `{acp}`" in report
    assert "openai (openai) https://api.openai.com/v1: $OPENAI_API_KEY is set" in report
    assert "anthropic (anthropic) https://api.anthropic.com: $ANTHROPIC_API_KEY is NOT set" in report
    assert "scn (openai_compatible) " + server.base_url + ": no API key needed" in report
    assert "log file: " in report and "data directory: " in report
    assert secret not in report


def test_checkhealth_vim_deprecated_lists_nothing_of_mias(editor_factory, server):
    """Neovim 0.11 records every call of an API it deprecated (vim.validate's
    table form, for one) and lists it under :checkhealth vim.deprecated; a
    user who runs it must not find mia there after using its API."""
    ed = editor_factory(setup=scenario_setup(server))
    ed.nvim.command("Mia prompt echo hi")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.lua("""
      local mia = require('mia')
      mia.register_tool({ name = 'probe', description = 'd', execute = function() return 'ok' end })
      mia.register_command({ name = 'probe', description = 'd', run = function() end })
      mia.register_transform_hook({ name = 'probe', phase = 'pre_request', fn = function(r) return r end })
      mia.sessions.list({}, function() end)
    """)
    ed.lua(STREAM, {"messages": [{"role": "user", "content": "echo via the api"}]})
    ed.wait("got.done ~= nil or got.err ~= nil")
    for bad in ("require('mia').register_tool({ name = 1 })", "require('mia').stream({}, {})"):
        with pytest.raises(NvimError, match=r"expected (string|table), got (number|nil)"):
            ed.lua(bad)
    ed.nvim.command("checkhealth vim.deprecated")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    if ed.lua("return vim.fn.has('nvim-0.11')") == 1:
        assert "No deprecated functions detected" in report, report
    assert "/lua/mia/" not in report, report


def test_a_failed_drain_mid_stream_is_reported_and_the_text_keeps_coming(editor):
    """Between frames the core holds its wake back and the next frame's
    drain comes from a timer. If a drain fails there, it is reported once
    and tried again a frame later, so the answer keeps streaming instead of
    waiting for the turn's end."""
    ed = editor
    ed.nvim.command("Mia prompt slow 100 50")  # 2 s
    ed.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 7 * 5")
    ed.lua("""
      local core = require('mia.core').get()
      local drain = core.drain
      core.drain = function(...)
        core.drain = drain
        error('injected drain failure')
      end
    """)
    ed.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 7 * 50"
            " or require('mia.chat').state() ~= 'streaming'")
    assert ed.state() == "streaming", "the text waited for the end of the turn"
    ed.wait("require('mia.chat').state() == 'done'")
    assert "".join("w%05d " % i for i in range(100)).rstrip() in ed.chat_text()
    assert ed.messages().count("injected drain failure") == 1
