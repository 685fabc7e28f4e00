"""`:Mia context` and live cost, in a real headless Neovim against the
scenario server. The server counts prompt tokens with its own
tokenizer-like rule (`--prompt-tokens pieces`, over everything the model
reads), both in its counting endpoints and in the usage it reports, so the
figures :Mia context shows can be checked against what the request then
costs."""

import re

import pytest

from conftest import KEYS, ScenarioServer, provider_config

# Prices with context windows, so shares and dollars show.
PRICE = {"input": 3.0, "output": 15.0, "context": 200000}
RULES = "Always answer in English.\nPrefer small functions and explain every change you make.\n"
# The error `:Mia context` states for its estimate (doc/mia.txt, *:Mia-context*).
ERROR_PERCENT = 25


@pytest.fixture
def counting_server():
    s = ScenarioServer(["--prompt-tokens", "pieces"])
    yield s
    s.stop()


@pytest.fixture
def make(editor_factory, counting_server, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "AGENTS.md").write_text(RULES)

    def make(fmt):
        name = {"openai": "scn", "anthropic": "anth", "gemini": "gem"}[fmt]
        opts = {
            "model": f"{name}/echo",
            "providers": {name: provider_config(fmt, counting_server)},
            "pricing": {f"{name}/echo": PRICE},
            "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 0},
        }
        ed = editor_factory(name=f"nvim-{fmt}", env=KEYS, setup=opts)
        ed.lua("vim.cmd.cd(...)", str(project))
        return ed

    return make


def open_context(ed):
    """Runs `:Mia context` with `text` in the prompt buffer and returns the float's lines."""
    ed.nvim.command("Mia context")
    ed.wait("(function() for _, w in ipairs(vim.api.nvim_list_wins()) do "
            "if vim.bo[vim.api.nvim_win_get_buf(w)].filetype == 'mia-context' then return true end end "
            "return false end)()")
    lines = ed.lua("""
        for _, w in ipairs(vim.api.nvim_list_wins()) do
          local b = vim.api.nvim_win_get_buf(w)
          if vim.bo[b].filetype == 'mia-context' then
            local lines = vim.api.nvim_buf_get_lines(b, 0, -1, false)
            vim.api.nvim_win_close(w, true)
            return lines
          end
        end""")
    return lines


ROW = re.compile(r"^(?P<name>.{36}) +(?P<mark>~?)(?P<tokens>[\d,]+) +(?P<pct>[\d.]+%|\?) +(?P<usd>\S+)$")


def rows(lines):
    """The float's part rows and its total: [(name, tokens, marked, pct, usd)], total row."""
    out = []
    for line in lines:
        m = ROW.match(line)
        if m and m["name"].strip() != "part":
            out.append((m["name"].rstrip(), int(m["tokens"].replace(",", "")), m["mark"] == "~", m["pct"], m["usd"]))
    total = [r for r in out if r[0] == "total"]
    assert len(total) == 1, lines
    return [r for r in out if r[0] != "total"], total[0]


def type_prompt(ed, text):
    ed.nvim.command("Mia open")
    ed.lua("vim.api.nvim_buf_set_lines(require('mia.prompt').buffer(), 0, -1, false, { ... })", text)


def counts(counting_server, path_part):
    return [r for r in counting_server.requests() if r["method"] == "POST" and path_part in r["path"]]


@pytest.mark.parametrize("fmt", ["anthropic", "gemini", "openai"])
def test_context_lists_every_part_and_its_total_is_what_the_request_then_reports(make, counting_server, fmt):
    ed = make(fmt)
    text = "echo what does this project do, in a few words?"
    type_prompt(ed, text)
    lines = open_context(ed)
    parts, total = rows(lines)
    names = [p[0] for p in parts]
    assert "system prompt" in names, lines
    assert "rules: AGENTS.md" in names, lines
    assert any(n.startswith("tool definitions (") for n in names), lines
    assert "prompt" in names, lines
    # Details (the largest tools, indented) are not added again.
    top = [p for p in parts if not p[0].startswith("  ")]
    assert sum(p[1] for p in top) == total[1], lines
    assert any(p[0].startswith("  ") for p in parts), "the largest tools are named"
    # Share of the 200,000-token window and price at $3 per million.
    assert total[3] == f"{total[1] * 100 / 200000:.1f}%", lines
    assert total[4] == ed.lua("return require('mia.costs').usd(...)", total[1] * 3.0 / 1e6), lines

    endpoint = {"anthropic": "/v1/messages/count_tokens", "gemini": ":countTokens", "openai": "count"}[fmt]
    if fmt == "openai":
        assert not counts(counting_server, "count"), "OpenAI has no counting endpoint: nothing is sent"
        assert all(p[2] for p in parts) and total[2], f"an estimate is marked ~: {lines}"
        assert any(line.startswith("~ estimated (within ±25%") for line in lines), lines
    else:
        seen = counts(counting_server, endpoint)
        assert len(seen) == 1, "one counting request for the whole report"
        assert not any(p[2] for p in parts) and not total[2], f"a count is not marked ~: {lines}"
        assert any(line.startswith("counted by the provider") for line in lines), lines
        body = seen[0]["body"]
        wire = body["generateContentRequest"] if fmt == "gemini" else body
        assert RULES.splitlines()[0] in str(wire), "the rules file is in the counted request"
        assert "max_tokens" not in wire and "stream" not in wire

    # Now send it: the usage the server reports for the input matches.
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")
    usage = ed.lua("return require('mia.chat')._last_done().usage")
    reported = usage["input_tokens"] + usage["cache_read_tokens"] + usage["cache_write_tokens"]
    if fmt == "openai":
        assert abs(reported - total[1]) <= reported * ERROR_PERCENT / 100, (reported, total[1])
    else:
        assert reported == total[1], (reported, total[1])


