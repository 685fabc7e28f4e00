"""The wire formats end to end (OpenAI-compatible, Anthropic, Gemini, Ollama):
streaming, reasoning, tool calls, retries, rate limits and every error class,
through a real Neovim against the scenario server speaking each format."""

import re

import pytest

from conftest import KEYS, provider_config, scenario_setup

FORMATS = ["openai", "anthropic", "gemini", "ollama"]



@pytest.fixture(params=FORMATS)
def fmt(request):
    return request.param


@pytest.fixture
def ed(editor_factory, server, fmt):
    opts = {
        "model": f"{fmt}x/echo",
        "providers": {f"{f}x": provider_config(f, server) for f in FORMATS},
        "retry": {"initial_delay_ms": 20, "multiplier": 2, "jitter": False, "max_retries": 3},
        "timeouts": {"stream_idle_ms": 1500},
    }
    e = editor_factory(env=KEYS, setup=opts)
    e.fmt = fmt
    e.model = f"{fmt}x/echo"
    return e


RUN = """
_G.run = { deltas = {}, done = nil, err = nil, order = {} }
local req = ...
require('mia').stream(req, {
  on_delta = function(d) table.insert(run.deltas, d); table.insert(run.order, d.type) end,
  on_done = function(d) run.done = d; table.insert(run.order, 'done') end,
  on_error = function(e) run.err = e; table.insert(run.order, 'error') end,
})
"""


def run(ed, prompt, **extra):
    req = {"model": ed.model, "messages": [{"role": "user", "content": prompt}]}
    req.update(extra)
    ed.lua(RUN, req)
    ed.wait("run.done ~= nil or run.err ~= nil")
    return ed.lua("return run")


def text_of(result):
    return "".join(d["text"] for d in result["deltas"] if d["type"] == "text")


def chat_requests(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def test_echo_streams_in_every_format(ed, server):
    r = run(ed, "echo hello wörld 你好")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "echo hello wörld 你好"
    assert r["done"]["text"] == "echo hello wörld 你好"
    assert r["done"]["stop_reason"] == "end_turn"
    assert r["done"]["usage"]["output_tokens"] > 0 and r["done"]["usage"]["input_tokens"] > 0


def test_random_chunk_splitting_changes_nothing(ed):
    r = run(ed, "split echo naïve 🎉 — split everywhere")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "split echo naïve 🎉 — split everywhere"


def test_credentials_travel_only_in_headers(ed, server):
    run(ed, "echo hi")
    req = chat_requests(server)[-1]
    assert not req.get("key_in_url")
    header = {"openai": None, "anthropic": "x-api-key", "gemini": "x-goog-api-key", "ollama": None}[ed.fmt]
    if header:
        assert req["headers"][header] == "<redacted>"
    if ed.fmt == "ollama":  # keyless: no credential at all
        assert "authorization" not in req["headers"] and req["path"] == "/api/chat"
    if ed.fmt == "gemini":
        assert "alt=sse" in req["query"]
        assert req["path"].split("?")[0].endswith("/models/echo:streamGenerateContent")
    if ed.fmt == "anthropic":
        assert req["headers"]["anthropic-version"] == "2023-06-01"


def test_system_prompt_goes_where_each_provider_wants_it(ed, server):
    run(ed, "echo hi", system="be brief")
    body = chat_requests(server)[-1]["body"]
    if ed.fmt in ("openai", "ollama"):
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
    elif ed.fmt == "anthropic":
        assert body["system"] == "be brief" and body["messages"][0]["role"] == "user"
    else:
        assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}


def test_reasoning_is_shown_dimmed_before_the_answer(ed):
    ed.lua("require('mia').setup(vim.tbl_extend('force', require('mia.config').get(), { model = ... }))", ed.model)
    ed.nvim.command("Mia prompt reason 5")
    ed.wait("require('mia.chat').state() ~= 'streaming'")
    reasoning = "".join("r%05d " % i for i in range(5))
    assert ed.chat_text().endswith(f"## mia · {ed.model}\n\n{reasoning}\n\ndone")
    marks = ed.lua("""
      local buf = require('mia.chat').buffer()
      local ns = vim.api.nvim_get_namespaces()['mia_writer']
      local out = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
        table.insert(out, m[4].hl_group)
      end
      return out
    """)
    assert marks and set(marks) == {"MiaReasoning", "MiaCost"}  # the footer is dimmed too
    assert marks[-1] == "MiaCost" and marks.count("MiaCost") == 1


