"""Every token and dollar, and sessions that survive restarts: the SQLite
store, prices, budgets, reports, :MiaCosts, resume — in real Neovims
against the scenario server, with a real SQLite file."""

import os
import re
import signal
import sqlite3
import time

import pytest
from pynvim.api.common import NvimError

from conftest import quit_editor as quit, scenario_setup

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


@pytest.fixture
def make(editor_factory, server, data_home, tmp_path):
    def make(name="nvim", **extra):
        opts = scenario_setup(server, pricing={"scn/echo": PRICE}, **extra)
        e = editor_factory(name=name, env={"XDG_DATA_HOME": str(data_home)}, setup=opts)
        e.lua("vim.cmd.cd(...)", str(tmp_path))
        return e
    return make


def db(data_home):
    return sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3")


def prompt(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'")


def test_every_answer_ends_with_a_footer_and_the_statusline_shows_the_session_cost(make):
    ed = make()
    prompt(ed, "echo hello there")
    done = ed.lua("return require('mia.chat')._last_done()")
    u = done["usage"]
    expected = (u["input_tokens"] * 3.0 + u["output_tokens"] * 15.0) / 1e6
    assert done["cost"]["known"] is True
    assert done["cost"]["total_usd"] == pytest.approx(expected)
    footer = ed.chat_text(footers=True).split("\n")[-1]
    assert re.fullmatch(r"── echo · [\d,]+ in · 3 out · \$0\.\d+ ──", footer), footer
    assert f"{u['input_tokens']:,} in" in footer
    status = ed.lua("return require('mia').statusline()")
    assert re.fullmatch(r"mia ask echo \$0\.\d+", status), status


def test_the_live_session_cost_of_a_later_answer_starts_from_what_the_session_cost(
        editor_factory, server, data_home, tmp_path):
    """The store is asked what a session has cost only once it has been
    stored: a new session starts from zero, a later answer from the
    session's total. The statusline, as drawn while the second answer
    streams, never shows less than the first answer cost."""
    # Output tokens only: the live figure is then exact, not an estimate of the input.
    opts = scenario_setup(server, pricing={"scn/echo": {"input": 0.0, "output": 15.0}})
    ed = editor_factory(env={"XDG_DATA_HOME": str(data_home)}, setup=opts)
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    prompt(ed, "long 40")
    first = ed.lua("return require('mia.chat')._last_done()")
    assert first["session_cost_usd"] == pytest.approx(40 * 15.0 / 1e6)
    ed.lua("""
      _G.drawn = {}
      _G.probe = function()
        local s = require('mia').statusline()
        if drawn[#drawn] ~= s then drawn[#drawn + 1] = s end
        return s
      end
      vim.o.laststatus = 2
      vim.o.statusline = '%!v:lua.probe()'
    """)
    prompt(ed, "slow 40 20")
    drawn = ed.lua("return drawn")
    live = [float(re.search(r"~\$([\d.]+)", s)[1]) for s in drawn if "~$" in s]
    assert len(live) >= 3, drawn
    # Each live figure is the first answer's cost plus the tokens streamed so far.
    assert all(x > first["session_cost_usd"] for x in live), (first, drawn)
    second = ed.lua("return require('mia.chat')._last_done()")
    assert second["session_cost_usd"] == pytest.approx(80 * 15.0 / 1e6), second
    assert drawn[-1] == "mia ask echo $0.0012", drawn


def test_a_model_without_a_price_shows_0_with_a_note_and_reports_keep_it_apart(editor_factory, server, tmp_path):
    ed = editor_factory(setup=scenario_setup(server, costs={"session_warning_usd": 3}))
    prompt(ed, "echo priceless")
    assert ed.lua("return require('mia.chat')._last_done().cost") == {"known": False}
    assert ed.chat_text(footers=True).endswith(" out · $0.00 (no price for echo: add it to setup's `pricing`) ──")
    assert ed.lua("return require('mia').statusline()") == "mia ask echo $0.00 (unpriced)"
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    assert report["totals"]["cost_usd"] == 0
    assert report["totals"]["unknown_cost_requests"] == 1
    assert report["totals"]["unknown_cost_input_tokens"] > 0
    lines = ed.lua("return require('mia.costs').lines(...)", report)
    assert "(+ 1 requests to models without a price, not counted: " in lines[0]
    # Budgets say once per session that they cannot count such calls.
    prompt(ed, "echo again")
    note = "scn/echo has no price, so your budgets do not count its calls"
    assert ed.messages().count(note) == 1, ed.messages()


@pytest.mark.parametrize("provider", [{"kind": "ollama"}, {"kind": "openai_compatible", "local": True}])
def test_a_local_model_costs_a_known_zero(editor_factory, server, provider):
    """An Ollama provider, or any provider marked local."""
    root = f"http://127.0.0.1:{server.port}" + ("/v1" if provider["kind"] != "ollama" else "")
    ed = editor_factory(setup=scenario_setup(server, model="box/echo", providers={
        "box": {**provider, "base_url": root}}))
    prompt(ed, "echo on my machine")
    done = ed.lua("return require('mia.chat')._last_done()")
    assert done["cost"]["known"] is True and done["cost"]["total_usd"] == 0
    assert ed.chat_text(footers=True).endswith(" out · $0.00 ──")
    assert ed.lua("return require('mia').statusline()") == "mia ask echo $0.00"
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    assert report["totals"]["unknown_cost_requests"] == 0


def test_usage_rows_and_messages_are_in_the_store(make, data_home):
    ed = make()
    prompt(ed, "echo one")
    prompt(ed, "echo two")
    with db(data_home) as c:
        rows = c.execute("select provider, model, input_tokens, output_tokens, cost_known, total_usd from usage").fetchall()
        msgs = c.execute("select seq, role, state, parts = '[]', json_extract(meta, '$.turn_end.stopReason') from messages order by seq").fetchall()
    assert len(rows) == 2 and all(r[0] == "scn" and r[1] == "echo" and r[4] == 1 and r[5] > 0 for r in rows)
    # Each turn: the prompt, the answer, and its end (no parts: never sent to the model).
    assert msgs == [
        (0, "user", "complete", 0, None),
        (1, "assistant", "complete", 0, None),
        (2, "assistant", "complete", 1, "end_turn"),
        (3, "user", "complete", 0, None),
        (4, "assistant", "complete", 0, None),
        (5, "assistant", "complete", 1, "end_turn"),
    ]


def test_session_report_has_totals_and_breakdowns(make):
    ed = make()
    prompt(ed, "echo a b c")
    prompt(ed, "echo d e f")
    r = ed.lua("return require('mia').costs({ scope = 'session' })")
    assert r["totals"]["requests"] == 2 and r["totals"]["messages"] == 2 and r["totals"]["sessions"] == 1
    assert [b["key"] for b in r["by_model"]] == ["echo"] and r["by_model"][0]["percent"] == pytest.approx(100)
    assert [b["key"] for b in r["by_provider"]] == ["scn"]
    c = r["by_cost_type"]
    assert c["input_percent"] + c["output_percent"] == pytest.approx(100)
    assert len(r["daily"]) == 30 and r["daily"][-1]["requests"] == 2
    lines = ed.lua("return require('mia.costs').lines(...)", r)
    assert lines[0].startswith("Cost ") and any(l.startswith("By model") for l in lines)
    # with a callback: returns at once, the same report comes to the callback
    at_return = ed.lua("""
      _G.cr = nil
      require('mia').costs({ scope = 'session' }, function(err, rep) cr = { err = err, rep = rep } end)
      return cr == nil
    """)
    assert at_return
    ed.wait("cr ~= nil")
    cr = ed.lua("return cr")
    assert cr.get("err") is None and cr["rep"]["totals"] == r["totals"]


def costs_command(ed, args):
    """Runs `:Mia costs {args}` and returns the messages once the report is
    printed. The command itself returns before the report: the messages read
    in the same Lua chunk (no event runs in between) do not hold it yet."""
    ed.nvim.command("messages clear")
    at_return = ed.lua("vim.cmd('Mia costs ' .. ...); return vim.api.nvim_exec2('messages', { output = true }).output",
                       args)
    assert "Cost " not in at_return, at_return
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Cost ', 1, true) ~= nil")
    return ed.messages()


def test_costs_subcommand_prints_the_weekly_report_without_waiting_for_it(make):
    ed = make()
    prompt(ed, "echo weekly")
    assert re.search(r"Cost weekly \(from \d{4}-\d\d-\d\d\): \$0\.0", costs_command(ed, "weekly"))
    with pytest.raises(NvimError, match="unknown cost report `hourly`"):
        ed.nvim.command("Mia costs hourly")


@pytest.mark.parametrize("how", ["Mia costs", "slash"])
def test_costs_by_model_or_provider_take_provider_slash_model_or_a_bare_id(make, how):
    ed = make()
    prompt(ed, "echo by model")

    def requests(arg):
        if how == "slash":
            ed.lua("vim.cmd('messages clear'); require('mia.slash').dispatch(...)", "/costs " + arg)
            ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Cost ', 1, true) ~= nil")
            out = ed.messages()
        else:
            out = costs_command(ed, arg)
        found = re.search(r"Requests: (\d+)", out)
        return int(found.group(1)) if found else 0
    assert requests("model echo") == 1
    assert requests("model scn/echo") == 1
    assert requests("model other/echo") == 0  # not a provider: the whole id is the model's
    assert requests("provider scn") == 1
    assert requests("provider scn/echo") == 1
    assert requests("provider nope") == 0


def test_a_warning_shows_once_when_crossed(make):
    ed = make(costs={"session_warning_usd": 0.000001})
    ed.lua("_G.warnings = {}; vim.notify = function(m, l) if l == vim.log.levels.WARN then table.insert(warnings, m) end end")
    prompt(ed, "echo first")
    prompt(ed, "echo second")
    warnings = ed.lua("return warnings")
    assert len(warnings) == 1 and "approaching your $10.00 session limit" in warnings[0]


def capture_warnings(ed):
    ed.lua("_G.warnings = {}; vim.notify = function(m, l) if l == vim.log.levels.WARN then table.insert(warnings, m) end end")


def test_budgets_are_on_by_default_and_the_warning_names_the_limit(editor_factory, server):
    """A fresh config with a priced model: the $3 session warning fires,
    naming the $10 session limit it approaches."""
    ed = editor_factory(setup=scenario_setup(server, pricing={"scn/echo": {"input": 0, "output": 1e6}}))
    capture_warnings(ed)
    prompt(ed, "long 2")  # 2 output tokens: $2.00
    assert ed.lua("return warnings") == []
    prompt(ed, "long 2")  # $4.00
    assert ed.lua("return warnings") == ["mia: this session has cost $4.00 — approaching your $10.00 session limit"]


def test_budgets_false_turns_every_warning_and_limit_off(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server, budgets=False, pricing={"scn/echo": {"input": 0, "output": 1e6}}))
    capture_warnings(ed)
    ed.lua("_G.asked = false; vim.ui.input = function(_, cb) _G.asked = true; cb('n') end")
    prompt(ed, "long 12")  # $12: past the default warning and session limit
    prompt(ed, "echo still sent")
    assert ed.lua("return warnings") == []
    assert ed.lua("return asked") is False


