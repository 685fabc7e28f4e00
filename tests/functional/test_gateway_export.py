"""The gateway's own cost (LiteLLM's x-litellm-response-cost header and
usage.cost) recorded instead of the local price math, and
`:Mia costs export {csv|json}` for finance, in real Neovims against the
scenario server."""

import csv
import io
import json
import re
import sqlite3

import pytest
from pynvim.api.common import NvimError

from conftest import scenario_setup

PRICE = {"input": 3.0, "output": 15.0}


@pytest.fixture
def make(editor_factory, server, data_home, tmp_path):
    def make(name="nvim"):
        opts = scenario_setup(server, pricing={"scn/echo": PRICE})
        e = editor_factory(name=name, env={"XDG_DATA_HOME": str(data_home)}, setup=opts)
        e.lua("vim.cmd.cd(...)", str(tmp_path))
        return e
    return make


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def footer(ed):
    return ed.chat_text(footers=True).split("\n")[-1]


def sources(data_home):
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        return c.execute("select cost_source, total_usd from usage order by id").fetchall()


@pytest.mark.parametrize("where", ["header", "usage", "both"])
def test_the_gateways_cost_is_recorded_and_shown_instead_of_the_local_price(make, data_home, where):
    ed = make()
    prompt(ed, f"gateway {where} 0.4321")
    assert re.fullmatch(r"── echo · [\d,]+ in · 1 out · \$0\.432 \(gateway\) ──", footer(ed)), footer(ed)
    done = ed.lua("return require('mia.chat')._last_done()")
    assert done["cost"]["total_usd"] == pytest.approx(0.4321)
    assert done["cost"]["source"] == "gateway"
    assert sources(data_home) == [("gateway", pytest.approx(0.4321))]
    prompt(ed, "echo local")
    ed.nvim.command("Mia costs session")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Cost ', 1, true) ~= nil")
    assert "Cost session: $0.43" in ed.messages()
    assert "Priced by the gateway: 1 of 2 requests, $0.432" in ed.messages()


@pytest.mark.parametrize("value", ["NaN", "-1", "1e9", "inf", "abc", "1000"])
def test_a_hostile_gateway_cost_is_ignored_and_the_local_price_applies(make, data_home, value):
    ed = make()
    prompt(ed, f"gateway both {value}")
    done = ed.lua("return require('mia.chat')._last_done()")
    u = done["usage"]
    assert done["cost"].get("source") is None
    assert done["cost"]["total_usd"] == pytest.approx((u["input_tokens"] * 3.0 + u["output_tokens"] * 15.0) / 1e6)
    assert re.fullmatch(r"── echo · [\d,]+ in · 1 out · \$0\.\d+ ──", footer(ed)), footer(ed)
    assert sources(data_home) == [("local", pytest.approx(done["cost"]["total_usd"]))]


def test_without_a_gateway_the_source_is_local(make, data_home):
    ed = make()
    prompt(ed, "echo plain")
    assert "(gateway)" not in footer(ed)
    assert [s for s, _ in sources(data_home)] == ["local"]
    ed.nvim.command("Mia costs daily")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Cost ', 1, true) ~= nil")
    assert "Cost daily (" in ed.messages() and "): $0.0" in ed.messages() and "Priced by the gateway" not in ed.messages()


def export(ed, args):
    # Each export opens a buffer of its own: wait for that one, not a
    # finished earlier export that is still current until the keys run.
    before = ed.nvim.current.buffer.number
    ed.nvim.input(f":Mia costs export {args}<CR>")
    ed.wait(f"vim.api.nvim_get_current_buf() ~= {before} and vim.b.mia_costs_export ~= nil"
            " and vim.b.mia_costs_export.done == true")
    return ed.nvim.current.buffer