def test_tool_call_and_its_result_round_trip(ed, server):
    tools = [{"name": "read_file", "description": "Read a file",
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
    r = run(ed, 'tool read_file {"path": "src/main.rs", "lines": [1, 2]}', tools=tools)
    assert r.get("err") is None, r.get("err")
    calls = r["done"]["tool_calls"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("read_file", {"path": "src/main.rs", "lines": [1, 2]})]
    assert r["done"]["stop_reason"] == "tool_use"
    starts = [d for d in r["deltas"] if d["type"] == "tool_call_start"]
    assert starts and starts[0]["name"] == "read_file"
    # send the result back in the internal format; each wire format carries it
    history = [
        {"role": "user", "content": 'tool read_file {"path": "src/main.rs", "lines": [1, 2]}'},
        r["done"]["message"],
        {"role": "tool", "parts": [{"type": "tool_result", "tool_call_id": calls[0]["id"], "content": "fn main() {}"}]},
    ]
    ed.lua(RUN, {"model": ed.model, "messages": history, "tools": tools})
    ed.wait("run.done ~= nil or run.err ~= nil")
    r2 = ed.lua("return run")
    assert r2.get("err") is None, r2.get("err")
    expected = '{"content": "fn main() {}"}' if ed.fmt == "gemini" else "fn main() {}"
    assert text_of(r2).startswith("tool said: ")
    assert expected.replace(" ", "") in text_of(r2).replace(" ", "")


def test_two_tool_calls_in_one_answer(ed):
    r = run(ed, "tools2")
    assert r.get("err") is None, r.get("err")
    assert [(c["name"], c["arguments"]) for c in r["done"]["tool_calls"]] == [
        ("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
    ids = [c["id"] for c in r["done"]["tool_calls"]]
    assert len(set(ids)) == 2


def test_429_waits_for_retry_after_then_succeeds(ed, server):
    r = run(ed, "retry429 2 0.3")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "ok after 2"
    assert r["done"]["retries"] == 2
    retries = [d for d in r["deltas"] if d["type"] == "retry"]
    assert [(d["attempt"], d["class"], d["delay_ms"]) for d in retries] == [(1, "rate_limit", 300), (2, "rate_limit", 300)]
    assert r["order"][:2] == ["retry", "retry"] and r["order"][-1] == "done"
    assert len(chat_requests(server)) == 3


def test_5xx_is_retried_with_exponential_backoff(ed, server):
    r = run(ed, "fail5xx 2 502")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "ok after 2"
    retries = [d for d in r["deltas"] if d["type"] == "retry"]
    assert [(d["attempt"], d["class"], d["delay_ms"]) for d in retries] == [(1, "server_error", 20), (2, "server_error", 40)]
    assert len(chat_requests(server)) == 3


def test_x_should_retry_false_is_honoured(ed, server):
    r = run(ed, "noretry 1")
    assert r["err"]["class"] == "server_error" and r["err"]["status"] == 503
    assert len(chat_requests(server)) == 1


def test_overloaded_error_after_200_is_retried(ed, server):
    r = run(ed, "overloaded 1")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "ok after 1"
    # Anthropic's overloaded_error is a class of its own, retried with backoff.
    want = "overloaded" if ed.fmt == "anthropic" else "server_error"
    assert [d["class"] for d in r["deltas"] if d["type"] == "retry"] == [want]


@pytest.mark.parametrize("scenario, what", [("fail5xx 1 502", "server error"),
                                            ("overloaded 1", "provider overloaded")])
def test_the_chat_counts_retries_against_their_maximum_and_says_once_that_one_worked(
        editor_factory, server, scenario, what):
    ed = retry_editor(editor_factory, server, "anthropic", {"initial_delay_ms": 1500, "jitter": False})
    ed.nvim.command("Mia prompt " + scenario)
    ed.wait("require('mia.chat').status_text() ~= nil")
    status = ed.lua("return require('mia.chat').status_text()")
    assert re.fullmatch(f"⏳ {what}, retrying in [12] s, 1/3 — :Mia stop cancels", status), status
    ed.wait("require('mia.chat').state() == 'done'")
    text = ed.chat_text()
    assert "ok after 1" in text
    assert text.count(f"{what}, retried successfully") == 1, text


def test_a_coded_content_filter_400_is_a_content_filter_error(ed, server):
    """OpenAI and Azure say it in error.code, not in the message."""
    if ed.fmt != "openai":
        pytest.skip("the code is OpenAI's (and Azure's) error shape")
    r = run(ed, "filtered400")
    assert r["err"]["class"] == "content_filter", r["err"]
    assert len(chat_requests(server)) == 1


def test_retries_give_up_after_max_retries(ed, server):
    r = run(ed, "fail5xx 9 500")
    assert r["err"]["class"] == "server_error"
    assert r["err"]["message"].endswith("(after 3 retries)")
    assert len(chat_requests(server)) == 4


def retry_editor(editor_factory, server, fmt, retry, timeouts=None):
    opts = {"model": f"{fmt}x/echo", "providers": {f"{fmt}x": provider_config(fmt, server)}, "retry": retry}
    if timeouts:
        opts["timeouts"] = timeouts
    e = editor_factory(env=KEYS, setup=opts)
    e.model = f"{fmt}x/echo"
    return e


def test_a_timed_out_request_is_retried_with_a_longer_limit(editor_factory, server, fmt):
    # Headers come after 400 ms; the limit is 300 ms, then 450 ms on the retry.
    ed = retry_editor(editor_factory, server, fmt, {"initial_delay_ms": 10, "jitter": False, "max_retries": 2},
                      {"request_ms": 300})
    r = run(ed, "lateheaders 400")
    assert r.get("err") is None, r.get("err")
    assert text_of(r) == "ok" and r["done"]["retries"] == 1
    assert [d["class"] for d in r["deltas"] if d["type"] == "retry"] == ["timeout"]
    assert len(chat_requests(server)) == 2


def test_retry_on_leaves_out_the_classes_not_named(editor_factory, server, fmt):
    ed = retry_editor(editor_factory, server, fmt,
                      {"initial_delay_ms": 10, "jitter": 0.5, "max_retries": 2, "retry_on": ["rate_limit"]},
                      {"request_ms": 300})
    r = run(ed, "lateheaders 400")
    assert r["err"]["class"] == "timeout" and len(chat_requests(server)) == 1, r["err"]
    r = run(ed, "retry429 1 0.05")
    assert r.get("err") is None and text_of(r) == "ok after 1", r.get("err")


@pytest.mark.parametrize("retry, says", [
    ({"retry_on": ["invalid_request"]}, "`retry.retry_on[1]` must be one of rate_limit, server_error, overloaded, network_error, timeout"),
    ({"jitter": 2}, "`retry.jitter` must be true, false or a fraction from 0 to 1"),
    ({"max_retry": 2}, "`retry.max_retry` is not a retry option"),
])
def test_setup_refuses_a_bad_retry_policy(editor_factory, retry, says):
    ed = editor_factory()
    err = ed.lua("local ok, err = pcall(require('mia').setup, { retry = ... }) return err", retry)
    assert says in err, err


BURST = """
local model, workers, each = ...
_G.burst = { done = 0, failed = {} }
local function next_request(left)
  if left == 0 then return end
  require('mia').stream({ model = model, messages = { { role = 'user', content = 'window 8 3 1000' } } }, {
    on_done = function() burst.done = burst.done + 1; next_request(left - 1) end,
    on_error = function(e) table.insert(burst.failed, e.message); next_request(left - 1) end,
  })
end
for _ = 1, workers do next_request(each) end
"""


def burst_429s(editor_factory, server, fmt, pacing):
    """Six workers send 24 requests against a window of 8 per 3 s, answers taking 1 s: how many got a 429.

    Without pacing, the 429s are the requests sent while the one that used the
    window up is still in flight. Answers of 1 s keep several in flight even
    when a loaded machine spreads the workers out (with 300 ms answers, a
    2-core machine under a build once saw only 2 429s in a whole burst)."""
    ed = retry_editor(editor_factory, server, fmt, {"pacing": pacing, "max_retries": 6, "initial_delay_ms": 10})
    before = len(chat_requests(server))
    ed.lua(BURST, ed.model, 6, 4)
    ed.wait("burst.done + #burst.failed == 24", 60000)
    assert ed.lua("return burst.failed") == []
    return len(chat_requests(server)) - before - 24


def test_a_burst_is_spread_over_the_window_instead_of_running_into_429s(editor_factory, server, fmt):
    paced = burst_429s(editor_factory, server, fmt, True)
    unpaced = burst_429s(editor_factory, server, fmt, False)
    # a loaded machine can shift the client's view of the window by a request
    assert paced <= 2 and unpaced >= 3 and unpaced > paced, (paced, unpaced)


def test_health_check_reports_connection_latency_models_and_the_window(editor_factory, server, fmt):
    ed = retry_editor(editor_factory, server, fmt, {})
    run(ed, "window 8 30")
    h = ed.lua("_G.h = nil require('mia').health_check(..., function(err, r) _G.h = { err = err, r = r } end)"
               " vim.wait(10000, function() return _G.h ~= nil end) return _G.h", f"{fmt}x")
    r = h["r"]
    assert r["connected"] is True and r["models"] > 0 and r["latency_ms"] >= 0, h
    assert r["rate_limit"]["limit"] == 8 and r["rate_limit"]["remaining"] == 7, r
    assert 0 < r["rate_limit"]["reset_ms"] <= 30000, r


SEQUENTIAL = """
local model, n = ...
_G.seq_done = 0
local function one()
  require('mia').stream({ model = model, messages = { { role = 'user', content = 'echo hi' } } }, {
    -- the next request a moment later, as a user's would be: the last
    -- answer's connection is back in the pool by then
    on_done = function() seq_done = seq_done + 1; if seq_done < n then vim.defer_fn(one, 30) end end,
    on_error = function(e) error(e.message) end,
  })
end
one()
"""


@pytest.mark.parametrize("pool, want", [({}, "one"), ({"pool_max_idle_per_host": 0}, "each")])
def test_one_connection_serves_request_after_request_unless_the_pool_is_off(editor_factory, server, fmt, pool, want):
    opts = {"model": f"{fmt}x/echo", "providers": {f"{fmt}x": provider_config(fmt, server)}, "http": pool}
    ed = editor_factory(env=KEYS, setup=opts)
    ed.lua(SEQUENTIAL, f"{fmt}x/echo", 20)
    ed.wait("seq_done == 20")
    conns = [r["conn"] for r in chat_requests(server)]
    assert len(conns) == 20
    if want == "one":
        # One connection serves them; a request that starts while the last
        # answer's connection is being handed back may open a second.
        assert max(conns.count(c) for c in conns) >= 18 and len(set(conns)) <= 2, conns
    else:
        assert len(set(conns)) == 20, conns


def test_setup_refuses_an_unknown_http_option(editor_factory):
    ed = editor_factory()
    err = ed.lua("local ok, err = pcall(require('mia').setup, { http = { pool_size = 4 } }) return err")
    assert "`http.pool_size` is not an HTTP option" in err, err


@pytest.fixture
def black_hole():
    """A port that never completes a connection: a listener whose queue is full."""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fill = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(c)
    yield port
    for c in fill:
        c.close()
    srv.close()


def test_connect_and_request_limits_are_separate_and_each_is_named(editor_factory, server, black_hole):
    # Nothing answers the handshake: connect_ms ends it, naming that limit.
    provider = provider_config("openai", server)
    provider["base_url"] = f"http://127.0.0.1:{black_hole}/v1"
    ed = editor_factory(env=KEYS, setup={"model": "hole/echo", "providers": {"hole": provider},
                                         "retry": {"max_retries": 0}, "timeouts": {"connect_ms": 300}})
    ed.model = "hole/echo"
    r = run(ed, "echo hi")
    assert r["err"]["class"] == "timeout", r["err"]
    assert "no connection to" in r["err"]["message"] and "within 300 ms (timeouts.connect_ms)" in r["err"]["message"]
    # Connected, but no headers come: request_ms ends it, naming that limit.
    ed = retry_editor(editor_factory, server, "openai", {"max_retries": 0}, {"request_ms": 300, "connect_ms": 5000})
    r = run(ed, "lateheaders 2000")
    assert r["err"]["class"] == "timeout", r["err"]
    assert "no response within 300 ms (timeouts.request_ms)" in r["err"]["message"], r["err"]


def test_stop_sequences_and_a_response_schema_reach_each_wire_format(ed, server):
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": False}
    r = run(ed, "echo hi", stop_sequences=["END"], response_format={"name": "point", "schema": schema})
    assert r.get("err") is None, r.get("err")
    body = chat_requests(server)[-1]["body"]
    if ed.fmt == "openai":
        assert body["stop"] == ["END"]
        assert body["response_format"] == {"type": "json_schema",
                                           "json_schema": {"name": "point", "schema": schema, "strict": True}}
    elif ed.fmt == "anthropic":
        assert body["stop_sequences"] == ["END"]
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    elif ed.fmt == "ollama":
        assert body["options"]["stop"] == ["END"]
        assert body["format"] == schema
    else:
        config = body["generationConfig"]
        assert config["stopSequences"] == ["END"]
        assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == schema


def test_auth_failure_names_the_variable(ed):
    r = run(ed, "http 401")
    assert r["err"]["class"] == "auth_failure"
    var = {"openai": None, "anthropic": "MIA_TEST_ANTHROPIC_KEY", "gemini": "MIA_TEST_GEMINI_KEY", "ollama": None}[ed.fmt]
    if var:
        assert f"Set {var} to a valid API key for {ed.fmt}x." in r["err"]["message"]
    assert "secret" not in r["err"]["message"]


def test_model_not_found_lists_the_models_that_exist(ed):
    r = run(ed, "http 404")
    assert r["err"]["class"] == "model_not_found"
    assert f"Models of {ed.fmt}x: " in r["err"]["message"]
    assert "echo" in r["err"]["message"].split("Models of")[1]


def test_context_overflow_is_named(ed):
    r = run(ed, "context")
    assert r["err"]["class"] == "context_overflow"
    assert r["err"]["retryable"] is False


def test_content_filter_stops_with_that_reason(ed):
    if ed.fmt == "ollama":
        pytest.skip("Ollama has no content filter")
    r = run(ed, "filtered")
    if r.get("err"):
        assert r["err"]["class"] == "content_filter"
    else:
        assert r["done"]["stop_reason"] == "content_filter"


@pytest.mark.parametrize("scenario,cls", [("reset 5", "network_error"), ("truncate 5", "network_error"), ("stall 5", "timeout")])
def test_broken_streams_keep_partial_text_and_are_not_retried(ed, server, scenario, cls):
    r = run(ed, scenario)
    assert r["err"]["class"] == cls
    assert text_of(r) == "".join("w%05d " % i for i in range(5))
    assert len(chat_requests(server)) == 1  # never a silent duplicate


def test_malformed_chunk_is_a_clear_error(ed):
    r = run(ed, "malformed")
    assert r["err"]["class"] == "server_error"
    assert "malformed chunk" in r["err"]["message"]
    assert text_of(r) == "ok "


def test_server_without_usage_gets_an_estimate(ed):
    r = run(ed, "nousage and some words")
    assert r.get("err") is None, r.get("err")
    if ed.fmt != "anthropic":  # Anthropic always sends usage
        assert r["done"]["usage"]["estimated"] is True
        assert r["done"]["usage"]["output_tokens"] == len("nousage and some words") // 4 + 1


def test_exhausted_window_makes_the_next_request_wait(ed, server):
    if ed.fmt in ("gemini", "ollama"):
        pytest.skip(f"{ed.fmt} announces no rate-limit window in headers")
    first = run(ed, "ratelimited-window 1")
    assert first.get("err") is None, first.get("err")
    second = run(ed, "echo after the window")
    waits = [d for d in second["deltas"] if d["type"] == "retry"]
    assert len(waits) == 1 and waits[0]["attempt"] == 0 and waits[0]["class"] == "rate_limit"
    # Anthropic's reset is an RFC 3339 time with whole seconds: up to 2 s away
    assert 0 < waits[0]["delay_ms"] <= 2000
    assert second["order"][0] == "retry" and text_of(second) == "echo after the window"


def test_non_streaming_send(ed):
    ed.lua("""
      _G.sent = nil
      require('mia').send({ model = ..., messages = { { role = 'user', content = 'echo whole answer' } } },
        { on_done = function(d) sent = d end, on_error = function(e) sent = e end })
    """, ed.model)
    ed.wait("sent ~= nil")
    assert ed.lua("return sent.text") == "echo whole answer"


def test_list_models(ed):
    ed.lua("_G.models = nil; require('mia').list_models(..., function(err, ids) models = ids or err end)", f"{ed.fmt}x")
    ed.wait("models ~= nil")
    ids = ed.lua("return models")
    # Ollama names its models with their tag, as `ollama list` shows them.
    assert isinstance(ids, list) and ("echo:latest" if ed.fmt == "ollama" else "echo") in ids


def test_only_used_providers_build_a_client(ed):
    run(ed, "echo one")
    status = ed.lua("return require('mia_core').status()")
    assert len(status["providers"]) >= 7  # 4 built-in + 3 configured
    assert status["clients"] == 1


def test_transform_hooks_change_the_wire_body_and_the_answer(ed, server):
    ed.lua("""
      local mia = require('mia')
      mia.register_transform_hook({ name = 'seed', phase = 'pre_request', fn = function(req, info)
        req.extra_body = { seed = 7, mia_info = info.provider .. ':' .. info.kind }
        return req
      end })
      mia.register_transform_hook({ name = 'shout', phase = 'post_response', fn = function(done)
        done.text = done.text:upper(); return done
      end })
    """)
    r = run(ed, "echo quiet")
    assert r["done"]["text"] == "ECHO QUIET"
    body = chat_requests(server)[-1]["body"]
    kind = {"openai": "openai_compatible", "anthropic": "anthropic", "gemini": "gemini", "ollama": "ollama"}[ed.fmt]
    assert body["seed"] == 7 and body["mia_info"] == f"{ed.fmt}x:{kind}"


def test_chat_shows_a_live_retry_status_that_stop_cancels(ed, server):
    ed.lua("require('mia').setup(vim.tbl_extend('force', require('mia.config').get(), { model = ... }))", ed.model)
    ed.nvim.command("Mia prompt retry429 1 5")
    ed.wait("require('mia.chat').status_text() ~= nil")
    assert ed.lua("return require('mia.chat').status_text()") == "⏳ rate limited, retrying in 5 s, 1/3 — :Mia stop cancels"
    ed.nvim.command("Mia stop")
    ed.wait("require('mia.chat').state() == 'cancelled'")
    assert ed.lua("return require('mia.chat').status_text()") is None
    assert ed.chat_text().endswith("*[cancelled]*")
    assert len(chat_requests(server)) == 1


def test_switching_provider_keeps_the_conversation(editor_factory, server):
    opts = {
        "model": "openaix/echo",
        "providers": {f"{f}x": provider_config(f, server) for f in FORMATS},
    }
    ed = editor_factory(env=KEYS, setup=opts)
    ed.nvim.command("Mia prompt echo first turn")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.lua("require('mia').setup(vim.tbl_extend('force', require('mia.config').get(), { model = 'anthropicx/echo' }))")
    ed.nvim.command("Mia prompt echo second turn")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.lua("require('mia').setup(vim.tbl_extend('force', require('mia.config').get(), { model = 'geminix/echo' }))")
    ed.nvim.command("Mia prompt echo third turn")
    ed.wait("require('mia.chat').state() == 'done'")
    reqs = chat_requests(server)
    anthropic_body, gemini_body = reqs[1]["body"], reqs[2]["body"]
    assert [m["role"] for m in anthropic_body["messages"]] == ["user", "assistant", "user"]
    assert "echo first turn" in str(anthropic_body["messages"][1]["content"])
    assert [c["role"] for c in gemini_body["contents"]] == ["user", "model", "user", "model", "user"]
    assert ed.chat_text().endswith("## mia · geminix/echo\n\necho third turn")


def test_anthropic_prompt_caching_marks_system_and_last_user_turn(editor_factory, server):
    cfg = provider_config("anthropic", server)
    cfg["prompt_caching"] = True
    ed = editor_factory(env=KEYS, setup={"model": "anthropicx/echo", "providers": {"anthropicx": cfg}})
    ed.lua(RUN, {"model": "anthropicx/echo", "system": "long system prompt",
                 "messages": [{"role": "user", "content": "echo cached"}]})
    ed.wait("run.done ~= nil or run.err ~= nil")
    body = chat_requests(server)[-1]["body"]
    assert body["system"] == [{"type": "text", "text": "long system prompt", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_checkhealth_online_asks_each_provider(editor_factory, server):
    opts = {"model": "openaix/echo", "providers": {f"{f}x": provider_config(f, server) for f in FORMATS}}
    opts["providers"]["brokenx"] = {"kind": "anthropic", "base_url": f"http://127.0.0.1:{server.port}/nope",
                                    "api_key_env": "MIA_TEST_ANTHROPIC_KEY"}
    ed = editor_factory(env=KEYS, setup=opts)
    ed.nvim.command("Mia health online")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    for f in FORMATS:
        assert re.search(f"{f}x answers in \\d+ ms: \\d+ models", report), report
    assert "brokenx: " in report and "answers" not in report.split("brokenx: ")[1].split("\n")[0], report
    assert "secret" not in report