def test_a_failing_counting_endpoint_falls_back_to_the_estimate_with_a_note(editor_factory, counting_server, tmp_path):
    # An Anthropic-format provider whose base URL has no counting endpoint (404).
    provider = provider_config("anthropic", counting_server)
    provider["base_url"] += "/nowhere"
    ed = editor_factory(env=KEYS, setup={"model": "anth/echo", "providers": {"anth": provider}})
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    type_prompt(ed, "echo hi")
    lines = open_context(ed)
    parts, total = rows(lines)
    assert total[2] and all(p[2] for p in parts), lines
    note = [line for line in lines if line.startswith("note: ")]
    assert note and "The figures are estimates." in note[0], lines
    assert total[3] == "?" and total[4] == "?", "no price known: no share or price is made up"


def test_history_counts_once_the_session_has_messages(make):
    ed = make("openai")
    ed.nvim.command("Mia prompt echo first question")
    ed.wait("require('mia.chat').state() == 'done'")
    type_prompt(ed, "echo second")
    parts, total = rows(open_context(ed))
    assert any(p[0] == "history (2 messages)" and p[1] > 0 for p in parts), parts


def test_the_footer_climbs_while_the_answer_streams_and_ends_exact(make):
    ed = make("openai")
    ed.nvim.command("Mia prompt slow 60 20")
    ed.wait("require('mia.chat').live_text() ~= nil")
    live = ed.lua("return require('mia.chat').live_text()")
    state = ed.lua("return require('mia.chat').state()")
    status = ed.lua("return require('mia').statusline({ tokens = true, context = true })")
    assert state == "streaming"
    assert re.fullmatch(r"── echo · ~[\d,]+ in · ~[\d,]+ out · ~\$[\d.]+ … ──", live), live
    assert re.search(r"~\$[\d.]+ ~[\d.,k]+ tok ~\d+% ctx …$", status), status
    # It climbs: a later figure has more output.
    first_out = int(re.search(r"~([\d,]+) out", live)[1].replace(",", ""))
    ed.wait(f"(function() local t = require('mia.chat').live_text() or '' "
            f"local n = tonumber((t:match('~([%d,]+) out') or '0'):gsub(',', '') .. '') "
            f"return n > {first_out} or require('mia.chat').state() ~= 'streaming' end)()")
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.lua("return require('mia.chat').live_text()") is None
    done = ed.lua("return require('mia.chat')._last_done()")
    footer = ed.chat_text(footers=True).split("\n")[-1]
    assert "~" not in footer
    assert f"{done['usage']['output_tokens']:,} out" in footer, footer
    status = ed.lua("return require('mia').statusline({ tokens = true, context = true })")
    assert "~" not in status
    tokens = done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
    pct = round(tokens * 100 / 200000)
    assert status.endswith(f" tok {pct}% ctx"), status


def statusline_probe(ed, body):
    """Every window's statusline is drawn by `_G.probe` (Lua `body`, which
    returns the text): it runs only when Neovim draws a statusline."""
    ed.lua(f"""
      _G.probe = function()
        {body}
      end
      vim.o.laststatus = 2
      vim.o.statusline = '%!v:lua.probe()'
    """)


def answer(ed, prompt):
    ed.nvim.command("Mia prompt " + prompt)
    ed.wait("require('mia.chat').state() == 'done'")


def test_the_drawn_statusline_follows_the_live_figures_while_the_answer_streams(make):
    """A statusline showing mia.statusline() is redrawn as the live figures
    climb, not only when the answer ends: the probe records what Neovim
    actually drew."""
    ed = make("openai")
    ed.lua("_G.drawn = {}")
    statusline_probe(ed, """
        local s = require('mia').statusline({ tokens = true, context = true })
        if drawn[#drawn] ~= s then drawn[#drawn + 1] = s end
        return s""")
    answer(ed, "slow 60 20")
    drawn = ed.lua("return drawn")
    live = [s for s in drawn if "~$" in s]
    assert len(live) >= 3, drawn  # ~3 s at ~3 figures a second, each drawn
    costs = [float(re.search(r"~\$([\d.]+)", s)[1]) for s in live]
    assert costs == sorted(costs) and costs[0] < costs[-1], live
    # and once the answer has ended, the exact figures without the "…"
    ed.wait("not drawn[#drawn]:find('…', 1, true)")
    assert "~" not in ed.lua("return drawn[#drawn]")


