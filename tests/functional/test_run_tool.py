"""`mia_core.run_tool`: the user's own Lua runs one registered tool directly
(no model, no permission question), in a real Neovim. A Lua tool's code runs
on the main thread and answers back through the core, every time."""

from conftest import ROOT

RUN = """
local name, args, root, times = ...
_G.ran = { done = nil, err = nil }
local core = require('mia')._core()
local h = require('mia.core').call(core.run_tool, name, args, root, times)
require('mia.bridge').watch(h.id, {
  on_done = function(r) ran.done = r end,
  on_error = function(e) ran.err = e end,
})
"""


def run(editor, name, args, times=1):
    editor.lua(RUN, name, args, str(ROOT), times)
    editor.wait("ran.done ~= nil or ran.err ~= nil")
    return editor.lua("return ran")


def test_a_lua_tool_runs_on_the_main_thread_each_time_it_is_asked(editor):
    editor.lua("""
      _G.calls = 0
      require('mia').register_tool({
        name = 'tally',
        description = 'counts its calls',
        parameters = { type = 'object', properties = { step = { type = 'integer' } }, required = { 'step' } },
        execute = function(args)
          calls = calls + args.step
          return 'tally ' .. calls
        end,
      })
    """)
    got = run(editor, "tally", {"step": 2}, times=3)
    assert got.get("err") is None, got
    assert got["done"]["content"] == "tally 6"
    assert got["done"]["is_error"] is False
    assert got["done"]["elapsed_us"] >= 0
    assert editor.lua("return calls") == 6


def test_a_builtin_tool_reads_a_file_of_the_given_root(editor):
    got = run(editor, "read_file", {"path": "Cargo.toml"})
    assert got.get("err") is None, got
    assert 'name = "mia"' in got["done"]["content"]


def test_arguments_that_miss_the_schema_come_back_as_the_tools_error(editor):
    got = run(editor, "read_file", {"nope": 1})
    assert got.get("err") is None, got
    assert got["done"]["is_error"] is True
    assert "Invalid arguments for `read_file`" in got["done"]["content"]


def test_an_unknown_tool_is_an_error_naming_the_tools_there_are(editor):
    got = run(editor, "no_such_tool", {})
    assert got.get("done") is None, got
    assert got["err"]["class"] == "invalid_request"
    assert "no tool named `no_such_tool`" in got["err"]["message"]
    assert "read_file" in got["err"]["message"]
