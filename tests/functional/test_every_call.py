"""Every model call counts: mia.stream/mia.send are recorded in the cost
store and stopped by hard budgets, and the pre_request transform hooks
change the wire body of every request (chat, compaction, mia.stream) — in
real Neovims against the scenario server, with a real SQLite file."""

import sqlite3

import pytest

from conftest import scenario_setup

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}

STREAM = """
local request, opts, fn = ...
if opts == vim.NIL then opts = nil end
_G.got = { done = nil, err = nil }
require('mia')[fn or 'stream'](request, {
  on_done = function(d) got.done = d end,
  on_error = function(e) got.err = e end,
}, opts)
"""

HOOK = """
require('mia').register_transform_hook({ name = 'tag', phase = 'pre_request', fn = function(req, info)
  req.extra_body = { mia_tag = 'hooked:' .. info.provider }
  return req
end })
"""


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


@pytest.fixture
def make(editor_factory, server, tmp_path):
    def make(**extra):
        opts = scenario_setup(server, pricing={"scn/echo": PRICE}, **extra)
        e = editor_factory(setup=opts)
        e.lua("vim.cmd.cd(...)", str(tmp_path))
        return e
    return make


def call(ed, text, opts=None, fn="stream"):
    ed.lua(STREAM, {"messages": [{"role": "user", "content": text}]}, opts, fn)
    ed.wait("got.done ~= nil or got.err ~= nil")
    return ed.lua("return got")


def test_api_calls_show_in_costs_under_the_agent_name_given(make):
    ed = make()
    got = call(ed, "echo from my plugin", {"agent": "myplugin"})
    assert got.get("err") is None
    got = call(ed, "echo whole answer", None, fn="send")
    assert got.get("err") is None
    report = ed.lua("return require('mia').costs({ scope = 'daily' })")
    agents = {b["key"]: b for b in report["by_agent"]}
    assert set(agents) == {"myplugin", "api"}
    assert agents["myplugin"]["requests"] == 1 and agents["api"]["requests"] == 1
    assert report["totals"]["cost_usd"] > 0
    assert report["totals"]["output_tokens"] == 4 + 3  # "echo from my plugin" + "echo whole answer"
    ed.nvim.command("Mia costs daily")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('By agent', 1, true) ~= nil")
    out = ed.messages()
    assert "By agent" in out
    assert "myplugin" in out and "api" in out


