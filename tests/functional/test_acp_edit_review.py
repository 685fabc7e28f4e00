"""An external ACP agent's edit permission reviewed in mia's diff float: the
review's keys answer with the agent's own options (by ACP kind) and the
exact optionId reaches the agent. Driven like a user in a real headless
Neovim (real keys into the float) against real agent processes: the
fixture agent tests/acp/fixtures/tool_agent.mjs (`propose PATH VARIANT`
reports the optionId it got) and claude-agent-acp run offline against the
scenario server."""

import json

import pytest

from test_acp_client import CLAUDE, NODE, agent_editor, claude_agent, tool_agent, type_prompt

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: the ACP client tests need it to run the agents")


def frame(ed):
    """The review float's title and footer, once it shows."""
    ed.wait("require('mia.review').showing_frame() ~= nil", 30000)
    return ed.lua("return require('mia.review').showing_frame()")


def float_lines(ed):
    return ed.lua("return require('mia.review').showing_lines()")


def footer_keys(ed):
    """The footer's hints as {key: label}."""
    parts = [p.strip() for p in frame(ed)["footer"].split(" · ")]
    return dict(p.split(" ", 1) for p in parts if p)


def answers(ed, agent="tools"):
    """The agent's answers in the chat, oldest first."""
    return [a.split("\n## ", 1)[0] for a in ed.chat_text().split(f"## {agent}\n")[1:]]


def permission_count(ed):
    return ed.chat_text().count("permission=")


def notes(ed):
    ed.lua("""
      _G.notes = {}
      vim.notify = function(msg) table.insert(_G.notes, msg) end
      _G.inputs = 0
      vim.ui.input = function(opts, cb) _G.inputs = _G.inputs + 1 cb('a reason') end
    """)


