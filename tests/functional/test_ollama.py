"""Ollama's native API end to end: a real Neovim whose provider is of kind
`ollama`, talking to the scenario server's POST /api/chat (NDJSON) and
GET /api/tags, driven like a user with :Mia commands."""

import sqlite3

import pytest

PRICE = {"input": 3.0, "output": 15.0}


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


@pytest.fixture
def root(server):
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture
def ollama(editor_factory, server, data_home, tmp_path, root):
    """A Neovim whose model is `local/echo`, `local` an Ollama at the scenario server."""
    def make(**extra):
        opts = {
            "model": "local/echo",
            "providers": {"local": {"kind": "ollama", "base_url": root}},
            "pricing": {"local/echo": PRICE},
            "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
        }
        opts.update(extra)
        ed = editor_factory(env={"XDG_DATA_HOME": str(data_home)}, setup=opts)
        ed.lua("vim.cmd.cd(...)", str(tmp_path))
        return ed
    return make


def prompt(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'")


def test_a_prompt_streams_from_api_chat_into_the_chat_buffer(ollama, server):
    ed = ollama()
    prompt(ed, "echo hello from a local wörld 你好")
    assert ed.chat_text().endswith("echo hello from a local wörld 你好")
    sent = posts(server)[-1]
    assert sent["path"] == "/api/chat"
    assert sent["body"]["model"] == "echo" and sent["body"]["stream"] is True
    assert sent["body"]["messages"][-1] == {"role": "user", "content": "echo hello from a local wörld 你好"}
    assert "authorization" not in sent["headers"]  # a local Ollama needs no key


def test_thinking_streams_dimmed_before_the_answer(ollama):
    ed = ollama()
    prompt(ed, "reason 3")
    reasoning = "".join("r%05d " % i for i in range(3))
    assert ed.chat_text().endswith(f"## mia · local/echo\n\n{reasoning}\n\ndone")


def test_a_tool_call_runs_and_its_result_goes_back_named(ollama, server):
    ed = ollama()
    ed.lua("""
      require('mia').register_tool({
        name = 'count_errors', description = 'Count errors',
        parameters = { type = 'object', properties = { kind = { type = 'string' } }, required = { 'kind' } },
        execute = function(args) return '3 ' .. args.kind end,
      })
    """)
    prompt(ed, 'tool count_errors {"kind": "errors"}')
    assert ed.chat_text().endswith("tool said: 3 errors")
    first, second = posts(server)[-2:]
    offered = [t["function"]["name"] for t in first["body"]["tools"]]
    assert "count_errors" in offered
    assert all(t["type"] == "function" for t in first["body"]["tools"])
    messages = second["body"]["messages"]
    assert messages[-2]["role"] == "assistant"
    assert messages[-2]["tool_calls"] == [{"function": {"name": "count_errors", "arguments": {"kind": "errors"}}}]
    assert messages[-1] == {"role": "tool", "content": "3 errors", "tool_name": "count_errors"}


def test_two_calls_in_one_answer_get_distinct_ids(ollama, server, tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta\n")
    ed = ollama()
    prompt(ed, "tools2")  # two read_file calls, neither with an id
    tool_messages = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] == "tool"]
    assert [m["tool_name"] for m in tool_messages] == ["read_file", "read_file"]
    assert "alpha" in tool_messages[0]["content"] and "beta" in tool_messages[1]["content"]
    assert ed.chat_text().endswith(f"tool said: {tool_messages[0]['content']} | {tool_messages[1]['content']}")


def test_a_missing_model_names_the_models_from_api_tags(ollama, server):
    ed = ollama()
    prompt(ed, "http 404", state="error")
    text = ed.chat_text()
    assert "> **Error** (model_not_found): local: model `echo` not found" in text, text
    assert '(HTTP 404: model "echo" not found, try pulling it first)' in text, text
    assert "Models of local: echo:latest, mia-scenario:latest, llama3.2:latest, qwen3:8b." in text, text
    assert [r["path"] for r in server.requests()][-1] == "/api/tags"


