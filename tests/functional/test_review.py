"""Reviewing every edit before it lands (issue 11): the diff float and its
keys, staged hunks in the buffer, conflicts with unsaved changes, and
:Mia checkpoints / :Mia undo — in a real headless Neovim, with real files
and real keys, against the scenario server."""

import json

import pytest

from conftest import scenario_setup, tool_results

TEN = "".join(f"line{i}\n" for i in range(1, 11))


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    (p / "a.txt").write_text("foo\n")
    (p / "ten.txt").write_text(TEN)
    return p


@pytest.fixture
def agent(editor_factory, server, project):
    def make(**extra):
        ed = editor_factory(setup=scenario_setup(server, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        return ed
    return make


def last_result(server):
    return tool_results(server)[-1][-1]["content"]


def call(ed, tool, args):
    """Sends a prompt that makes the scripted model call `tool`; does not wait."""
    ed.nvim.command(f"Mia prompt tool {tool} {json.dumps(args)}")


def done(ed):
    ed.wait("require('mia.chat').state() == 'done'")


def review_lines(ed):
    ed.wait("require('mia.review').showing_lines() ~= nil")
    return ed.lua("return require('mia.review').showing_lines()")


def keys(ed, text):
    ed.nvim.input(text)


def test_the_diff_shows_exactly_the_proposed_hunk_and_accept_lands_it(agent, server, project):
    ed = agent()
    call(ed, "edit_file", {"path": "ten.txt", "old_string": "line5\n", "new_string": "LINE five\n"})
    assert review_lines(ed) == [
        "ten.txt",
        "@@ -2,7 +2,7 @@",
        " line2",
        " line3",
        " line4",
        "-line5",
        "+LINE five",
        " line6",
        " line7",
        " line8",
    ]
    # word-level highlight on the changed words only
    words = ed.lua("""
      local buf = vim.api.nvim_win_get_buf(0)
      local ns = vim.api.nvim_get_namespaces().mia_review
      local out = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
        if m[4].hl_group == 'DiffText' then
          local line = vim.api.nvim_buf_get_lines(buf, m[2], m[2] + 1, false)[1]
          table.insert(out, line:sub(m[3] + 1, m[4].end_col))
        end
      end
      return out
    """)
    assert words == ["line5", "LINE five"]
    assert (project / "ten.txt").read_text() == TEN  # nothing lands before the answer
    keys(ed, "a")
    done(ed)
    assert (project / "ten.txt").read_text() == TEN.replace("line5\n", "LINE five\n")
    assert last_result(server).startswith("Edited `ten.txt`")


def test_rejecting_with_a_reason_leaves_the_file_and_tells_the_model_why(agent, server, project):
    ed = agent()
    before = (project / "ten.txt").read_bytes()
    call(ed, "write_file", {"path": "ten.txt", "content": "gone\n"})
    review_lines(ed)
    keys(ed, "r")
    keys(ed, "keep the numbered lines<CR>")
    done(ed)
    assert (project / "ten.txt").read_bytes() == before
    result = last_result(server)
    assert "rejected" in result and "keep the numbered lines" in result


def test_accept_for_the_file_does_not_ask_again_in_the_session(agent, server, project):
    ed = agent()
    call(ed, "edit_file", {"path": "ten.txt", "old_string": "line1\n", "new_string": "one\n"})
    review_lines(ed)
    keys(ed, "f")
    done(ed)
    ed.lua("_G.reviews = 0; local r = require('mia.review'); local ask = r.ask; r.ask = function(...) reviews = reviews + 1; return ask(...) end")
    call(ed, "edit_file", {"path": "ten.txt", "old_string": "line2\n", "new_string": "two\n"})
    done(ed)
    assert ed.lua("return reviews") == 0
    assert (project / "ten.txt").read_text().startswith("one\ntwo\nline3\n")


def test_an_edited_proposal_is_what_lands_and_the_model_is_told_it_was_modified(agent, server, project):
    ed = agent()
    call(ed, "write_file", {"path": "a.txt", "content": "proposed\n"})
    review_lines(ed)
    keys(ed, "e")
    ed.wait("vim.api.nvim_buf_get_name(0):find('mia://proposal/a.txt', 1, true) ~= nil")
    assert ed.lua("return vim.bo.buftype") == "acwrite"
    keys(ed, "ccchanged by me<Esc>:w<CR>")
    done(ed)
    assert (project / "a.txt").read_text() == "changed by me\n"
    result = last_result(server)
    assert "The user changed your proposal" in result and "changed by me" in result


def test_leaving_the_proposal_without_writing_returns_to_the_review(agent, server, project):
    ed = agent()
    call(ed, "write_file", {"path": "a.txt", "content": "proposed\n"})
    review_lines(ed)
    keys(ed, "e")
    ed.wait("vim.api.nvim_buf_get_name(0):find('mia://proposal/', 1, true) ~= nil")
    keys(ed, ":q!<CR>")
    assert review_lines(ed)[-1] == "+proposed"
    keys(ed, "q")  # dismissed: rejected without a reason
    done(ed)
    assert (project / "a.txt").read_text() == "foo\n"
    assert "rejected" in last_result(server)


def test_hunks_mode_accepting_one_of_two_hunks_writes_only_that_hunk(agent, server, project):
    ed = agent(review="hunks")
    ed.nvim.command(f"edit {project / 'ten.txt'}")
    ed.nvim.command("nnoremap <buffer> ]h <Cmd>let g:mine = 1<CR>")  # the user's own, hidden while hunks are pending
    new = TEN.replace("line2\n", "TWO\n").replace("line9\n", "NINE\n")
    call(ed, "write_file", {"path": "ten.txt", "content": new})
    ed.wait("#require('mia.review').pending() == 2")
    qf = ed.lua("return vim.tbl_map(function(i) return { i.lnum, i.text } end, vim.fn.getqflist())")
    assert [q[0] for q in qf] == [2, 9]
    assert all("pending hunk" in q[1] for q in qf)
    assert ed.lua("return vim.fn.fnamemodify(vim.api.nvim_buf_get_name(0), ':t')") == "ten.txt"
    assert (project / "ten.txt").read_text() == TEN  # pending hunks are not written
    keys(ed, "gg]h")
    assert ed.lua("return vim.api.nvim_win_get_cursor(0)[1]") == 2
    keys(ed, "\\a")
    ed.wait("#require('mia.review').pending() == 1")
    keys(ed, "]h\\r")
    done(ed)
    assert (project / "ten.txt").read_text() == TEN.replace("line2\n", "TWO\n")
    assert ed.lua("return vim.api.nvim_buf_get_lines(0, 0, 3, false)") == ["line1", "TWO", "line3"]
    assert ed.lua("return vim.bo.modified") is False
    assert "The user changed your proposal" in last_result(server)
    # no pending hunk: mia's keys are gone, the user's mapping is back
    assert ed.lua("return vim.fn.maparg('\\\\a', 'n')") == ""
    assert ed.lua("return vim.fn.maparg(']h', 'n')") == "<Cmd>let g:mine = 1<CR>"


def test_an_unsaved_buffer_is_never_overwritten_the_user_is_asked(agent, server, project):
    ed = agent(mode="code")
    ed.nvim.command(f"edit {project / 'a.txt'}")
    keys(ed, "ccmine<Esc>")
    ed.wait("vim.bo.modified")
    ed.lua("vim.ui.select = function(items, opts, cb) _G.asked = { prompt = opts.prompt, items = items }; cb(items[2], 2) end")
    call(ed, "write_file", {"path": "a.txt", "content": "theirs\n"})
    done(ed)
    assert ed.lua("return asked") == {
        "prompt": "`a.txt` has unsaved changes that mia's edit would replace",
        "items": ["Apply mia's edit and save", "Keep my changes (reject the edit)"],
    }
    assert ed.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 0, -1, false)", str(project / "a.txt")) == ["mine"]
    assert (project / "a.txt").read_text() == "foo\n"
    assert "kept their unsaved changes" in last_result(server)


def test_undo_restores_a_file_changed_by_bash_and_undo_again_restores_the_change(agent, server, project):
    ed = agent(mode="code", permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    ed.nvim.command(f"edit {project / 'a.txt'}")
    call(ed, "bash", {"command": "sed -i s/foo/bar/ a.txt"})
    done(ed)
    assert (project / "a.txt").read_text() == "bar\n"
    ed.nvim.command("Mia checkpoints")
    ed.wait("vim.bo.filetype == 'mia-checkpoints'")
    listed = "\n".join(ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert "turn “tool bash" in listed and "M a.txt  (bash)" in listed
    keys(ed, "q")
    ed.nvim.command("Mia undo")
    ed.wait(f"vim.fn.readfile('{project / 'a.txt'}')[1] == 'foo'")
    # the open, unmodified buffer shows the restored file
    ed.wait(f"vim.api.nvim_buf_get_lines(vim.fn.bufnr('{project / 'a.txt'}'), 0, -1, false)[1] == 'foo'")
    # the buffer may have been read again by a file-change check before the
    # undo's answer arrived: wait for the message itself
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('restored 1 file', 1, true) ~= nil")
    ed.nvim.command("Mia undo")
    ed.wait(f"vim.fn.readfile('{project / 'a.txt'}')[1] == 'bar'")
    ed.nvim.command("Mia checkpoints")
    ed.wait("vim.bo.filetype == 'mia-checkpoints'")
    listed = "\n".join(ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert listed.count("restore (:Mia undo)") == 2


def test_review_and_checkpoint_options_are_validated(editor_factory):
    ed = editor_factory()
    err = ed.lua("return select(2, pcall(require('mia').setup, { review = 'inline' }))")
    assert err == 'mia.setup: `review` must be "diff" (a diff float) or "hunks" (pending hunks in the buffer) (got "inline")'
    err = ed.lua("return select(2, pcall(require('mia').setup, { review_keys = { acept = 'a' } }))")
    assert err.startswith("mia.setup: `review_keys.acept` is not a review key (")
    err = ed.lua("return select(2, pcall(require('mia').setup, { checkpoints = { max_mb = -1 } }))")
    assert err == "mia.setup: `checkpoints.max_mb` must be a positive whole number (got -1)"
    ed.lua("require('mia').setup({ checkpoints = { max_mb = 1, max_file_kb = 2, max_scan_files = 50 } })")
    assert ed.lua("return require('mia.settings').agent().checkpoints") == {
        "max_age_days": 30, "max_bytes": 1048576, "max_file_bytes": 2048, "max_scan_files": 50}
    assert ed.lua("return vim.fn.getcompletion('Mia ch', 'cmdline')") == ["checkpoints"]
    assert ed.lua("return vim.fn.getcompletion('Mia un', 'cmdline')") == ["undo"]


def test_a_lua_tool_that_declares_an_edit_is_reviewed_as_a_diff(agent, server, project):
    ed = agent()
    ed.nvim.command(f"edit {project / 'ten.txt'}")
    call(ed, "apply_buffer_edit", {"path": "ten.txt", "start_line": 3, "end_line": 3, "text": "three"})
    lines = review_lines(ed)
    assert "-line3" in lines and "+three" in lines
    assert ed.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 2, 3, false)", str(project / "ten.txt")) == ["line3"]
    keys(ed, "a")
    done(ed)
    assert (project / "ten.txt").read_text() == TEN.replace("line3\n", "three\n")
    assert ed.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 2, 3, false)", str(project / "ten.txt")) == ["three"]


def test_checkhealth_names_the_review_mode(editor_factory):
    ed = editor_factory(setup={"review": "hunks"})
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert "review mode: hunks" in text
    assert "checkpoints: kept 30 days, at most 512 MB, files up to 4096 KB, scans up to 20000 files" in text


def test_hunks_mode_insertions_and_deletions_accepted_all_give_exactly_the_proposal(agent, server, project):
    ed = agent(review="hunks")
    new = TEN.replace("line1\n", "").replace("line5\n", "line5\ninserted\n") + "appended\n"
    call(ed, "write_file", {"path": "ten.txt", "content": new})
    ed.wait("#require('mia.review').pending() == 3")
    ed.nvim.command("Mia review accept_all")
    done(ed)
    assert (project / "ten.txt").read_text() == new
    assert "Wrote" in last_result(server) or "ten.txt" in last_result(server)
    # a new file in hunks mode: rejected, nothing is created
    call(ed, "write_file", {"path": "fresh.txt", "content": "a\nb\n"})
    ed.wait("#require('mia.review').pending() == 1")
    ed.nvim.command("Mia review reject_all")
    done(ed)
    assert not (project / "fresh.txt").exists()
    assert "rejected" in last_result(server)


def test_stopping_the_answer_closes_its_review_and_writes_nothing(agent, server, project):
    ed = agent()
    call(ed, "write_file", {"path": "a.txt", "content": "never\n"})
    review_lines(ed)
    ed.nvim.command("Mia stop")
    ed.wait("require('mia.chat').state() == 'cancelled'")
    ed.wait("require('mia.review').showing_lines() == nil")
    assert (project / "a.txt").read_text() == "foo\n"
    # the next review shows as usual
    call(ed, "write_file", {"path": "a.txt", "content": "next\n"})
    assert review_lines(ed)[-1] == "+next"
    keys(ed, "a")
    done(ed)
    assert (project / "a.txt").read_text() == "next\n"


def test_undo_leaves_a_buffer_with_unsaved_changes_alone_and_says_so(agent, server, project):
    ed = agent(mode="code", permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    call(ed, "bash", {"command": "sed -i s/foo/bar/ a.txt"})
    done(ed)
    ed.nvim.command(f"edit {project / 'a.txt'}")
    keys(ed, "ccmine<Esc>")
    ed.wait("vim.bo.modified")
    ed.nvim.command("Mia undo")
    ed.wait(f"vim.fn.readfile('{project / 'a.txt'}')[1] == 'foo'")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('unsaved changes', 1, true) ~= nil")
    assert ed.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 0, -1, false)", str(project / "a.txt")) == ["mine"]
