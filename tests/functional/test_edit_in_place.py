"""`:[range]Mia edit {instruction}` (issue 50): the model's rewrite of a
range streams into the buffer as pending hunks and is reviewed like any
staged edit — in a real headless Neovim, with real keys, against the
scenario server (its `reply RATE JSON` / `replystall K JSON` scenarios
answer a given text, slowly or stopping mid-way)."""

import json

import pytest

from conftest import scenario_setup

LINES = [f"line{i}" for i in range(1, 11)]


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    (p / "code.py").write_text("\n".join(LINES) + "\n")
    return p


@pytest.fixture
def agent(editor_factory, server, project):
    def make(**extra):
        ed = editor_factory(setup=scenario_setup(server, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        return ed
    return make


def keys(ed, text):
    ed.nvim.input(text)


def typed(s):
    """Text as nvim_input reads it (a `<` starts a key name)."""
    return s.replace("<", "<lt>")


def instruction(answer, rate=0, stall=None):
    if stall is not None:
        return f"replystall {stall} {json.dumps(answer)}"
    return f"reply {rate} {json.dumps(answer)}"


def open_file(ed, project, name):
    ed.nvim.command(f"edit {project / name}")


def lines(ed):
    return ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")


def preview_text(ed):
    """The text the edit's preview shows (virtual lines in its namespace)."""
    return ed.lua("""
      local ns = vim.api.nvim_get_namespaces().mia_edit
      local out = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
        for _, vl in ipairs(m[4].virt_lines or {}) do
          local chunk = vl[1][1]:gsub('%s+$', '')
          table.insert(out, chunk)
        end
      end
      return out
    """)


def wait_preview(ed, text):
    """Waits until the preview shows a line starting with `text`."""
    ed.wait("(function() local ns = vim.api.nvim_get_namespaces().mia_edit if not ns then return false end "
            "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do "
            "for _, vl in ipairs(m[4].virt_lines or {}) do if vim.startswith(vl[1][1], " + json.dumps(text) + ") "
            "then return true end end end return false end)()")


def streaming(ed):
    return ed.lua("return require('mia.edit').streaming()")


def pending(ed):
    return ed.lua("return require('mia.review').pending()")


def wait_staged(ed):
    ed.wait("not require('mia.edit').streaming() and #require('mia.review').pending() > 0")


def edit_requests(server):
    return [r for r in server.requests() if r["method"] == "POST" and r["body"]]


def user_text(request):
    content = request["body"]["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content)


def test_a_visual_selection_streams_as_pending_text_accept_all_changes_exactly_those_lines_and_u_restores_them(
        agent, server, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "3GVjj:")
    keys(ed, typed("Mia edit " + instruction("NEW3\nNEW4\n", rate=2)) + "<CR>")
    wait_preview(ed, "NEW3")
    # Mid-stream: the proposal shows, the buffer's own text is untouched.
    assert streaming(ed)
    assert any(t.startswith("NEW3") for t in preview_text(ed))
    assert lines(ed) == LINES
    wait_staged(ed)
    assert preview_text(ed) == []
    assert [p["lnum"] for p in pending(ed)] == [3]
    assert lines(ed) == LINES
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES[:2] + ["NEW3", "NEW4"] + LINES[5:]
    # left modified, not written
    assert ed.lua("return vim.bo.modified")
    assert (project / "code.py").read_text() == "\n".join(LINES) + "\n"
    keys(ed, "u")
    ed.wait(f"vim.deep_equal(vim.api.nvim_buf_get_lines(0, 0, -1, false), {json.dumps(LINES).replace('[', '{').replace(']', '}')})")
    # The request carried the instruction, the selection and the file.
    text = user_text(edit_requests(server)[-1])
    assert "<selection>\nline3\nline4\nline5\n</selection>" in text
    assert "code.py (python)" in text


def test_reject_all_leaves_the_buffer_byte_identical(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "2GVj:")
    keys(ed, typed("Mia edit " + instruction("changed2\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review reject_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES
    assert not ed.lua("return vim.bo.modified")
    assert "0 of 1 hunk accepted" in ed.messages()


def test_a_prose_only_answer_changes_nothing_and_says_so(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "2GVj:")
    keys(ed, typed("Mia edit " + instruction("I cannot do that because these lines are fine as they are.")) + "<CR>")
    ed.wait("string.find(vim.api.nvim_exec2('messages', { output = true }).output, 'held no replacement') ~= nil")
    assert not streaming(ed)
    assert pending(ed) == []
    assert lines(ed) == LINES
    assert not ed.lua("return vim.bo.modified")


def test_code_fences_and_prose_around_them_are_stripped(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "4GV:")
    keys(ed, typed("Mia edit " + instruction("Here is the rewrite:\n```python\nx = 4\n```\nIt is shorter.")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES[:3] + ["x = 4"] + LINES[4:]


def test_typing_elsewhere_while_the_edit_streams_keeps_both_the_typing_and_the_proposal(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "5GVj:")
    keys(ed, typed("Mia edit " + instruction("A5\nA6\nA7\nA8\n", rate=3)) + "<CR>")
    ed.wait("#require('mia.edit').last_timing.frame_ns > 0")
    assert streaming(ed)
    # above the range (it moves down a line) and below it
    keys(ed, "ggOtyped above<Esc>Gotyped below<Esc>")
    ed.wait("vim.api.nvim_buf_line_count(0) == 12")
    assert streaming(ed)
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == ["typed above"] + LINES[:4] + ["A5", "A6", "A7", "A8"] + LINES[6:] + ["typed below"]


def test_typing_inside_the_target_lines_refuses_the_proposal(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "5GVj:")
    keys(ed, typed("Mia edit " + instruction("A5\nA6\nA7\nA8\n", rate=3)) + "<CR>")
    ed.wait("#require('mia.edit').last_timing.frame_ns > 0")
    keys(ed, "6GAmine<Esc>")
    ed.wait("not require('mia.edit').streaming()")
    msgs = ed.messages()
    assert msgs.count("the lines being edited changed") == 1
    assert pending(ed) == [] and preview_text(ed) == []
    assert lines(ed) == LINES[:5] + ["line6mine"] + LINES[6:]


@pytest.mark.parametrize("how", ["<C-c>", ":Mia stop<CR>"])
def test_cancelling_mid_stream_leaves_the_buffer_as_it_was(agent, project, how):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "2GVjj:")
    keys(ed, typed("Mia edit " + instruction("B2\nB3\nB4\n", stall=3)) + "<CR>")
    wait_preview(ed, "B2")
    keys(ed, how)
    ed.wait("not require('mia.edit').streaming()")
    assert "the edit was cancelled" in ed.messages()
    assert preview_text(ed) == [] and pending(ed) == []
    assert lines(ed) == LINES
    assert not ed.lua("return vim.bo.modified")
    # <C-c> is the buffer's own again
    assert ed.lua("return vim.fn.maparg('<C-c>', 'n')") == ""


def test_a_file_a_deny_rule_covers_is_refused_before_anything_is_sent(agent, server, project):
    (project / "secret").mkdir()
    (project / "secret" / "keys.py").write_text("a = 1\nb = 2\n")
    ed = agent(permissions={"rules": [{"tool": "read_file", "pattern": "secret/**", "action": "deny"}]})
    open_file(ed, project, "secret/keys.py")
    keys(ed, ":1,2Mia edit " + typed(instruction("x\n")) + "<CR>")
    ed.wait("string.find(vim.api.nvim_exec2('messages', { output = true }).output, 'is not edited') ~= nil")
    assert "denied by the rule `read_file` on `secret/**`" in ed.messages()
    assert edit_requests(server) == []
    assert lines(ed) == ["a = 1", "b = 2"] and pending(ed) == []


def test_a_buffer_with_unsaved_changes_edits_its_text_and_writes_nothing(agent, server, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, "3GAunsaved<Esc>")
    keys(ed, ":3,4Mia edit " + typed(instruction("C3\nC4\n")) + "<CR>")
    wait_staged(ed)
    assert "<selection>\nline3unsaved\nline4\n</selection>" in user_text(edit_requests(server)[-1])
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES[:2] + ["C3", "C4"] + LINES[4:]
    assert (project / "code.py").read_text() == "\n".join(LINES) + "\n"


def test_a_range_at_the_end_of_the_file(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, ":9,$Mia edit " + typed(instruction("E9\nE10\nE11\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES[:8] + ["E9", "E10", "E11"]
    keys(ed, ":w<CR>")
    ed.wait("not vim.bo.modified")
    assert (project / "code.py").read_text() == "\n".join(LINES[:8] + ["E9", "E10", "E11"]) + "\n"


def test_crlf_and_tab_indented_files_keep_their_line_endings_and_indentation(agent, server, project):
    (project / "dos.c").write_bytes(b"int f() {\r\n\treturn 1;\r\n}\r\n")
    ed = agent()
    open_file(ed, project, "dos.c")
    assert ed.lua("return vim.bo.fileformat") == "dos"
    keys(ed, ":2Mia edit " + typed(instruction("\tint x = 2;\r\n\treturn x;\r\n")) + "<CR>")
    wait_staged(ed)
    assert "<selection>\n\treturn 1;\n</selection>" in user_text(edit_requests(server)[-1])
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    keys(ed, ":w<CR>")
    ed.wait("not vim.bo.modified")
    assert (project / "dos.c").read_bytes() == b"int f() {\r\n\tint x = 2;\r\n\treturn x;\r\n}\r\n"


def test_without_a_range_the_paragraph_at_the_cursor_and_without_an_instruction_an_input_asks(agent, project):
    (project / "para.py").write_text("a = 1\n\nb = 2\nc = 3\n\nd = 4\n")
    ed = agent()
    open_file(ed, project, "para.py")
    keys(ed, "4G:Mia edit<CR>")
    ed.wait("vim.fn.mode() == 'c'")
    keys(ed, typed(instruction("bc = 23\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == ["a = 1", "", "bc = 23", "", "d = 4"]


def test_without_a_range_the_function_around_the_cursor_when_a_parser_exists(agent, project):
    (project / "f.lua").write_text("local x = 1\nlocal function f()\n  return 1\n\n  -- end\nend\nreturn f\n")
    ed = agent()
    open_file(ed, project, "f.lua")
    keys(ed, "3G:Mia edit " + typed(instruction("local function f()\n  return 2\nend\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == ["local x = 1", "local function f()", "  return 2", "end", "return f"]


def test_the_plug_mapping_edits_the_visual_selection(agent, project):
    ed = agent()
    ed.nvim.command("xmap <Space>e <Plug>(MiaEdit)")
    open_file(ed, project, "code.py")
    keys(ed, "7GVj<Space>e")
    ed.wait("vim.fn.mode() == 'c'")
    keys(ed, typed(instruction("P7\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == LINES[:6] + ["P7"] + LINES[8:]


def test_the_model_gets_the_rules_files_and_mentioned_files(agent, server, project):
    (project / "AGENTS.md").write_text("Always use four spaces.\n")
    (project / "helper.py").write_text("def helper():\n    return 42\n")
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n") + " use @helper.py") + "<CR>")
    wait_staged(ed)
    body = edit_requests(server)[-1]["body"]
    system = body["messages"][0]["content"]
    assert body["messages"][0]["role"] == "system" and "Always use four spaces." in system
    assert "return 42" in user_text(edit_requests(server)[-1])
    assert "tools" not in body or body["tools"] == []


def test_the_edit_is_counted_its_cost_shown_and_in_the_sessions_costs(agent, project):
    ed = agent(pricing={"scn/echo": {"input": 1.0, "output": 2.0}})
    open_file(ed, project, "code.py")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    wait_staged(ed)
    assert "mia: edit ready (" in ed.messages()
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    agents = [a["key"] for a in report["by_agent"]]
    assert "edit" in agents, report


def test_an_edit_with_an_unpriced_model_says_its_0_has_no_price(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    wait_staged(ed)
    said = ed.messages()
    assert "$0.00 (no price for scn/echo: add it to setup's `pricing`)" in said, said
    assert "cost unknown" not in said, said


def test_the_edit_goes_through_the_transform_hooks(agent, server, project):
    ed = agent()
    ed.lua("""require('mia').register_transform_hook({ name = 'tag', phase = 'pre_request',
      fn = function(req) req.extra_body = { edit_tag = 'seen' }; return req end })""")
    open_file(ed, project, "code.py")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    wait_staged(ed)
    assert edit_requests(server)[-1]["body"].get("edit_tag") == "seen"


def test_the_subcommand_and_its_mentions_complete(agent, project):
    (project / "helper.py").write_text("x = 1\n")
    ed = agent()
    assert "edit" in ed.nvim.call("getcompletion", "Mia ed", "cmdline")
    # the first completion starts gathering the project's files
    ed.nvim.call("getcompletion", "Mia edit fix it @hel", "cmdline")
    ed.wait("vim.tbl_contains(vim.fn.getcompletion('Mia edit fix it @hel', 'cmdline'), '@helper.py')")


def test_an_edit_that_cannot_start_says_why_and_leaves_nothing_behind(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    # a line that is not UTF-8 (a file read with ++bad=keep)
    ed.lua("vim.api.nvim_buf_set_lines(0, 0, 1, false, { 'caf\\xe9' })")
    keys(ed, ":1Mia edit " + typed(instruction("cafe\n")) + "<CR>")
    ed.wait("string.find(vim.api.nvim_exec2('messages', { output = true }).output, 'not UTF%-8 text') ~= nil")
    assert "line 1 is not UTF-8 text" in ed.messages()
    assert not streaming(ed)
    assert ed.lua("return vim.fn.maparg('<C-c>', 'n')") == ""
    # the buffer takes the next edit
    keys(ed, ":2Mia edit " + typed(instruction("simple\n")) + "<CR>")
    wait_staged(ed)


def test_a_hard_budget_the_chat_reached_stops_the_edit_before_the_server_sees_it(agent, server, project):
    ed = agent(pricing={"scn/echo": {"input": 3.0, "output": 15.0}},
               costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    ed.nvim.command("Mia prompt echo chat spends first")
    ed.wait("require('mia.chat').state() == 'done'")
    before = len(edit_requests(server))
    ed.nvim.command("wincmd p")
    open_file(ed, project, "code.py")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    ed.wait("string.find(vim.api.nvim_exec2('messages', { output = true }).output, 'costs.daily_limit_usd') ~= nil")
    assert len(edit_requests(server)) == before
    assert not streaming(ed) and pending(ed) == [] and lines(ed) == LINES


def test_an_edit_whose_core_cannot_start_leaves_nothing_behind(agent, project):
    ed = agent()
    open_file(ed, project, "code.py")
    # the native library failing to load, as a missing one does
    ed.lua("_G.real_core = require('mia.api')._core; "
           "require('mia.api')._core = function() error('mia: the native library is missing', 0) end")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    ed.wait("string.find(vim.api.nvim_exec2('messages', { output = true }).output, 'library is missing') ~= nil")
    assert not streaming(ed)
    assert ed.lua("return vim.fn.maparg('<C-c>', 'n')") == ""
    ed.lua("require('mia.api')._core = _G.real_core")
    keys(ed, ":1Mia edit " + typed(instruction("L1\n")) + "<CR>")
    wait_staged(ed)


def test_checkhealth_says_whether_the_plug_mapping_is_mapped(agent):
    ed = agent()
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert "<Plug>(MiaEdit) is not mapped (no default mapping)" in text
    ed.nvim.command("bwipeout")
    ed.nvim.command("xmap <Space>e <Plug>(MiaEdit)")
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert "<Plug>(MiaEdit) is mapped in Visual mode" in text


def test_lines_ending_in_a_carriage_return_get_it_back(agent, project):
    (project / "mixed.txt").write_bytes(b"one\r\ntwo\r\nthree\n")
    ed = agent()
    ed.nvim.command(f"edit ++ff=unix {project / 'mixed.txt'}")
    assert lines(ed) == ["one\r", "two\r", "three"]
    keys(ed, ":1,2Mia edit " + typed(instruction("ONE\nTWO\n")) + "<CR>")
    wait_staged(ed)
    keys(ed, ":Mia review accept_all<CR>")
    ed.wait("#require('mia.review').pending() == 0")
    assert lines(ed) == ["ONE\r", "TWO\r", "three"]
