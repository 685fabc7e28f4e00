"""Where edits land (issue: review before it lands): the checks every edit
passes before it is written, and Lua tools that declare an edit. Real
Neovim, real files, the scenario server as the model."""

import os
import time

import pytest

from test_agent import agent, project, prompt, tool_results  # noqa: F401  (fixtures)


def bump(path, text):
    """Rewrites `path` behind Neovim's back, with a visibly newer time."""
    path.write_text(text)
    later = time.time() + 5
    os.utime(path, (later, later))


def lines_of(ed, path):
    return ed.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 0, -1, false)", str(path))


def focus(ed, path):
    """Goes to the window that shows `path` (the chat took the cursor)."""
    assert ed.lua("return vim.fn.win_gotoid(vim.fn.bufwinid(...))", str(path)) == 1


def test_a_file_changed_on_disk_since_the_model_read_it_is_not_edited(agent, server, project):
    ed = agent(mode="code")
    prompt(ed, 'tool read_file {"path": "a.txt"}')
    bump(project / "a.txt", "foo, and the user's own change\n")
    prompt(ed, 'tool edit_file {"path": "a.txt", "old_string": "foo", "new_string": "bar"}')
    result = tool_results(server)[-1][-1]["content"]
    assert "changed on disk since you last read it" in result
    assert (project / "a.txt").read_text() == "foo, and the user's own change\n"
    # Read again, the edit goes through.
    prompt(ed, 'tool read_file {"path": "a.txt"}')
    prompt(ed, 'tool edit_file {"path": "a.txt", "old_string": "foo", "new_string": "bar"}')
    assert (project / "a.txt").read_text() == "bar, and the user's own change\n"


def test_a_file_changed_behind_its_unmodified_buffer_is_not_overwritten(agent, server, project):
    ed = agent(mode="code")
    ed.nvim.command(f"edit {project / 'a.txt'}")
    bump(project / "a.txt", "changed by another program\n")
    prompt(ed, 'tool edit_file {"path": "a.txt", "old_string": "foo", "new_string": "bar"}')
    result = tool_results(server)[-1][-1]["content"]
    assert "changed on disk since it was loaded in the editor" in result and ":edit" in result
    assert (project / "a.txt").read_text() == "changed by another program\n"
    assert lines_of(ed, project / "a.txt") == ["foo"]
    # Reloaded, the buffer is current and the edit lands in it.
    focus(ed, project / "a.txt")
    ed.nvim.command("edit!")
    prompt(ed, 'tool edit_file {"path": "a.txt", "old_string": "another", "new_string": "a third"}')
    assert (project / "a.txt").read_text() == "changed by a third program\n"
    assert lines_of(ed, project / "a.txt") == ["changed by a third program"]


def test_edits_outside_the_project_are_refused_before_any_review(agent, server, project, tmp_path):
    ed = agent()  # ask mode: edits inside the project would be reviewed
    prompt(ed, 'tool write_file {"path": "../outside.txt", "content": "x"}')
    assert "outside" in tool_results(server)[-1][-1]["content"]
    assert not (tmp_path / "outside.txt").exists()
    floats = ed.lua("return #vim.tbl_filter(function(w) return vim.api.nvim_win_get_config(w).relative ~= '' end,"
                    " vim.api.nvim_list_wins())")
    assert floats == 0


UPPER_TOOL = """
  require('mia').register_tool({
    name = 'shout', description = 'Upper-cases a file', subject = 'path',
    parameters = { type = 'object', properties = { path = { type = 'string' } }, required = { 'path' } },
    edit = function(args, ctx)
      local text = table.concat(vim.fn.readfile(ctx.subject.path), '\\n') .. '\\n'
      return { content = text:upper(), message = 'shouted ' .. ctx.subject.relative }
    end,
  })
"""


def test_a_lua_tool_that_declares_an_edit_lands_it_like_the_built_in_tools(agent, server, project):
    ed = agent(mode="code")
    ed.lua(UPPER_TOOL)
    prompt(ed, 'tool shout {"path": "a.txt"}')
    assert tool_results(server)[-1][-1]["content"] == "shouted a.txt"
    assert (project / "a.txt").read_text() == "FOO\n"
    # Its edit is checked like any other: changed since the model read it.
    prompt(ed, 'tool read_file {"path": "a.txt"}')
    bump(project / "a.txt", "other\n")
    prompt(ed, 'tool shout {"path": "a.txt"}')
    assert "changed on disk since you last read it" in tool_results(server)[-1][-1]["content"]
    assert (project / "a.txt").read_text() == "other\n"


def test_a_lua_edit_tool_must_name_its_file_and_return_content(agent, server, project):
    ed = agent(mode="code")
    err = ed.lua("""
      local ok, err = pcall(require('mia').register_tool, { name = 'bad', description = 'x',
        edit = function() return { content = '' } end })
      return err
    """)
    assert "needs a path `subject`" in err
    ed.lua("""
      require('mia').register_tool({ name = 'broken', description = 'x', subject = 'path',
        parameters = { type = 'object', properties = { path = { type = 'string' } } },
        edit = function() return 42 end })
    """)
    prompt(ed, 'tool broken {"path": "a.txt"}')
    assert "must return { content = <the whole new text> }" in tool_results(server)[-1][-1]["content"]
    assert (project / "a.txt").read_text() == "foo\n"


def test_apply_buffer_edit_lands_as_one_undo_step_and_is_saved(agent, server, project):
    (project / "a.txt").write_text("one\ntwo\nthree\n")
    ed = agent(mode="code")
    ed.nvim.command(f"edit {project / 'a.txt'}")
    prompt(ed, 'tool apply_buffer_edit {"path": "a.txt", "start_line": 2, "end_line": 3, "text": "2\\n3\\n3.5"}')
    assert tool_results(server)[-1][-1]["content"] == "replaced lines 2-3 of a.txt with 3 lines"
    assert lines_of(ed, project / "a.txt") == ["one", "2", "3", "3.5"]
    assert (project / "a.txt").read_text() == "one\n2\n3\n3.5\n"
    focus(ed, project / "a.txt")
    ed.nvim.input("u")
    ed.wait("vim.api.nvim_buf_line_count(0) == 3")
    assert lines_of(ed, project / "a.txt") == ["one", "two", "three"]


def test_an_edit_to_a_file_hard_linked_from_outside_the_project_is_refused(agent, server, project, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.link(outside, project / "shared.txt")
    ed = agent(mode="code")
    # Open in a buffer, Neovim would save it in place: through the link, outside.
    ed.nvim.command(f"edit {project / 'shared.txt'}")
    prompt(ed, 'tool write_file {"path": "shared.txt", "content": "pwned\\n"}')
    result = tool_results(server)[-1][-1]["content"]
    assert outside.read_text() == "precious\n"
    assert "is a hard link (2 names share its content)" in result, result
    assert (project / "shared.txt").read_text() == "precious\n"
    assert lines_of(ed, project / "shared.txt") == ["precious"]
