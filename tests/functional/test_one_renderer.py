"""One renderer: the chat draws a session's Agent Client Protocol updates the
same way live and after `:Mia sessions` in a new Neovim. A session with
reasoning, a plan, tool calls (one done, one rejected at the permission question),
an error, a cancelled answer and a compaction is drawn byte for byte the
same: buffer text, highlights and the tool blocks' status marks."""

import sqlite3

import pytest

from conftest import scenario_setup
from test_session_log import resume_in

CAPTURE = """
local b = require('mia.chat').buffer()
local names = {}
for name, id in pairs(vim.api.nvim_get_namespaces()) do names[id] = name end
local marks = {}
for _, m in ipairs(vim.api.nvim_buf_get_extmarks(b, -1, 0, -1, { details = true })) do
  local d = m[4]
  local ns = names[d.ns_id] or '?'
  if ns ~= 'mia_chat_status' then
    marks[#marks + 1] = table.concat({
      ns, m[2], m[3], tostring(d.end_row), tostring(d.end_col), tostring(d.hl_group),
      d.virt_text and d.virt_text[1][1] or '',
    }, '|')
  end
end
table.sort(marks)
return { lines = vim.api.nvim_buf_get_lines(b, 0, -1, false), marks = marks }
"""


@pytest.fixture
def make(editor_factory, server, data_home, tmp_path):
    (tmp_path / "a.txt").write_text("alpha file\n")

    def make(name="nvim"):
        # The sandbox off: in it, code mode runs `bash` without the question this test draws.
        e = editor_factory(name=name, env={"XDG_DATA_HOME": str(data_home)},
                           setup=scenario_setup(server, mode="code", sandbox={"mode": "off"}))
        e.lua("vim.cmd.cd(...)", str(tmp_path))
        return e

    return make


def send(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'", 20000)


def test_a_session_draws_the_same_live_and_after_a_load(make, data_home, tmp_path):
    live = make("live")
    send(live, "reason 12")
    send(live, 'tool update_plan {"entries":[{"content":"read a.txt","status":"completed"},'
               '{"content":"summarize it","status":"in_progress"}]}')
    send(live, 'tool read_file {"path":"a.txt"}')
    # The permission question for `bash` is answered "Reject", as a user picks it.
    live.lua("vim.ui.select = function(items, opts, cb) _G.asked = opts.prompt; cb(items[#items], #items) end")
    send(live, 'tool bash {"command":"touch made-by-bash"}')
    assert "mia wants to run `bash`: touch made-by-bash" == live.lua("return _G.asked")
    assert not (tmp_path / "made-by-bash").exists()
    send(live, "http 400 the request was bad", state="error")
    live.nvim.command("Mia prompt slow 400 40")
    live.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 7 * 10", 20000)
    live.nvim.command("Mia stop")
    live.wait("require('mia.chat').state() == 'cancelled'")
    live.nvim.command("Mia prompt /compact")
    live.wait("vim.tbl_contains(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), "
              "'> _context compacted_')")
    send(live, "echo after the summary")
    drawn = live.lua(CAPTURE)
    text = "\n".join(drawn["lines"])
    # Everything the session went through is on screen.
    assert "r00000 r00001" in text and "done" in text
    assert "📋 **Plan**\n- [x] read a.txt\n- [~] summarize it" in text
    assert "⚙ **update_plan**" not in text  # a plan is drawn as a plan, not as a tool block
    assert "⚙ **read_file** `a.txt`" in text and "tool said: " in text
    assert "⚙ **bash** `touch made-by-bash`" in text
    assert "> **Error** (invalid_request): " in text and "the request was bad" in text
    assert "*[cancelled]*" in text
    assert "> _context compacted_" in text
    assert any("MiaReasoning" in m for m in drawn["marks"])
    assert any("⊘ rejected" in m for m in drawn["marks"])
    assert any(m.startswith("mia_tool_blocks") and "✓ " in m for m in drawn["marks"])
    live.close()

    # The cancelled answer's end and the error are stored, typed.
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        ends = [r[0] for r in c.execute(
            "select json_extract(meta, '$.turn_end.stopReason') from messages where parts = '[]' order by seq")]
        outcomes = [r[0] for r in c.execute("select meta from messages where role = 'tool' order by seq")]
    assert ends == ["end_turn", "end_turn", "end_turn", "end_turn", "error", "cancelled", "end_turn"]
    assert '"status":"rejected"' in outcomes[2] and '"status":"done"' in outcomes[1]

    again = make("again")
    again.lua("_G.offered = {}; vim.api.nvim_create_autocmd('User', { pattern = 'MiaCommandsChanged', "
              "callback = function(a) table.insert(offered, a.data) end })")
    resume_in(again)
    assert again.lua(CAPTURE) == drawn
    # The core's available_commands_update came with the replay: /compact is offered.
    assert "compact" in [c["name"] for c in again.lua("return require('mia.slash').available()")]
    last = again.lua("return offered[#offered]")
    assert last["sessionUpdate"] == "available_commands_update"
    assert "compact" in [c["name"] for c in last["availableCommands"]]
