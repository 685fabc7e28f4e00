"""Hostile servers are contained: absurd rate-limit resets and retry-after
values never make mia sleep for weeks, never panic the core, never hold up
another provider. Driven through a real Neovim (the chat and mia.stream)
against the scenario server's window-reset and retry429-raw scenarios."""

from datetime import datetime, timedelta, timezone

import pytest

from conftest import KEYS, provider_config

# provider name in setup() -> the wire format it speaks
NAMES = {"openai": "oa", "anthropic": "an", "gemini": "ge"}


def providers(server):
    return {name: provider_config(fmt, server) for fmt, name in NAMES.items()}


@pytest.fixture
def make_ed(editor_factory, server):
    def make(fmt="openai"):
        opts = {
            "model": f"{NAMES[fmt]}/echo",
            "providers": providers(server),
            # quick backoff; the default cap on server-requested waits (120 s)
            "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
        }
        ed = editor_factory(env=KEYS, setup=opts)
        ed.fmt = fmt
        return ed

    return make


def prompt(ed, text):
    """Sends `text` in the chat as a user would and waits for the answer to end."""
    ed.nvim.command(f"Mia prompt {text}")
    # a guard, not a timing assertion: a 41-day wait would fail it
    ed.wait("vim.tbl_contains({'done', 'error', 'cancelled'}, require('mia.chat').state())")
    return ed.state()


def last_turn(ed):
    return ed.chat_text().rsplit("## mia", 1)[-1]


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def reset_in(fmt, hours):
    """A window-reset value `hours` ahead, in the format's own notation."""
    if fmt == "openai":
        return f"{hours}h"
    at = datetime.now(timezone.utc) + timedelta(hours=hours)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


STREAM = """
local name, model, text = ...
_G[name] = { done = nil, err = nil, waits = {} }
require('mia').stream({ model = model, messages = { { role = 'user', content = text } } }, {
  on_delta = function(d) if d.type == 'retry' then table.insert(_G[name].waits, d) end end,
  on_done = function(d) _G[name].done = d end,
  on_error = function(e) _G[name].err = e end,
})
"""


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_window_resetting_in_1000h_fails_the_next_prompt_at_once(make_ed, server, fmt):
    ed = make_ed(fmt)
    p = NAMES[fmt]
    assert prompt(ed, f"window-reset {reset_in(fmt, 1000)}") == "done"
    assert last_turn(ed).strip().endswith("ok")

    assert prompt(ed, "echo are you there") == "error"
    turn = last_turn(ed)
    assert f"> **Error** (rate_limit): {p}: the rate-limit window is used up and resets in 41 days (at 20" in turn
    assert "UTC); retry.max_wait_ms allows waiting only 2 min (120000 ms), so the request was not sent." in turn
    assert "Wait until then, raise retry.max_wait_ms in setup(), or switch to another model." in turn
    assert len(posts(server)) == 1  # the blocked prompt never reached the server
    assert ed.lua("return require('mia.chat').status_text()") is None  # no pending "retrying in …"


@pytest.mark.parametrize("fmt,value", [("openai", "99999999999999999999h"), ("anthropic", "9999-12-31T23:59:59Z")])
def test_an_absurd_window_reset_is_the_same_clear_error_not_an_internal_one(make_ed, server, fmt, value):
    ed = make_ed(fmt)
    assert prompt(ed, f"window-reset {value}") == "done"
    assert prompt(ed, "echo still blocked?") == "error"
    turn = last_turn(ed)
    assert f"> **Error** (rate_limit): {NAMES[fmt]}: the rate-limit window is used up and resets in more than 10 years" in turn
    assert "internal" not in (ed.chat_text() + ed.messages()).lower()
    assert len(posts(server)) == 1


@pytest.mark.parametrize("fmt,value", [
    ("openai", "soon"), ("openai", "-5s"), ("openai", "NaN"), ("openai", "1e308"), ("openai", "6m0.5s!"),
    ("anthropic", "soon"), ("anthropic", "2027-13-45T99:00:00Z"),
])
def test_a_garbage_window_reset_is_ignored(make_ed, server, fmt, value):
    ed = make_ed(fmt)
    assert prompt(ed, f"window-reset {value}") == "done"
    ed.lua(STREAM, "r", f"{NAMES[fmt]}/echo", "echo not held back")
    ed.wait("r.done ~= nil or r.err ~= nil")
    assert ed.lua("return r.err") is None
    assert ed.lua("return r.done.text") == "echo not held back"
    assert ed.lua("return #r.waits") == 0  # no "waiting for the window" at all
    assert len(posts(server)) == 2


