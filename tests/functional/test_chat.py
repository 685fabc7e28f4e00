"""`:Mia prompt` end to end: real Neovim, real HTTP, the chat buffer checked byte for byte."""

import re

import pytest
from pynvim.api.common import NvimError

from conftest import free_port, scenario_setup

UNICODE = "héllo wörld — 你好世界 🎉🚀 naïve café ∑∫"


def transcript(prompt, answer, model="scn/echo"):
    return f"## You\n\n{prompt}\n\n## mia · {model}\n\n{answer}"


def tokens(n):
    return "".join("w%05d " % i for i in range(n))


def test_echo_streams_the_answer_into_the_chat_buffer(editor):
    editor.nvim.command("Mia prompt echo hello wörld, how are you?")
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text() == transcript("echo hello wörld, how are you?", "echo hello wörld, how are you?")
    assert editor.lua("return vim.bo[require('mia.chat').buffer()].filetype") == "markdown"
    # the chat is shown in a split next to the original window
    assert editor.lua("return #vim.fn.win_findbuf(require('mia.chat').buffer())") == 1
    assert editor.lua("return #vim.api.nvim_list_wins()") == 2


def test_the_chat_and_prompt_buffers_do_not_load_editorconfig(editor, tmp_path):
    # Neither buffer is a file: naming them must not load Neovim's editorconfig
    # (and vim.fs) on the first prompt. A real file still gets it.
    editor.nvim.command("Mia prompt echo one")
    editor.wait("require('mia.chat').state() == 'done'")
    editor.nvim.command("Mia open")
    editor.wait("vim.bo.filetype == 'mia_prompt'")
    assert editor.lua("return package.loaded.editorconfig == nil")
    (tmp_path / ".editorconfig").write_text("root = true\n[*.txt]\nindent_size = 3\nindent_style = space\n")
    editor.nvim.command(f"wincmd p | edit {tmp_path / 'notes.txt'}")
    assert editor.lua("return package.loaded.editorconfig ~= nil and vim.bo.shiftwidth == 3")


def test_second_prompt_reuses_the_window_and_sends_the_history(editor, server):
    editor.nvim.command("Mia prompt echo one")
    editor.wait("require('mia.chat').state() == 'done'")
    editor.nvim.command("Mia prompt echo two")
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text() == transcript("echo one", "echo one") + "\n\n" + transcript("echo two", "echo two")
    assert editor.lua("return #vim.api.nvim_list_wins()") == 2
    last = [r for r in server.requests() if r["path"] == "/v1/chat/completions"][-1]["body"]
    assert [(m["role"], m["content"]) for m in last["messages"]] == [
        ("system", last["messages"][0]["content"]),
        ("user", "echo one"),
        ("assistant", "echo one"),
        ("user", "echo two"),
    ]
    assert last["stream"] is True and last["model"] == "echo"


def test_20k_token_stream_arrives_byte_for_byte(editor):
    editor.nvim.command("Mia prompt long 20000")
    editor.wait("require('mia.chat').state() == 'done'", timeout_ms=120000)
    assert editor.chat_text() == transcript("long 20000", tokens(20000))


def test_unicode_split_inside_utf8_sequences_is_intact(editor):
    editor.nvim.command("Mia prompt unicode")
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text() == transcript("unicode", UNICODE)


