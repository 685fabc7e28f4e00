"""setup() as a user calls it from init.lua: the core's one configuration
type (crates/engine/src/config.rs) refuses a misspelt key at any depth with
its path, and the user sees one error while Neovim goes on."""

import subprocess

import pytest

from conftest import ROOT, nvim_binary, scenario_setup


def start_with_init(tmp_path, init_lua):
    """Starts Neovim as a user does, with `init_lua` as the user's init.lua,
    and quits at once; what it printed (headless: the screen's messages go
    to stderr) and whether it got to run a command after the init."""
    init = tmp_path / "init.lua"
    init.write_text(f"vim.opt.rtp:prepend({str(ROOT)!r})\n" + init_lua)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    r = subprocess.run(
        [nvim_binary(), "--headless", "-u", str(init), "-c", "lua io.stdout:write('still running')", "-c", "qa!"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    return r


@pytest.mark.parametrize("options, message", [
    ("{ providers = { openai = { api_kye = 'sk-not-here' } } }",
     "mia.setup: `providers.openai.api_kye` is not an option; did you mean `api_key`?"),
    ("{ modes = { review = { tool = { 'grep' } } } }",
     "mia.setup: `modes.review.tool` is not an option; did you mean `tools`?"),
    ("{ timeouts = { connect = 5000 } }",
     "mia.setup: `timeouts.connect` is not an option; did you mean `connect_ms`?"),
    ("{ tools = { max_turn = 5 } }",
     "mia.setup: `tools.max_turn` is not an option; did you mean `max_turns`?"),
    ("{ providers = { scn = { kind = 'openai_compatible', base_url = 'http://127.0.0.1:1', modles = { 'x' } } } }",
     "mia.setup: `providers.scn.modles` is not an option; did you mean `models`?"),
])
def test_a_misspelt_nested_key_in_init_lua_is_one_error_naming_its_path(tmp_path, options, message):
    r = start_with_init(tmp_path, f"require('mia').setup({options})\n")
    said = r.stdout + r.stderr
    assert message in said, said
    assert said.count("mia.setup:") == 1, said
    assert "sk-not-here" not in said  # the key's value is not shown, only its name
    assert "still running" in r.stdout, said  # Neovim went on past the error


def test_a_valid_init_lua_says_nothing(tmp_path):
    r = start_with_init(tmp_path, "require('mia').setup({ providers = { openai = { api_key_env = 'X' } }, "
                                  "modes = { review = { tools = { 'grep' } } }, rules = false, "
                                  "permissions = { rules = {} }, review_keys = { accept = false } })\n")
    assert r.stderr == "", r.stderr
    assert r.stdout == "still running"


def test_a_function_where_an_option_takes_none_is_refused_with_its_path(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server))
    result = ed.lua("return { pcall(require('mia').setup, { chat = { size = function() return 40 end } }) }")
    assert result[0] is False, "setup() took a function as chat.size"
    assert result[1] == "mia.setup: `chat.size` is a Lua function, which this option does not take (got <function 1>)"
    # the configuration in force is the one before
    assert ed.lua("return require('mia.config').get().model") == "scn/echo"
    assert ed.lua("return require('mia.config').get().chat.size") == 0