def test_a_hard_daily_limit_stops_mia_stream_before_the_server_sees_it(make, server):
    ed = make(costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    assert call(ed, "echo costs money").get("err") is None
    before = len(posts(server))
    got = call(ed, "echo again")
    assert got["err"]["class"] == "budget_exceeded"
    assert "costs.daily_limit_usd" in got["err"]["message"]
    assert len(posts(server)) == before


def test_a_hard_limit_set_by_chat_spend_stops_mia_send_too(make, server):
    ed = make(costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    ed.nvim.command("Mia prompt echo chat spends first")
    ed.wait("require('mia.chat').state() == 'done'")
    before = len(posts(server))
    got = call(ed, "echo after the chat", {"agent": "myplugin"}, fn="send")
    assert got["err"]["class"] == "budget_exceeded"
    assert len(posts(server)) == before


def test_a_call_given_the_chats_session_counts_toward_it_and_its_limit(make, server):
    ed = make(costs={"session_limit_usd": 0.000001, "hard_limit": True})
    # Without a session the session limit is not the call's business.
    assert call(ed, "echo outside any session").get("err") is None
    sid = ed.lua("return require('mia.chat').session_id()")
    assert call(ed, "echo inside the chat session", {"session_id": sid}).get("err") is None
    report = ed.lua("return require('mia').costs({ scope = 'session', session_id = ... })", sid)
    assert report["totals"]["requests"] == 1 and report["totals"]["cost_usd"] > 0
    before = len(posts(server))
    got = call(ed, "echo once more", {"session_id": sid})
    assert got["err"]["class"] == "budget_exceeded"
    assert "costs.session_limit_usd" in got["err"]["message"]
    assert len(posts(server)) == before
    # The chat's own next prompt meets the same limit.
    ed.nvim.command("Mia prompt echo from the chat")
    ed.wait("require('mia.chat').state() == 'error'")
    assert len(posts(server)) == before


def test_a_pre_request_hook_changes_every_request_on_the_wire(make, server):
    ed = make()
    ed.lua(HOOK)
    # the chat (agent loop turn)
    ed.nvim.command("Mia prompt echo hello chat")
    ed.wait("require('mia.chat').state() == 'done'")
    chat_body = posts(server)[-1]["body"]
    assert chat_body["messages"][-1]["content"] == "echo hello chat"
    assert chat_body["mia_tag"] == "hooked:scn"
    # /compact typed as the chat prompt
    ed.nvim.command("Mia prompt /compact")
    ed.wait("vim.tbl_contains(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '> _context compacted_')")
    compact_body = posts(server)[-1]["body"]
    assert compact_body["messages"][-1]["content"].startswith("Summarize the conversation so far:")
    assert compact_body["mia_tag"] == "hooked:scn"
    # mia.stream
    assert call(ed, "echo via the api").get("err") is None
    api_body = posts(server)[-1]["body"]
    assert api_body["messages"][-1]["content"] == "echo via the api"
    assert api_body["mia_tag"] == "hooked:scn"


def test_the_automatic_compaction_request_goes_through_the_hooks(make, server):
    ed = make()
    ed.lua(HOOK)
    ed.nvim.command("Mia prompt echo some earlier turn")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.nvim.command("Mia prompt context")
    ed.wait("require('mia.chat').state() == 'error'")
    bodies = [r["body"] for r in posts(server)]
    summarize = [b for b in bodies if b["messages"][-1]["content"].startswith("Summarize the conversation so far:")]
    assert len(summarize) == 1
    assert all(b["mia_tag"] == "hooked:scn" for b in bodies)


def test_a_failing_hook_stops_the_request_and_names_the_hook(make, server):
    ed = make()
    ed.lua("""require('mia').register_transform_hook({ name = 'broken', phase = 'pre_request',
      fn = function() error('no key for the proxy') end })""")
    before = len(posts(server))
    got = call(ed, "echo never sent")
    assert "transform hook `broken` (pre_request) failed" in got["err"]["message"]
    assert "no key for the proxy" in got["err"]["message"]
    assert len(posts(server)) == before


def test_without_hooks_nothing_changes_on_the_wire(make, server):
    ed = make()
    assert call(ed, "echo plain").get("err") is None
    assert "mia_tag" not in posts(server)[-1]["body"]


def test_a_call_that_crosses_the_daily_warning_warns_once(make):
    ed = make(costs={"daily_warning_usd": 0.000001})
    ed.lua("_G.notes = {}; vim.notify = function(msg, level) table.insert(notes, { msg, level }) end")
    assert call(ed, "echo first").get("err") is None
    ed.wait("#notes > 0")
    assert call(ed, "echo second").get("err") is None
    notes = ed.lua("return notes")
    assert len(notes) == 1
    assert notes[0][0].startswith("mia: today's requests have cost $") and "approaching your $50.00 daily limit" in notes[0][0]
    assert notes[0][1] == ed.lua("return vim.log.levels.WARN")


def test_a_post_response_hook_sees_every_chat_turn(make):
    """post_response hooks run for the chat's (agent loop's) turns too, not
    only for mia.stream/mia.send; with the turn's answer and its model."""
    ed = make()
    ed.lua("""_G.seen = {}
      require('mia').register_transform_hook({ name = 'watch', phase = 'post_response', fn = function(done, info)
        table.insert(seen, { text = done.text, provider = info.provider, stop = done.stop_reason,
                             out = done.usage.output_tokens, known = done.cost.known })
      end })""")
    ed.nvim.command("Mia prompt echo hooked chat turn")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.nvim.command("Mia prompt echo second")
    ed.wait("#seen == 2")
    seen = ed.lua("return seen")
    assert seen[0] == {"text": "echo hooked chat turn", "provider": "scn", "stop": "end_turn", "out": 4, "known": True}
    assert seen[1]["text"] == "echo second"