def test_export_csv_after_two_prompts_opens_a_scratch_buffer_with_one_row_each(make):
    ed = make()
    prompt(ed, "echo one")
    prompt(ed, "gateway usage 0.25")
    buf = export(ed, "csv")
    assert buf.options["filetype"] == "csv"
    assert buf.options["buftype"] == "nofile"
    assert buf.options["fileformat"] == "dos"
    rows = list(csv.DictReader(io.StringIO("\n".join(buf[:]))))
    assert [r["cost_source"] for r in rows] == ["local", "gateway"]
    assert rows[1]["cost_usd"] == "0.25"
    sid = ed.lua("return require('mia.chat').session_id()")
    for r in rows:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]), r["time"]
        assert (r["session_id"], r["provider"], r["model"], r["agent"]) == (sid, "scn", "echo", "mia")
        assert int(r["input_tokens"]) > 0 and int(r["output_tokens"]) > 0
        assert r["mode"] != "" and r["project"] != ""
    assert float(rows[0]["cost_usd"]) > 0
    assert "2 usage rows exported as csv" in ed.messages()


def test_export_json_parses_and_a_date_range_selects_rows(make):
    ed = make()
    prompt(ed, "echo one")
    prompt(ed, "echo two")
    buf = export(ed, "json")
    assert buf.options["filetype"] == "json"
    rows = json.loads("\n".join(buf[:]))
    assert len(rows) == 2 and {r["cost_source"] for r in rows} == {"local"}
    assert all(r["cost_usd"] > 0 and r["model"] == "echo" for r in rows)
    today = ed.lua("return os.date('%Y-%m-%d')")
    assert len(json.loads("\n".join(export(ed, f"json {today} {today}")[:]))) == 2
    assert json.loads("\n".join(export(ed, "json 2000-01-01 2000-12-31")[:])) == []
    csv_empty = export(ed, "csv 2999-01-01")[:]
    assert csv_empty == [csv_empty[0]] and csv_empty[0].startswith("time,session_id,")


def test_export_arguments_are_checked_and_completed(make):
    ed = make()
    prompt(ed, "echo one")
    for args, message in [
        ("xml", "usage: :Mia costs export {csv|json}"),
        ("csv 2024-13-01", "`2024-13-01` is not a date: use YYYY-MM-DD"),
        ("csv 2024-02-02 2024-02-01", "ends \\(2024-02-01\\) before it starts"),
        ("json 2024-01-01 2024-01-02 extra", "usage: :Mia costs export"),
    ]:
        with pytest.raises(NvimError, match=message):
            ed.nvim.command("Mia costs export " + args)
    assert ed.nvim.call("getcompletion", "Mia costs ex", "cmdline") == ["export"]
    assert ed.nvim.call("getcompletion", "Mia costs export ", "cmdline") == ["csv", "json"]
    assert ed.nvim.call("getcompletion", "Mia costs export j", "cmdline") == ["json"]


def test_a_large_export_lets_the_editor_run_between_its_chunks(make, data_home):
    """8,000 rows arrive in 4 chunks. Between two chunks Neovim goes back to
    its loop, so typed keys, timers and redraws run while the buffer fills:
    a probe run on every turn of the loop sees it part-filled more than
    once. (A chain of vim.schedule callbacks runs every chunk before the loop
    turns again, so the probe could see at most the first chunk.)"""
    ed = make()
    prompt(ed, "echo seed")
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        cols = [r[1] for r in c.execute("pragma table_info(usage)") if r[1] != "id"]
        row = c.execute(f"select {','.join(cols)} from usage limit 1").fetchone()
        at = cols.index("created_at_ms")
        c.executemany(
            f"insert into usage ({','.join(cols)}) values ({','.join('?' * len(cols))})",
            (row[:at] + (row[at] - 1000 - i,) + row[at + 1:] for i in range(7_999)),
        )
    ed.lua("""
        _G.seen = {}
        _G.probe = vim.uv.new_check()
        _G.probe:start(vim.schedule_wrap(function()
          local e = vim.b.mia_costs_export
          if e and not e.done and #_G.seen < 10000 then
            table.insert(_G.seen, vim.api.nvim_buf_line_count(0))
          end
        end))
    """)
    buf = export(ed, "csv")
    ed.lua("_G.probe:stop()")
    assert len(buf) == 8_001
    partial = {n for n in ed.lua("return _G.seen") if 1 < n < 8_001}
    assert len(partial) >= 2, f"the loop did not turn while the export filled its buffer: {partial}"
    assert "8000 usage rows exported as csv" in ed.messages()
