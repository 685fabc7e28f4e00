"""mia's own agent on OpenAI's Responses API, end to end: a real Neovim,
the built-in `openai` provider pointed at the scenario server (its
/v1/responses speaks the API as OpenAI streams it), `openai/gpt-5` (a
reasoning model, so the Responses API is chosen by default)."""

import re

import pytest
from pynvim.api.common import NvimError

KEY = "sk-test-responses-0123456789"
# openai/gpt-5 in data/pricing.json, per million tokens
INPUT, CACHE_READ, OUTPUT = 1.25, 0.125, 10.0


@pytest.fixture
def ed(editor_factory, server, tmp_path):
    opts = {
        "model": "openai/gpt-5",
        "providers": {"openai": {"base_url": server.base_url, "api_key_env": "MIA_TEST_OPENAI_KEY"}},
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
    }
    e = editor_factory(env={"MIA_TEST_OPENAI_KEY": KEY}, setup=opts)
    e.lua("vim.cmd.cd(...)", str(tmp_path))
    return e


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def prompt(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'")


def test_a_reasoning_model_speaks_the_responses_api_statelessly(ed, server):
    prompt(ed, "echo hello from responses")
    assert ed.chat_text().endswith("echo hello from responses")
    sent = posts(server)[-1]
    assert sent["path"] == "/v1/responses"
    assert sent["headers"].get("authorization") == "<redacted>"
    body = sent["body"]
    assert body["model"] == "gpt-5" and body["stream"] is True
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"summary": "auto"}
    assert body["instructions"]  # the system prompt
    assert body["input"][-1] == {"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": "echo hello from responses"}]}
    assert all(t["type"] == "function" and "name" in t for t in body["tools"])
    assert KEY not in ed.messages() and KEY not in ed.chat_text(footers=True)


def test_the_reasoning_summary_shows_dimmed_before_the_answer(ed):
    prompt(ed, "reason 3")
    reasoning = "".join("r%05d " % i for i in range(3))
    assert ed.chat_text().endswith(f"{reasoning}\n\ndone")
    marks = ed.lua("""
      local buf = require('mia.chat').buffer()
      local ns = vim.api.nvim_get_namespaces()['mia_writer']
      local out = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
        table.insert(out, m[4].hl_group)
      end
      return out
    """)
    assert "MiaReasoning" in marks


def test_a_tool_round_trip_sends_the_encrypted_reasoning_back_in_its_place(ed, server):
    ed.lua("""
      require('mia').register_tool({
        name = 'count_errors', description = 'Count errors',
        parameters = { type = 'object', properties = { kind = { type = 'string' } }, required = { 'kind' } },
        execute = function(args) return '3 ' .. args.kind end,
      })
    """)
    prompt(ed, 'tool count_errors {"kind": "errors"}')
    # The scenario server answers 400 to a stateless request whose function
    # call came back without the reasoning item before it.
    assert ed.chat_text().endswith("tool said: 3 errors")
    first, second = posts(server)[-2:]
    n = first["seq"]
    items = second["body"]["input"]
    kinds = [i["type"] for i in items]
    assert kinds[-4:] == ["message", "reasoning", "function_call", "function_call_output"], kinds
    assert items[-3] == {"type": "reasoning", "summary": [], "encrypted_content": f"gAAAA-scn{n}"}
    assert items[-2] == {"type": "function_call", "call_id": f"call_scn{n}_0", "name": "count_errors",
                         "arguments": '{"kind":"errors"}'}
    assert items[-1] == {"type": "function_call_output", "call_id": f"call_scn{n}_0", "output": "3 errors"}
    # The next turn carries the whole conversation, every reasoning item in
    # its place, from the stored session.
    prompt(ed, "echo again")
    items = posts(server)[-1]["body"]["input"]
    sent = [i.get("encrypted_content") for i in items if i["type"] == "reasoning"]
    assert sent == [f"gAAAA-scn{n}", f"gAAAA-scn{second['seq']}"]
    assert ed.chat_text().endswith("echo again")


def test_usage_and_cost_count_cached_and_reasoning_tokens_apart(ed, server):
    prompt(ed, "reason 4")
    done = ed.lua("return require('mia.chat')._last_done()")
    u = done["usage"]
    sent = posts(server)[-1]["body"]
    cached = len(sent["instructions"].split())  # the scenario server's cache: the instructions
    assert u["cache_read_tokens"] == cached > 0
    assert u["reasoning_tokens"] == 4 and u["output_tokens"] == 5  # reasoning + "done"
    expected = (u["input_tokens"] * INPUT + cached * CACHE_READ + 5 * OUTPUT) / 1e6
    assert done["cost"]["known"] is True
    assert done["cost"]["total_usd"] == pytest.approx(expected)
    assert done["cost"]["cache_read_usd"] == pytest.approx(cached * CACHE_READ / 1e6)
    footer = ed.chat_text(footers=True).split("\n")[-1]
    assert re.fullmatch(rf"── gpt-5 · {u['input_tokens']:,} in · 5 out · {cached:,} cached · \$0\.\d+ ──", footer), footer


def test_a_mid_stream_error_keeps_the_partial_answer_and_names_the_cause(ed, server):
    prompt(ed, "failafter 3", state="error")
    text = ed.chat_text()
    assert "w00000 w00001 w00002" in text
    assert "openai: server error (Overloaded). The provider is having trouble; try again shortly." in text
    assert len(posts(server)) == 1, "text was shown: no retry"


def test_a_failure_before_any_output_is_retried(ed, server):
    prompt(ed, "overloaded 1")
    assert ed.chat_text().endswith("ok after 1\n\n> _server error, retried successfully_")
    assert len(posts(server)) == 2


def test_api_chat_keeps_a_reasoning_model_on_chat_completions(editor_factory, server):
    opts = {"model": "openai/gpt-5",
            "providers": {"openai": {"base_url": server.base_url, "api_key_env": "MIA_TEST_OPENAI_KEY",
                                     "api": "chat"}}}
    ed = editor_factory(env={"MIA_TEST_OPENAI_KEY": KEY}, setup=opts)
    prompt(ed, "echo via chat")
    assert posts(server)[-1]["path"] == "/v1/chat/completions"


def test_setup_checks_api(editor_factory):
    ed = editor_factory()
    with pytest.raises(NvimError, match=r'`providers.x.api` must be "chat" or "responses"'):
        ed.lua("require('mia').setup({ providers = { x = { kind = 'openai_compatible', base_url = 'http://h', api = 'completions' } } })")
    with pytest.raises(NvimError, match=r"`providers.x.api` is for kinds openai, azure_openai and openai_compatible, not anthropic"):
        ed.lua("require('mia').setup({ providers = { x = { kind = 'anthropic', api = 'responses' } } })")
    ed.lua("require('mia').setup({ providers = { openai = { api = 'responses' }, az = { kind = 'azure_openai', base_url = 'http://h', api = 'chat' } } })")