def test_the_review_keys_send_the_agents_exact_option_ids_and_the_agent_writes(editor_factory, tmp_path):
    f = tmp_path / "foo.lua"
    f.write_text("local x = 1\nreturn x\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    notes(ed)

    type_prompt(ed, "propose foo.lua")
    fr = frame(ed)
    assert fr["title"] == " tools wants to edit foo.lua ", fr
    assert footer_keys(ed) == {"a": "Allow once", "A": "Always allow", "r": "Reject", "q": "dismiss"}
    lines = float_lines(ed)
    assert lines[0] == "foo.lua"
    assert " return x" in lines and "+added by the tool agent" in lines, lines
    # e and f are not for agents: they say why and leave the review open.
    ed.nvim.input("e")
    ed.nvim.input("f")
    ed.wait("#_G.notes >= 2")
    said = ed.lua("return _G.notes")
    assert "writes this file with its own tools" in said[0] and "cannot be edited here" in said[0], said
    assert "no per-file scope" in said[1] and "Always allow" in said[1], said
    assert ed.lua("return require('mia.review').showing_frame() ~= nil")
    assert permission_count(ed) == 0
    ed.nvim.input("a")
    ed.wait("require('mia.chat').state() ~= 'streaming' and require('mia.review').showing_frame() == nil", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-allow-once-1"), ed.chat_text()
    assert f.read_text() == "local x = 1\nreturn x\nadded by the tool agent\n"

    for key, want in (("A", "tool-allow-always-2"), ("r", "tool-reject-once-3"),
                      ("q", "tool-reject-once-3"), ("<Esc>", "tool-reject-once-3")):
        n = permission_count(ed)
        type_prompt(ed, "propose foo.lua")
        frame(ed)
        ed.nvim.input(key)
        ed.wait(f"require('mia.review').showing_frame() == nil and "
                f"select(2, table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), "
                f"'\\n'):gsub('permission=', '')) > {n}", 30000)
        ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
        assert answers(ed)[-1].strip().endswith("permission=" + want), (key, ed.chat_text())
    # r rejected at once: an agent cannot receive a reason.
    assert ed.lua("return _G.inputs") == 0
    assert f.read_text().count("added by the tool agent") == 2  # a and A wrote, the rejections did not


def test_keys_of_kinds_the_agent_does_not_offer_are_hidden_and_only_say_so(editor_factory, tmp_path):
    (tmp_path / "foo.lua").write_text("x\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    notes(ed)
    type_prompt(ed, "propose foo.lua noalways")
    # reject_always is its only reject option: r answers with it.
    assert footer_keys(ed) == {"a": "Allow once", "r": "Never", "q": "dismiss"}
    ed.nvim.input("A")
    ed.wait("#_G.notes >= 1")
    assert "offers no “allow always” option" in ed.lua("return _G.notes[1]")
    assert ed.lua("return require('mia.review').showing_frame() ~= nil")
    ed.nvim.input("r")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-reject-always-4"), ed.chat_text()
    assert (tmp_path / "foo.lua").read_text() == "x\n"


def test_options_the_keys_cannot_reach_fall_back_to_the_plain_picker(editor_factory, tmp_path):
    (tmp_path / "foo.lua").write_text("x\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.lua("""
      _G.asked = nil
      vim.ui.select = function(items, opts, cb)
        _G.asked = { items = items, prompt = opts.prompt, float = require('mia.review').showing_frame() }
        cb(items[3], 3)
      end
    """)
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "propose foo.lua tworejects")
    ed.wait("require('mia.chat').state() ~= 'streaming' and _G.asked ~= nil", 30000)
    asked = ed.lua("return _G.asked")
    assert asked["items"] == ["Allow once", "Reject", "Never"]
    assert asked.get("float") is None
    assert answers(ed)[-1].strip().endswith("permission=tool-reject-always-4"), ed.chat_text()


def test_in_hunks_mode_an_agent_edit_is_still_the_float_and_the_buffer_is_left_to_the_agent(editor_factory, tmp_path):
    f = tmp_path / "foo.lua"
    f.write_text("local x = 1\nreturn x\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)}, review="hunks")
    ed.nvim.command(f"edit {f}")
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "propose foo.lua")
    assert frame(ed)["title"] == " tools wants to edit foo.lua "
    assert ed.lua("return #require('mia.review').pending()") == 0
    ed.nvim.input("a")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-allow-once-1")
    assert f.read_text().endswith("added by the tool agent\n")
    buf = ed.lua("return vim.fn.bufnr(...)", str(f))
    assert ed.lua("return vim.bo[...].modified", buf) is False
    assert ed.lua("return vim.api.nvim_buf_get_lines(..., 0, -1, false)", buf) == ["local x = 1", "return x"]


def test_a_path_outside_the_project_and_a_huge_text_are_shown_bounded_and_named(editor_factory, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("secret\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(project)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "propose ../elsewhere.txt")
    fr = frame(ed)
    assert fr["title"].startswith(" tools wants to edit ") and fr["title"].endswith("elsewhere.txt (outside the project) "), fr
    lines = float_lines(ed)
    assert lines[1].startswith(f"⚠ outside the project ({project})"), lines
    ed.nvim.input("r")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-reject-once-3")
    assert outside.read_text() == "secret\n"

    type_prompt(ed, "propose big.txt big")
    frame(ed)
    lines = float_lines(ed)
    assert lines[0] == "big.txt (new file)"
    note = lines[1]
    assert note.startswith("⚠ too large to show in full: the new text has 60000 lines (") and \
        "the diff covers its first 5000. Accepting accepts all of it." in note, note
    assert "+big line 5000" in lines and "+big line 5001" not in lines
    assert len(lines) < 5010
    assert ed.lua("return 1 + 1") == 2
    ed.nvim.input("a")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-allow-once-1")
    assert len((project / "big.txt").read_text().splitlines()) == 60000  # the agent's whole text


def test_a_fragment_diff_says_so(editor_factory, tmp_path):
    (tmp_path / "foo.lua").write_text("one\ntwo\nthree\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "propose foo.lua fragment")
    frame(ed)
    lines = float_lines(ed)
    assert lines[:2] == ["foo.lua", "the agent sent the changed part of the file: line numbers count from that part"]
    assert "-two" in lines and "+TWO" in lines
    ed.nvim.input("q")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("permission=tool-reject-once-3")


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_write_is_reviewed_in_the_float_and_allow_lets_it_write(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)})
    ed.nvim.command("Mia agent claude")
    target = tmp_path / "hello.txt"
    type_prompt(ed, "tool Write " + json.dumps({"file_path": str(target), "content": "hello from claude\n"}))
    fr = frame(ed)
    assert fr["title"] == " claude wants to edit hello.txt ", fr
    assert footer_keys(ed) == {"a": "Allow", "A": "Always Allow", "r": "Reject", "q": "dismiss"}
    lines = float_lines(ed)
    assert lines[0] == "hello.txt (new file)" and "+hello from claude" in lines, lines
    ed.nvim.input("a")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert ed.state() == "done", ed.chat_text() + ed.messages()
    assert target.read_text() == "hello from claude\n"
    assert "tool said:" in ed.chat_text().split("## claude", 1)[1]


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_edit_shows_its_fragment_and_a_rewrite_is_diffed_against_the_disk(editor_factory, server, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("one\ntwo\nthree\n")
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)})
    ed.nvim.command("Mia agent claude")
    # claude edits only files it has read
    type_prompt(ed, "tool Read " + json.dumps({"file_path": str(target)}))
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    # Its Edit sends the replaced text only: said so; r answers its "reject".
    type_prompt(ed, "tool Edit " + json.dumps({"file_path": str(target), "old_string": "two", "new_string": "TWO"}))
    assert frame(ed)["title"] == " claude wants to edit notes.txt "
    assert float_lines(ed) == ["notes.txt", "the agent sent the changed part of the file: line numbers count from that part",
                               "@@ -1,1 +1,1 @@", "-two", "+TWO"]
    ed.nvim.input("r")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert target.read_text() == "one\ntwo\nthree\n"
    assert "refused permission" in answers(ed, "claude")[-1], ed.chat_text()
    # Its Write sends no old text: the diff is against the file on disk; A answers "allow_always".
    type_prompt(ed, "tool Write " + json.dumps({"file_path": str(target), "content": "one\n2\nthree\n"}))
    frame(ed)
    assert float_lines(ed) == ["notes.txt", "the agent sent the whole new text: the diff is against the file on disk",
                               "@@ -1,3 +1,3 @@", " one", "-two", "+2", " three"]
    ed.nvim.input("A")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert ed.state() == "done", ed.chat_text()
    assert target.read_text() == "one\n2\nthree\n"


def after_the_answer(ed, question=" tools wants to edit foo.txt "):
    """Once the question's float (titled `question`) is gone: waits until
    the turn ends or another review shows, and returns that one's frame."""
    ed.wait("(require('mia.review').showing_frame() or {}).title ~= " + json.dumps(question), 30000)
    ed.wait("require('mia.chat').state() ~= 'streaming' or require('mia.review').showing_frame() ~= nil", 30000)
    return ed.lua("return require('mia.review').showing_frame()")


def test_an_edit_approved_in_the_agents_question_lands_through_its_write_without_a_second_review(
        editor_factory, tmp_path):
    f = tmp_path / "foo.txt"
    f.write_text("one\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    # As Gemini CLI does: a question with the diff, then fs/write_text_file of the same text.
    type_prompt(ed, "propose foo.txt client")
    assert frame(ed)["title"] == " tools wants to edit foo.txt "
    ed.nvim.input("a")
    assert after_the_answer(ed) is None, "reviewed twice"
    assert ed.state() == "done", ed.chat_text()
    assert answers(ed)[-1].strip().endswith("permission=tool-allow-once-1 write=ok"), ed.chat_text()
    assert f.read_text() == "one\nadded by the tool agent\n"

    # The approval is used up by that write: the same text written again is reviewed.
    f.write_text("one\n")
    type_prompt(ed, "propose foo.txt client-twice")
    frame(ed)
    ed.nvim.input("a")
    second = after_the_answer(ed)
    assert second is not None and "foo.txt" in second["title"] and "wants to edit" not in second["title"], second
    ed.nvim.input("a")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert answers(ed)[-1].strip().endswith("write=ok write=ok"), ed.chat_text()


def test_a_write_that_differs_from_the_approved_edit_is_reviewed(editor_factory, tmp_path):
    f = tmp_path / "foo.txt"
    f.write_text("one\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    ed.lua("vim.ui.input = function(opts, cb) cb('not that') end")
    type_prompt(ed, "propose foo.txt client-other")
    frame(ed)
    ed.nvim.input("a")
    shown = after_the_answer(ed)
    assert shown is not None, "a write other than the approved one landed unreviewed: " + ed.chat_text()
    assert "and one line more" in "\n".join(float_lines(ed))
    ed.nvim.input("r")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert "write failed:" in answers(ed)[-1] and "not that" in answers(ed)[-1], ed.chat_text()
    assert f.read_text() == "one\n"

    # A file changed after the question is reviewed again, even for the approved text.
    type_prompt(ed, "propose foo.txt client")
    frame(ed)
    f.write_text("one\nchanged by someone else\n")
    ed.nvim.input("a")
    assert after_the_answer(ed) is not None, ed.chat_text()
    ed.nvim.input("r")
    ed.wait("require('mia.review').showing_frame() == nil and require('mia.chat').state() ~= 'streaming'", 30000)
    assert f.read_text() == "one\nchanged by someone else\n"