@pytest.mark.parametrize("answer,sent", [("n", False), ("y", True)])
def test_a_soft_session_limit_asks_before_sending(make, server, answer, sent):
    ed = make(costs={"session_limit_usd": 0.000001})
    prompt(ed, "echo costs money")
    before = len(posts(server))
    ed.lua("local a = ...; vim.ui.input = function(opts, cb) _G.asked = opts.prompt; cb(a) end", answer)
    ed.nvim.command("Mia prompt echo again")
    ed.wait("require('mia.chat').state() ~= 'streaming'")
    assert ed.lua("return asked").startswith("Session cost limit reached ($0.00")
    assert ed.lua("return asked").endswith("Continue? [y/N] ")
    if sent:
        assert len(posts(server)) == before + 1
        assert ed.lua("return require('mia.chat').state()") == "done"
    else:
        assert len(posts(server)) == before  # the server saw no request
        assert "**Error** (budget_exceeded)" in ed.chat_text()


def test_a_hard_limit_refuses_without_asking(make, server):
    ed = make(costs={"session_limit_usd": 0.000001, "hard_limit": True})
    prompt(ed, "echo costs money")
    before = len(posts(server))
    ed.lua("_G.asked = false; vim.ui.input = function() _G.asked = true end")
    prompt(ed, "echo again", state="error")
    assert ed.lua("return asked") is False
    assert len(posts(server)) == before
    assert "costs.session_limit_usd" in ed.chat_text()