def test_stop_cancels_mid_stream_and_keeps_the_partial_text(editor):
    editor.nvim.command("Mia prompt slow 2000 200")
    editor.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 70")
    editor.nvim.command("Mia stop")
    editor.wait("require('mia.chat').state() == 'cancelled'")
    text = editor.chat_text()
    head = transcript("slow 2000 200", "")
    assert text.startswith(head) and text.endswith("\n\n*[cancelled]*")
    partial = text[len(head):-len("\n\n*[cancelled]*")]
    assert re.fullmatch(r"(w\d{5} )+", partial), partial[:200]
    assert partial == tokens(len(partial) // 7)  # whole tokens, in order, none lost
    assert len(partial) // 7 < 2000
    # nothing arrives after the cancel
    editor.lua("vim.wait(300)")
    assert editor.chat_text() == text


def test_ctrl_c_in_the_chat_stops_the_answer(editor):
    editor.nvim.command("Mia prompt slow 2000 200")
    editor.wait("#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), -2, -1, false)[1] >= 14")
    editor.lua("vim.api.nvim_set_current_win(vim.fn.win_findbuf(require('mia.chat').buffer())[1])")
    editor.nvim.input("<C-c>")
    editor.wait("require('mia.chat').state() == 'cancelled'")
    assert editor.chat_text().endswith("\n\n*[cancelled]*")


def following_chat(ed):
    """After a first answer: the chat window, 8 rows high, current, with
    its cursor on the last line (so it follows what comes)."""
    ed.nvim.command("Mia prompt echo first")
    ed.wait("require('mia.chat').state() == 'done'")
    chat_win = ed.lua("return vim.fn.win_findbuf(require('mia.chat').buffer())[1]")
    ed.lua("vim.api.nvim_set_current_win(...); vim.api.nvim_win_set_height(0, 8)", chat_win)
    ed.nvim.feedkeys("G", "x")
    return chat_win


@pytest.mark.parametrize("from_chat", [True, False], ids=["chat-current", "chat-beside"])
def test_the_chat_follows_the_answer_only_from_its_last_line(editor, from_chat):
    """A chat window whose cursor is on the last line follows the answer
    onto the lines it adds and keeps its end in view, whether or not it is
    the current window; a cursor the user moved up stays where it is."""
    ed = editor
    chat_win = following_chat(ed)
    if not from_chat:
        ed.nvim.feedkeys("\x17p", "x")  # <C-w>p: back to the other window
    ed.nvim.command("Mia prompt slow 300 300")  # one 2 KB line (~27 rows), then the footer
    ed.wait("require('mia.chat').state() == 'done'")
    cursor, last, bottom = ed.lua(
        "return vim.api.nvim_win_call(..., function() return { vim.fn.line('.'), vim.fn.line('$'), vim.fn.line('w$') } end)",
        chat_win)
    assert cursor == last and bottom == last, (cursor, last, bottom)

    ed.lua("vim.api.nvim_set_current_win(...)", chat_win)
    ed.nvim.feedkeys("gg", "x")
    if not from_chat:
        ed.nvim.feedkeys("\x17p", "x")
    ed.nvim.command("Mia prompt echo again")
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.lua("return vim.api.nvim_win_get_cursor(...)[1]", chat_win) == 1


def test_a_fast_stream_is_written_in_frames_and_all_of_it_arrives(editor):
    """Streamed text is written at most about once per frame (~33 ms), not
    once per token: 150 tokens at 300 a second (0.5 s) take a few dozen
    buffer changes at most, and every byte arrives."""
    editor.nvim.command("Mia prompt echo warm")
    editor.wait("require('mia.chat').state() == 'done'")
    editor.lua("""
      _G.changes = 0
      vim.api.nvim_buf_attach(require('mia.chat').buffer(), false, {
        on_bytes = function() changes = changes + 1 end,
      })
    """)
    editor.nvim.command("Mia prompt slow 150 300")
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text().endswith("\n\n" + tokens(150))
    changes = editor.lua("return changes")
    # the prompt and header, ~15 frames of text (a loaded machine makes
    # fewer, later ones), the footer: far fewer than one per token
    assert 3 <= changes <= 50, changes


def test_the_live_figures_climb_beside_the_text_and_all_of_it_arrives_in_order(editor):
    """Three times a second a frame carries the answer's live figures beside
    its text (the core hands them over together, text that came after the
    figures joined to the text before them): the figures under the answer
    climb, and the text arrives whole and in order."""
    editor.nvim.command("Mia prompt echo warm")
    editor.wait("require('mia.chat').state() == 'done'")
    editor.lua("""
      local core = require('mia.core').get()
      local drain, writer = core.drain, require('mia.writer')
      local flush = writer.flush
      local with_figures = false
      _G.seen = {}
      core.drain = function(...)  -- watches, passes everything on
        local events, next_ms, stream, figures = drain(...)
        with_figures = figures ~= nil
        return events, next_ms, stream, figures
      end
      writer.flush = function(...)
        if with_figures then
          seen[#seen + 1] = require('mia.chat').live_text() or ''
        end
        with_figures = false
        return flush(...)
      end
    """)
    editor.nvim.command("Mia prompt slow 60 20")  # 3 s
    editor.wait("require('mia.chat').state() == 'done'")
    assert editor.chat_text().endswith("\n\n" + tokens(60))
    seen = editor.lua("return seen")
    assert len(seen) >= 3, seen  # ~9 in 3 s
    outs = [int(re.search(r"~([\d,]+) out", t)[1].replace(",", "")) for t in seen]
    assert outs == sorted(outs) and outs[-1] > outs[0], seen
    assert editor.lua("return require('mia.chat').live_text()") is None


def test_frames_of_a_long_line_come_further_apart_and_all_of_it_arrives(editor):
    """Each frame redraws the line it grows, and Neovim measures a wrapped
    line whole every time: past 64 KiB, the next frame of a line waits in
    proportion to its length (33 ms per 64 KiB), so a 420 KB line takes a
    few frames a second instead of thirty. Every byte still arrives."""
    editor.nvim.command("Mia prompt echo warm")
    editor.wait("require('mia.chat').state() == 'done'")
    editor.lua("""
      _G.grown = {}
      vim.api.nvim_buf_attach(require('mia.chat').buffer(), false, {
        on_bytes = function(_, _, _, row, col, _, old_rows, _, _, new_rows, new_col)
          if old_rows == 0 and new_rows == 0 then  -- text added to one line
            grown[#grown + 1] = { t = vim.uv.hrtime(), row = row, len = col + new_col }
          end
        end,
      })
    """)
    editor.nvim.command("Mia prompt slow 60000 30000")  # one 420 KB line, ~2 s
    editor.wait("require('mia.chat').state() == 'done'")
    grown = editor.lua("return grown")
    row = max(g["row"] for g in grown)
    assert editor.lua("return vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), ..., ... + 1, true)[1]",
                      row) == tokens(60000)
    line = [g for g in grown if g["row"] == row]
    # Every wait that began with the line past 256 KiB, but the last (the
    # answer's end is drained at once): at least 33 ms per 64 KiB, less the
    # timer's slack (it counts from the start of the loop's turn).
    waits = [((b["t"] - a["t"]) / 1e6, 33 * a["len"] // 65536) for a, b in zip(line[:-2], line[1:-1])
             if a["len"] > 4 * 65536]
    assert waits, line
    assert all(ms >= 0.9 * due - 10 for ms, due in waits), waits


def test_past_a_long_line_the_chat_view_starts_below_it(editor):
    """A chat window that follows the answer, when the answer's lines come
    after a line of more than 64 KiB: the view starts just below that line
    and the cursor is on the last line, as Neovim would scroll it (mia sets
    the view itself there: setting the cursor alone had Neovim measure the
    whole line, 33 ms for 1.4 MB)."""
    ed = editor
    chat_win = following_chat(ed)
    ed.nvim.command("Mia prompt slow 12000 30000")  # one 84 KB line, then the footer
    ed.wait("require('mia.chat').state() == 'done'")
    lines = ed.lua("return vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, true)")
    long_row = max(range(len(lines)), key=lambda i: len(lines[i])) + 1
    assert lines[long_row - 1] == tokens(12000), len(lines[long_row - 1])
    cursor, last, top, bottom = ed.lua(
        "return vim.api.nvim_win_call(..., function() return { vim.fn.line('.'), vim.fn.line('$'), vim.fn.line('w0'), vim.fn.line('w$') } end)",
        chat_win)
    assert cursor == last and bottom == last and top == long_row + 1, (cursor, last, top, bottom, long_row)


def test_http_500_shows_one_clear_error(editor):
    editor.nvim.command("Mia prompt http 500")
    editor.wait("require('mia.chat').state() == 'error'")
    assert editor.chat_text() == transcript(
        "http 500",
        "> **Error** (server_error): scn: server error (HTTP 500: The server had an error while processing "
        "your request.). The provider is having trouble; try again shortly. (after 2 retries)",
    )


def test_unauthorized_names_the_key_variable(editor_factory, server):
    opts = scenario_setup(server)
    opts["providers"]["scn"]["api_key_env"] = "MIA_TEST_KEY"
    ed = editor_factory(env={"MIA_TEST_KEY": "sk-test-do-not-leak-1234567890"}, setup=opts)
    ed.nvim.command("Mia prompt http 401")
    ed.wait("require('mia.chat').state() == 'error'")
    text = ed.chat_text()
    assert text.endswith(
        "> **Error** (auth_failure): scn: authentication failed (HTTP 401: Incorrect API key provided.). "
        "Set MIA_TEST_KEY to a valid API key for scn. The key was read again before giving up: check "
        "$MIA_TEST_KEY (providers.scn.api_key_env), or set providers.scn.api_key_cmd (a command that prints "
        'the key, e.g. { "pass", "show", "scn" }).'
    )
    req = server.requests()[-1]
    assert req["headers"]["authorization"] == "<redacted>"  # the key travelled in the header
    assert "sk-test-do-not-leak" not in text + ed.messages()
    log = (ed.home / "state" / "nvim" / "mia.log").read_text()
    assert "sk-test-do-not-leak" not in log


def test_server_gone_reports_a_network_error(editor_factory, tmp_path):
    port = free_port()
    ed = editor_factory(setup={
        "model": "gone/x",
        "providers": {"gone": {"kind": "openai_compatible", "base_url": f"http://127.0.0.1:{port}/v1"}},
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
    })
    ed.nvim.command("Mia prompt hello")
    ed.wait("require('mia.chat').state() == 'error'")
    assert ed.chat_text() == transcript(
        "hello",
        f"> **Error** (network_error): gone: cannot connect to http://127.0.0.1:{port}/v1 (Connection refused "
        "(os error 111)). Check that the server is running and providers.gone.base_url is right. (after 2 retries)",
        model="gone/x",
    )


def test_reset_mid_stream_keeps_partial_and_reports_network_error(editor):
    editor.nvim.command("Mia prompt reset 50")
    editor.wait("require('mia.chat').state() == 'error'")
    text = editor.chat_text()
    assert text.startswith(transcript("reset 50", tokens(50)) + "\n\n> **Error** (network_error): scn: the connection broke during the answer (")
    assert text.endswith("); the partial answer is kept.")


def test_stream_ending_without_done_is_a_network_error(editor):
    editor.nvim.command("Mia prompt truncate 30")
    editor.wait("require('mia.chat').state() == 'error'")
    assert editor.chat_text() == transcript(
        "truncate 30",
        tokens(30) + "\n\n> **Error** (network_error): scn: the stream ended before the answer was complete; "
        "the partial answer is kept.",
    )


def test_stalled_stream_times_out_and_keeps_partial(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server, timeouts={"stream_idle_ms": 400}))
    ed.nvim.command("Mia prompt stall 10")
    ed.wait("require('mia.chat').state() == 'error'")
    assert ed.chat_text() == transcript(
        "stall 10",
        tokens(10) + "\n\n> **Error** (timeout): scn: the answer stalled for 400 ms (timeouts.stream_idle_ms); "
        "the partial answer is kept.",
    )


def test_malformed_chunk_is_reported_with_the_text_so_far(editor):
    editor.nvim.command("Mia prompt malformed")
    editor.wait("require('mia.chat').state() == 'error'")
    text = editor.chat_text()
    assert text.startswith(transcript("malformed", "ok \n\n> **Error** (server_error): scn: the stream carried a malformed chunk ("))


def test_prompt_while_streaming_is_refused_clearly(editor):
    editor.nvim.command("Mia prompt slow 500 100")
    with pytest.raises(NvimError, match="an answer is still streaming. Stop it with :Mia stop"):
        editor.nvim.command("Mia prompt echo again")
    editor.nvim.command("Mia stop")
    editor.wait("require('mia.chat').state() == 'cancelled'")


def test_range_prompt_includes_the_selected_lines(editor):
    editor.lua("vim.api.nvim_buf_set_lines(0, 0, -1, false, {'local x = 1', 'return x'}); vim.bo.filetype = 'lua'")
    editor.nvim.command("1,2Mia prompt echo Explain this")
    editor.wait("require('mia.chat').state() == 'done'")
    prompt = "echo Explain this\n\n```lua\nlocal x = 1\nreturn x\n```"
    assert editor.chat_text() == transcript(prompt, prompt)


def syntax_names(ed, line_text, *words):
    """The syntax item under the first letter of each of `words` on the chat line `line_text`."""
    return ed.lua("""
        local line_text, words = ...
        local buf = require('mia.chat').buffer()
        return vim.api.nvim_buf_call(buf, function()
          local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
          for lnum, l in ipairs(lines) do
            if l == line_text then
              local out = {}
              for _, w in ipairs(words) do
                local col = l:find(w, 1, true)
                out[#out + 1] = vim.fn.synIDattr(vim.fn.synID(lnum, col, 0), 'name')
              end
              return out
            end
          end
          return 'no line ' .. line_text
        end)
    """, line_text, list(words))


def test_the_chat_is_highlighted_with_the_lean_markdown_syntax(editor):
    text = "echo see **bold** and `x = 1` here, *one* snake_case_name and _two_ a * b"
    editor.nvim.command("Mia prompt " + text)
    editor.wait("require('mia.chat').state() == 'done'")
    buf = "require('mia.chat').buffer()"
    assert editor.lua(f"return {{ vim.bo[{buf}].filetype, vim.bo[{buf}].syntax }}") == ["markdown", "mia_chat"]
    assert syntax_names(editor, "## You", "You") == ["miaChatHeading"]
    assert syntax_names(editor, text, "bold", "x = 1", "here", "one", "case", "two", "a * b") == [
        "miaChatBold", "miaChatCode", "", "miaChatItalic", "", "miaChatItalic", ""]


def test_chat_syntax_markdown_keeps_vims_full_markdown_syntax(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server, chat={"syntax": "markdown"}))
    text = "echo see **bold** here"
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.lua("return vim.bo[require('mia.chat').buffer()].syntax") == "markdown"
    assert syntax_names(ed, "## You", "You")[0].startswith("markdownH")
    assert syntax_names(ed, text, "bold") == ["markdownBold"]


def test_a_chat_syntax_that_is_not_a_syntax_name_is_refused_at_setup(editor_factory, server):
    ed = editor_factory()
    with pytest.raises(NvimError, match=r"`chat.syntax` must be a syntax name"):
        ed.lua("require('mia').setup(...)", scenario_setup(server, chat={"syntax": "x | !rm"}))