def test_live_figures_redraw_no_statusline_until_one_shows_mia(make):
    """The live figures redraw statuslines only once some statusline has
    drawn mia.statusline(): a statusline without it is drawn no more often
    while an answer streams, and adding mia's starts the live redraws."""
    ed = make("openai")
    ed.lua("_G.draws, _G.with_mia = 0, false")
    statusline_probe(ed, """
        draws = draws + 1
        return with_mia and require('mia').statusline() or 'plain'""")
    answer(ed, "slow 60 20")
    plain = ed.lua("return draws")
    ed.lua("draws, with_mia = 0, true; vim.cmd.redrawstatus({ bang = true })")
    answer(ed, "slow 60 20")
    shown = ed.lua("return draws")
    # ~3 s at ~3 live figures a second: each redraws the statuslines once
    # mia's is shown; a plain statusline is drawn only by ordinary redraws.
    assert shown >= plain + 6, (plain, shown)


def test_a_live_figure_does_not_draw_the_chat_window_a_second_time(make):
    """The live figures (about three a second) ride on the text's redraw: the
    chat window is drawn about once per change of its buffer, not once more
    for each figure (`:redrawstatus!` ran a whole screen update before the
    text of the same frame was written)."""
    ed = make("openai")
    ed.lua("""
      _G.wins, _G.changes = 0, 0
      vim.o.laststatus = 2
      vim.o.statusline = "%!v:lua.require'mia'.statusline()"
      local ns = vim.api.nvim_create_namespace('probe_redraws')
      vim.api.nvim_set_decoration_provider(ns, {
        on_win = function(_, win) if win == vim.fn.bufwinid(require('mia.chat').buffer()) then wins = wins + 1 end end,
      })
      vim.api.nvim_buf_attach(require('mia.chat').buffer(), false, {
        on_bytes = function() changes = changes + 1 end,
      })
    """)
    ed.nvim.command("Mia prompt slow 60 20")
    ed.wait("require('mia.chat').live_text() ~= nil")
    ed.wait("require('mia.chat').state() == 'done'")
    wins, changes = ed.lua("return { wins, changes }")
    assert changes >= 30 and wins <= changes + 5, (wins, changes)


def test_checkhealth_says_whether_the_context_window_is_known(make, editor_factory, counting_server, tmp_path):
    ed = make("anthropic")
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("context window and prices", 1)[1]
    assert "anth/echo: 200,000 tokens of context" in section, section
    bare = editor_factory(name="bare", setup={"model": "scn/unpriced", "providers": {"scn": provider_config("openai", counting_server)}})
    bare.nvim.command("checkhealth mia")
    section = "\n".join(bare.nvim.current.buffer[:]).split("context window and prices", 1)[1]
    assert "no price for scn/unpriced" in section, section


def test_the_live_footer_uses_the_input_anthropic_reports_at_the_start(make):
    # Anthropic's message_start carries the real input count: the live line
    # shows it at once; only the output so far is estimated.
    ed = make("anthropic")
    ed.nvim.command("Mia prompt slow 40 20")
    ed.wait("require('mia.chat').live_text() ~= nil")
    live = ed.lua("return require('mia.chat').live_text()")
    ed.wait("require('mia.chat').state() == 'done'")
    done = ed.lua("return require('mia.chat')._last_done()")
    shown = int(re.search(r"~?([\d,]+) in", live)[1].replace(",", ""))
    assert shown == done["usage"]["input_tokens"], (live, done["usage"])


@pytest.mark.parametrize("fmt", ["anthropic", "openai"])
def test_the_prompts_mentions_are_parts_of_their_own_and_are_counted(make, counting_server, tmp_path, fmt):
    ed = make(fmt)
    notes = "Remember the milk. " * 200
    (tmp_path / "project" / "notes.txt").write_text(notes)
    type_prompt(ed, "echo summarize @notes.txt please")
    lines = open_context(ed)
    parts, total = rows(lines)
    mention = [p for p in parts if p[0] == "@notes.txt"]
    assert len(mention) == 1, lines
    top = [p for p in parts if not p[0].startswith("  ")]
    assert sum(p[1] for p in top) == total[1], lines
    # The file is most of the prompt's weight: far more than the typed line.
    prompt_row = next(p for p in parts if p[0] == "prompt")
    assert mention[0][1] > 20 * prompt_row[1], lines
    if fmt == "anthropic":
        (seen,) = counts(counting_server, "/v1/messages/count_tokens")
        assert "Remember the milk." in str(seen["body"]["messages"][-1]), "the counted request carries the file"
    # A mention the send would refuse is refused here too, with the same reason.
    (tmp_path / "outside.txt").write_text("not the project's\n")
    type_prompt(ed, "echo @../outside.txt")
    ed.nvim.command("Mia context")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('outside', 1, true) ~= nil")