def unopenable_store(data_home):
    """A file that is no database where the store should be."""
    path = data_home / "nvim" / "mia" / "mia.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database\n" * 300)


def test_a_hard_session_limit_holds_while_the_store_cannot_be_opened(make, server, data_home):
    """Without the store, what this Neovim spent still counts: the limit
    refuses the next request as it does with the store, and nothing is sent."""
    unopenable_store(data_home)
    ed = make(costs={"session_limit_usd": 0.000001, "hard_limit": True})
    prompt(ed, "echo costs money")
    before = len(posts(server))
    prompt(ed, "echo again", state="error")
    assert len(posts(server)) == before
    assert "costs.session_limit_usd" in ed.chat_text()


def test_a_daily_limit_holds_for_every_call_while_the_store_cannot_be_opened(make, server, data_home):
    """The day's spend without the store: this Neovim's every session and
    every mia.send call."""
    unopenable_store(data_home)
    ed = make(costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    prompt(ed, "echo the first session spends")
    ed.nvim.command("Mia new")
    before = len(posts(server))
    prompt(ed, "echo a second session", state="error")
    assert "costs.daily_limit_usd" in ed.chat_text()
    ed.lua("""
      _G.got = nil
      require('mia').send({ messages = { { role = 'user', content = 'echo a plugin' } } }, {
        on_done = function(d) got = { done = d } end,
        on_error = function(e) got = { err = e } end,
      }, { agent = 'myplugin' })""")
    ed.wait("got ~= nil")
    got = ed.lua("return got")
    assert got.get("err", {}).get("class") == "budget_exceeded", got
    assert len(posts(server)) == before


def test_daily_limit_counts_every_session_of_the_day(make, server):
    ed = make(costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    prompt(ed, "echo first session")
    ed.nvim.command("Mia new")
    prompt(ed, "echo second session", state="error")
    # Refused for the day's spend (the first session's), not the new session's own.
    text = ed.chat_text()
    assert "today's requests have cost" in text and "daily limit" in text, text
    assert "costs.daily_limit_usd" in text, text


def test_killing_neovim_mid_stream_loses_at_most_the_last_second(make, data_home):
    ed = make()
    prompt(ed, "echo a complete exchange")
    ed.nvim.command("Mia prompt slow 400 50")
    ed.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 7 * 100")
    shown = ed.lua("return vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1]")
    os.kill(ed.pid, signal.SIGKILL)
    time.sleep(0.3)
    with db(data_home) as c:
        msgs = c.execute("select seq, role, state, parts from messages order by seq").fetchall()
    assert [(m[0], m[1], m[2]) for m in msgs[:4]] == [
        (0, "user", "complete"),
        (1, "assistant", "complete"),
        (2, "assistant", "complete"),  # the first turn's end
        (3, "user", "complete"),
    ]
    seq, role, state, parts = msgs[4]
    assert (seq, role, state) == (4, "assistant", "streaming")
    import json
    saved = json.loads(parts)[0]["text"]
    # The store is written on the core's thread and the chat on the main
    # thread, so either may be a frame ahead of the other; both are the
    # stream's start, and what was saved is at most ~60 tokens (a bit over a
    # second at 50/s) behind what was shown.
    stream = "".join(f"w{i:05d} " for i in range(400))
    assert stream.startswith(saved) and stream.startswith(shown)
    assert len(saved) >= len(shown) - 7 * 60


def test_two_neovims_writing_the_same_store_lose_nothing(make, data_home):
    a, b = make("a"), make("b")
    for i in range(3):
        a.nvim.command(f"Mia prompt echo from a {i}")
        b.nvim.command(f"Mia prompt echo from b {i}")
        a.wait("require('mia.chat').state() == 'done'")
        b.wait("require('mia.chat').state() == 'done'")
    with db(data_home) as c:
        assert c.execute("select count(*) from usage").fetchone()[0] == 6
        assert c.execute("select count(distinct session_id) from messages").fetchone()[0] == 2
        assert c.execute("select count(*) from messages where parts <> '[]'").fetchone()[0] == 12
        assert c.execute("select count(*) from messages where parts = '[]'").fetchone()[0] == 6  # one end per turn


def test_the_costs_window_opens_renders_the_chart_cycles_and_closes(make):
    ed = make()
    prompt(ed, "echo for the chart")
    ed.nvim.command("MiaCosts")
    ed.wait("vim.startswith(vim.api.nvim_buf_get_lines(0, 0, 1, false)[1], 'Cost ')")  # drawn when the report arrives
    cfg = ed.lua("return vim.api.nvim_win_get_config(0)")
    assert cfg["relative"] == "editor"
    assert cfg["border"] == ["╭", "─", "╮", "│", "╯", "─", "╰", "│"]
    assert "this session" in "".join(t[0] for t in cfg["title"])
    lines = ed.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
    assert lines[0].startswith("Cost this session: $")
    chart = lines[lines.index("Daily cost, last 30 days") + 1:]
    assert chart[0].strip().startswith("$") and "┤" in chart[0]
    assert "█" in "".join(chart[:8])  # today's bar reaches the top
    assert chart[8].strip().startswith("└")
    ed.nvim.input("<Tab>")
    ed.wait("vim.b.mia_costs_scope == 'daily'")
    assert "today" in "".join(t[0] for t in ed.lua("return vim.api.nvim_win_get_config(0)")["title"])
    assert ed.lua("return vim.api.nvim_buf_get_lines(0, 0, 1, false)[1]").startswith("Cost today (" + ed.lua("return os.date('%Y-%m-%d')") + "): $")
    ed.nvim.input("q")
    ed.lua("vim.wait(50)")
    assert ed.lua("return vim.api.nvim_win_get_config(0).relative") == ""


def test_a_session_resumes_after_restart_with_its_full_history(make, server, tmp_path):
    first = make("first")
    prompt(first, "echo the first question")
    prompt(first, "echo the second question")
    first.close()
    second = make("second")
    listing = second.lua("return require('mia').sessions.list({ cwd = vim.fn.getcwd() })")
    assert "nextCursor" not in listing
    (info,) = listing["sessions"]
    assert info["title"] == "echo the first question"
    assert info["cwd"] == str(tmp_path)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", info["updatedAt"])
    assert info["_meta"]["messageCount"] == 4 and info["_meta"]["costUsd"] > 0
    second.lua("require('mia').sessions.load(...)", info["sessionId"])
    assert "echo the second question" in second.chat_text()
    prompt(second, "echo the third question")
    sent = posts(server)[-1]["body"]["messages"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[2]["content"] == "echo the first question"
    assert second.lua("return require('mia').sessions.list({}).sessions[1]._meta.messageCount") == 6


def test_leaving_neovim_empties_the_write_ahead_log_into_the_store(make, data_home):
    # The next start does not read the log back; the history is all in the main file.
    ed = make()
    prompt(ed, "echo kept in the main file")
    wal = data_home / "nvim" / "mia" / "mia.sqlite3-wal"
    assert wal.exists() and wal.stat().st_size > 0
    quit(ed)
    assert not wal.exists() or wal.stat().st_size == 0
    # Read with the log out of the way: only the main file can answer.
    con = sqlite3.connect(f"file:{data_home / 'nvim' / 'mia' / 'mia.sqlite3'}?mode=ro&immutable=1", uri=True)
    texts = [r[0] for r in con.execute("SELECT parts FROM messages")]
    assert any("echo kept in the main file" in t for t in texts), texts


def test_sessions_are_picked_renamed_and_deleted(make):
    ed = make()
    prompt(ed, "echo to rename")
    ed.nvim.command("Mia rename Better title")
    assert ed.lua("return require('mia').sessions.list({}).sessions[1].title") == "Better title"
    ed.lua("vim.ui.select = function(items, opts, cb) _G.shown = opts.format_item(items[1]); cb(items[1], 1) end")
    ed.lua("_G.shown = nil")
    ed.nvim.command("Mia sessions")
    ed.wait("shown ~= nil")
    assert re.fullmatch(r"Better title · \d+m ago · 2 messages · \$0\.\d+", ed.lua("return shown"))
    sid = ed.lua("return require('mia').sessions.list({}).sessions[1].sessionId")
    ed.lua("require('mia').sessions.delete(...)", sid)
    assert ed.lua("return require('mia').sessions.list({}).sessions") == []


def test_an_invalid_cursor_is_a_clear_error(make):
    ed = make()
    prompt(ed, "echo something")
    with pytest.raises(NvimError, match="cursor"):
        ed.lua("require('mia').sessions.list({ cursor = 'bm90LWEtY3Vyc29y' })")


def test_session_report_suggests_caching_a_large_repeated_system_prompt(make):
    ed = make(system="You are a careful assistant. " * 200)  # well over 1,024 tokens, sent every time
    for i in range(3):
        prompt(ed, f"echo question {i}")
    r = ed.lua("return require('mia').costs({ scope = 'session' })")
    kinds = [s["kind"] for s in r["suggestions"]]
    assert "prompt_caching" in kinds, r["suggestions"]
    caching = r["suggestions"][kinds.index("prompt_caching")]
    assert caching["savings_usd"] > 0 and "$" in caching["text"]
    assert any(l.startswith("  • ") for l in ed.lua("return require('mia.costs').lines(...)", r))


def test_compaction_calls_are_recorded_too(make, data_home):
    ed = make()
    prompt(ed, "echo something to summarize")
    ed.nvim.command("Mia prompt /compact")
    ed.wait("vim.tbl_contains(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '> _context compacted_')")
    with db(data_home) as c:
        agents = [r[0] for r in c.execute("select agent from usage order by id")]
    assert agents == ["mia", "compaction"]


def record_notices(ed):
    ed.lua("_G.notices = {} vim.notify = function(msg) table.insert(_G.notices, msg) end")


def summaries(ed):
    return [n for n in ed.lua("return notices") if "ended:" in n]


def test_a_session_ending_shows_its_summary_once_with_the_top_suggestion(make):
    ed = make(system="You are a careful assistant. " * 200)  # a cacheable system prompt: caching is suggested
    record_notices(ed)
    for i in range(3):
        prompt(ed, f"echo question {i}")
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    top = report["suggestions"][0]
    assert top["current_model"] == "scn/echo" and top["savings_usd"] > 0 and 0 < top["savings_percent"] <= 100, top
    t = report["totals"]
    ed.nvim.input(":Mia new<CR>")
    ed.wait("#vim.tbl_filter(function(n) return n:find('ended:', 1, true) end, notices) == 1")
    (text,) = summaries(ed)
    lines = text.split("\n")
    assert re.fullmatch(r"mia: session “echo question 0” ended: \$0\.\d+ · 3 requests", lines[0]), text
    assert lines[1] == (f"  tokens: {t['input_tokens']:,} input · {t['output_tokens']:,} output · "
                        f"{t['cache_read_tokens']:,} cache read · {t['cache_write_tokens']:,} cache write"), text
    assert re.fullmatch(r"  duration: \d+ s", lines[2]), text
    assert lines[3] == "  agents: mia (scn/echo)", text
    assert lines[4] == "  tip: " + top["text"], text
    # The new session has no usage: ending it says nothing.
    ed.nvim.input(":Mia new<CR>")
    ed.lua("vim.wait(200)")
    assert len(summaries(ed)) == 1


def test_the_system_prompt_estimate_counts_the_tool_list_every_request_sends(make):
    """A short system prompt with the built-in tools' schemas still goes out
    at over 1,024 tokens a request: the caching tip counts both."""
    ed = make(system="Be brief.")
    for i in range(3):
        prompt(ed, f"echo question {i}")
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    tips = [s["text"] for s in report["suggestions"] if s["kind"] == "prompt_caching"]
    assert len(tips) == 1, report["suggestions"]
    shown = int(re.search(r"a ([\d,]+)-token system prompt", tips[0]).group(1).replace(",", ""))
    expected = ed.lua("""
        local chars = #'Be brief.'
        for _, t in ipairs(require('mia')._core().tools()) do
          chars = chars + #t.name + #(t.description or '') + #vim.json.encode(t.parameters or {})
        end
        return math.floor(chars / 4)""")
    assert expected > 1024 and abs(shown - expected) <= expected * 0.03, (shown, expected)


def test_switching_to_another_session_shows_the_summary_of_the_one_left(make):
    ed = make()
    prompt(ed, "echo the older one")
    ed.nvim.command("Mia new")
    prompt(ed, "echo the newer one")
    record_notices(ed)
    ed.lua("vim.ui.select = function(items, opts, cb) for i, it in ipairs(items) do "
           "if opts.format_item(it):find('older', 1, true) then return cb(it, i) end end end")
    ed.nvim.input(":Mia sessions<CR>")
    ed.wait("#notices > 0")
    assert summaries(ed)[0].startswith("mia: session “echo the newer one” ended: $0.0"), summaries(ed)
    assert "echo the older one" in ed.chat_text()


def test_leaving_neovim_logs_the_summary_and_the_next_start_shows_it_once(make, tmp_path):
    first = make("first")
    prompt(first, "echo before quitting")
    log_file = first.lua("return require('mia.config').get().log_file")
    # Read after each answer, asynchronously; what an exit hands over.
    first.wait("require('mia.chat')._summary() ~= nil")
    quit(first)
    logged = open(log_file, encoding="utf-8").read()
    assert "mia: session “echo before quitting” ended: $0.0" in logged
    assert "panicked" not in logged, logged
    second = make("second")
    second.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('last time, session', 1, true) ~= nil",
                10000)
    assert re.search(r"mia: last time, session “echo before quitting” ended: \$0\.\d+ · 1 request\n  tokens: ",
                     second.messages()), second.messages()
    # Shown once: the next start says nothing more.
    quit(second)
    third = make("third")
    third.lua("vim.wait(300)")
    assert "last time" not in third.messages()


def test_cached_tokens_of_a_model_without_a_cache_price_cost_nothing(editor_factory, server, tmp_path):
    """A price without `cache_read` bills cache reads at 0, as the cost
    contract says (they were billed at the input price)."""
    ed = editor_factory(setup=scenario_setup(server, pricing={"scn/echo": {"input": 3.0, "output": 15.0}}))
    prompt(ed, "cached 100000")
    done = ed.lua("return require('mia.chat')._last_done()")
    u = done["usage"]
    assert u["cache_read_tokens"] == 100000
    assert done["cost"]["cache_read_usd"] == 0
    assert done["cost"]["total_usd"] == pytest.approx((u["input_tokens"] * 3.0 + u["output_tokens"] * 15.0) / 1e6)
    footer = ed.chat_text(footers=True).split("\n")[-1]
    assert re.fullmatch(r"── echo · [\d,]+ in · 1 out · 100K cached · \$0\.\d+ ──", footer), footer


def screen_row(ed, row):
    return ed.lua("""local row = ...
      local s = {}
      for col = 1, vim.o.columns do s[#s + 1] = vim.fn.screenstring(row, col) end
      return vim.trim(table.concat(s))""", row)


def test_the_statusline_shows_the_message_count_and_tokens_and_the_daily_report_its_date_and_sessions(make):
    ed = make()
    ed.lua("""vim.o.laststatus = 2
      _G.mia_status = function() return require('mia').statusline({ messages = true, tokens = true }) end
      vim.o.statusline = '%!v:lua.mia_status()'""")
    prompt(ed, "echo one")
    prompt(ed, "echo two")
    ed.nvim.command("redraw!")
    tokens = ed.lua("return require('mia.chat').figures().tokens")
    rows = [screen_row(ed, r) for r in range(1, ed.lua("return vim.o.lines") + 1)]
    status = [m for r in rows for m in re.findall(r"mia ask echo \S+ \d+ msgs? \S+ tok", r)]
    assert status, "\n".join(rows)
    assert re.fullmatch(r"mia ask echo \$0\.\d+ 4 msgs \S+ tok", status[-1]), status
    assert tokens > 0
    # A second session on the same day, with the same model.
    ed.nvim.command("Mia new")
    prompt(ed, "echo three")
    ed.nvim.command("Mia costs daily")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Sessions by model', 1, true) ~= nil")
    out = ed.messages()
    today = ed.lua("return os.date('%Y-%m-%d')")
    assert f"Cost daily ({today}): $" in out, out
    assert "sessions: 2" in out, out
    assert "Sessions by model: scn/echo 2" in out, out