@pytest.mark.parametrize("fmt,value", [
    ("openai", "99999999999999999999"), ("openai", "3600000"), ("openai", "1e308"),
    ("anthropic", "99999999999999999999"), ("anthropic", "3600000"),
    ("gemini", "1e400s"), ("gemini", "3600000s"),
])
def test_a_retry_after_beyond_the_cap_is_not_retried_or_slept_on(make_ed, server, fmt, value):
    ed = make_ed(fmt)
    assert prompt(ed, f"retry429-raw 1 {value}") == "error"
    turn = last_turn(ed)
    when = "in more than 10 years" if value in ("99999999999999999999", "1e308", "1e400s") else "in 41 days (at 20"
    assert f"> **Error** (rate_limit): {NAMES[fmt]}: rate limited (HTTP 429" in turn
    assert f"The server says to retry {when}" in turn
    assert "so mia does not retry. Wait until then, raise retry.max_wait_ms in setup(), or switch to another model." in turn
    assert "Wait a moment" not in turn
    assert "internal" not in (ed.chat_text() + ed.messages()).lower()
    assert len(posts(server)) == 1


@pytest.mark.parametrize("fmt,value", [
    ("openai", "-5"), ("openai", "NaN"), ("openai", "garbage"),
    ("anthropic", "inf"), ("gemini", "-3s"), ("gemini", "NaNs"),
])
def test_an_unreadable_retry_after_falls_back_to_backoff(make_ed, server, fmt, value):
    ed = make_ed(fmt)
    assert prompt(ed, f"retry429-raw 1 {value}") == "done"
    assert last_turn(ed).strip().endswith("ok after 1\n\n> _rate limited, retried successfully_")
    assert len(posts(server)) == 2


def test_a_blocked_provider_does_not_block_another(make_ed, server):
    ed = make_ed("openai")
    assert prompt(ed, "window-reset 1000h") == "done"
    assert prompt(ed, "echo blocked") == "error"
    ed.lua("require('mia').setup(vim.tbl_extend('force', require('mia.config').get(), { model = 'an/echo' }))")
    assert prompt(ed, "echo from the other provider") == "done"
    assert last_turn(ed).strip().endswith("echo from the other provider")
    assert len(posts(server)) == 2



def test_a_provider_waiting_for_its_window_does_not_hold_up_a_concurrent_request_to_another(make_ed, server):
    ed = make_ed("openai")
    assert prompt(ed, "window-reset 60s") == "done"  # within the cap: requests to oa wait
    ed.lua(STREAM, "a", "oa/echo", "echo from a")
    ed.wait("#a.waits == 1")
    assert ed.lua("return a.waits[1].class") == "rate_limit"
    ed.lua(STREAM, "b", "an/echo", "echo from b")
    ed.wait("b.done ~= nil or b.err ~= nil")
    assert ed.lua("return b.err") is None
    assert ed.lua("return b.done.text") == "echo from b"
    assert ed.lua("return a.done == nil and a.err == nil")  # oa is still waiting for its window
    assert [r["path"] for r in posts(server)] == ["/v1/chat/completions", "/v1/messages"]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "gemini"])
def test_a_stream_in_a_format_mia_cannot_read_is_named_never_read_as_sse(make_ed, server, fmt):
    ed = make_ed(fmt)
    # The body is SSE, but the server says it is a web page: believe the label, refuse it.
    assert prompt(ed, "ctype text/html;charset=utf-8") == "error"
    assert "ok" not in last_turn(ed).split("\n")[0]
    said = last_turn(ed)
    assert "the answer came as `text/html;charset=utf-8`, a stream format mia cannot read" in said, said
    assert f"providers.{NAMES[fmt]}.base_url" in said, said
    assert len(posts(server)) == 1  # not retried: the same server says the same
    err = ed.lua(STREAM + " vim.wait(10000, function() return _G.s.err ~= nil end) return _G.s.err",
                 "s", f"{NAMES[fmt]}/echo", "ctype application/octet-stream")
    assert err["class"] == "unsupported_stream_format", err