def test_ollama_counts_are_the_usage_in_the_footer_the_store_and_mia_costs(ollama, server, data_home):
    ed = ollama()
    prompt(ed, "echo one two three")
    sent = posts(server)[-1]["body"]
    prompt_words = sum(len(m["content"].split()) for m in sent["messages"])  # the server's prompt_eval_count
    done = ed.lua("return require('mia.chat')._last_done()")
    assert done["usage"]["input_tokens"] == prompt_words
    assert done["usage"]["output_tokens"] == 4
    assert done["usage"].get("estimated") in (None, False)
    assert done["cost"]["total_usd"] == pytest.approx((prompt_words * 3.0 + 4 * 15.0) / 1e6)
    footer = ed.chat_text(footers=True).split("\n")[-1]
    assert footer.startswith(f"── echo · {prompt_words:,} in · 4 out · $"), footer
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        rows = c.execute("select provider, model, input_tokens, output_tokens from usage").fetchall()
    assert rows == [("local", "echo", prompt_words, 4)]
    ed.nvim.command("messages clear")
    ed.nvim.command("Mia costs provider local")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('Requests:', 1, true) ~= nil")
    assert "Requests: 1" in ed.messages()


def test_without_counts_the_usage_is_estimated(ollama):
    ed = ollama()
    prompt(ed, "nousage and some words")
    done = ed.lua("return require('mia.chat')._last_done()")
    assert done["usage"]["estimated"] is True


def test_an_error_line_in_the_stream_is_retried_then_answered(ollama, server):
    ed = ollama()
    prompt(ed, "overloaded 1")
    assert ed.chat_text().endswith("ok after 1\n\n> _server error, retried successfully_")
    assert len(posts(server)) == 2


def test_a_stream_that_never_says_done_is_an_incomplete_answer(ollama):
    ed = ollama()
    prompt(ed, "truncate 3", state="error")
    text = ed.chat_text()
    assert "w00000 w00001 w00002 " in text
    assert ("> **Error** (network_error): local: the stream ended before the answer was complete; "
            "the partial answer is kept.") in text, text


def test_a_malformed_line_is_one_clear_error(ollama):
    ed = ollama()
    prompt(ed, "malformed", state="error")
    assert "ok \n\n> **Error** (server_error): local: the stream carried a malformed chunk (" in ed.chat_text()


def test_options_reach_the_body_and_send_does_not_stream(ollama, server):
    ed = ollama()
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    ed.lua("""
      _G.sent = nil
      require('mia').send(..., { on_done = function(d) sent = d end, on_error = function(e) sent = e end })
    """, {"model": "local/echo", "messages": [{"role": "user", "content": "echo whole"}],
          "max_tokens": 64, "temperature": 0.25, "stop_sequences": ["END"],
          "response_format": {"name": "point", "schema": schema}})
    ed.wait("sent ~= nil")
    assert ed.lua("return sent.text") == "echo whole"
    body = posts(server)[-1]["body"]
    assert body["stream"] is False
    assert body["options"] == {"temperature": 0.25, "num_predict": 64, "stop": ["END"]}
    assert body["format"] == schema


def test_list_models_reads_api_tags(ollama):
    ed = ollama()
    ed.lua("_G.models = nil; require('mia').list_models('local', function(err, ids) models = ids or err end)")
    ed.wait("models ~= nil")
    assert ed.lua("return models") == ["echo:latest", "mia-scenario:latest", "llama3.2:latest", "qwen3:8b"]


def test_the_builtin_ollama_provider_needs_no_key(editor_factory, server, root):
    # Only the address is overridden (a real one listens on localhost:11434);
    # the built-in's kind and its keyless setup stay.
    # Another provider of the kind, without an address, is at the usual one.
    ed = editor_factory(setup={"model": "ollama/echo",
                               "providers": {"ollama": {"base_url": root}, "second": {"kind": "ollama"}}})
    ed.nvim.command("checkhealth mia")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    assert f"ollama (ollama) {root}: no API key needed" in report, report
    assert "second (ollama) http://localhost:11434: no API key needed" in report, report
    prompt(ed, "echo straight from the built-in")
    assert ed.chat_text().endswith("echo straight from the built-in")
    assert posts(server)[-1]["path"] == "/api/chat"


def test_setup_accepts_the_ollama_kind_before_the_core_starts(editor_factory):
    ed = editor_factory()
    err = ed.lua("local ok, err = pcall(require('mia').setup, { providers = { x = { kind = 'olama' } } }) return err")
    assert "must be one of anthropic, openai, gemini, openai_compatible, azure_openai, ollama" in err, err
    ok = ed.lua("return pcall(require('mia').setup, { providers = { x = { kind = 'ollama', base_url = 'http://h:1' } } })")
    assert ok is True
    # setup() loads the library to check the options, and starts nothing
    assert ed.lua("return require('mia_core').status().runtime_started") is False
