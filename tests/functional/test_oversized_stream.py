"""A server streaming one enormous line: the answer ends with one clear error
naming the limit and how to raise it, and Neovim's memory grows by about the
limit, not by the line (`limits.max_event_bytes`, default 8 MiB)."""

import re

import pytest
from pynvim.api.common import NvimError

from conftest import KEYS, provider_config

MIB = 1 << 20
DEFAULT_CAP = 8 * MIB
LINE_MB = 64



def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def reset_peak(pid):
    """Resets VmHWM to the current RSS (Linux: `5` > clear_refs); False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def prompt_and_measure(ed, prompt):
    """Runs `prompt` in the chat; the growth of the nvim process's peak RSS, in bytes."""
    # Warm up: the native library, its runtime and the chat are loaded first,
    # so the measurement sees only the answer.
    ed.nvim.command("Mia prompt echo warm up")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.lua("collectgarbage('collect')")
    before = status_kib(ed.pid, "VmRSS")
    if not reset_peak(ed.pid):
        before = status_kib(ed.pid, "VmHWM")
    ed.nvim.command("Mia prompt " + prompt)
    ed.wait("require('mia.chat').state() ~= 'streaming'", 120000)
    return (status_kib(ed.pid, "VmHWM") - before) * 1024


def error_line(ed):
    text = ed.chat_text()
    errors = re.findall(r"> \*\*Error\*\* \(([a-z_]+)\): (.*)", text)
    assert errors, text
    return errors[-1]


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "gemini"])
def test_a_64_mb_sse_line_is_refused_at_the_default_limit_with_bounded_memory(editor_factory, server, fmt):
    ed = editor_factory(env=KEYS, setup={"model": f"{fmt}x/echo", "providers": {f"{fmt}x": provider_config(fmt, server)}})
    growth = prompt_and_measure(ed, f"hugeline {LINE_MB}")
    assert ed.state() == "error"
    cls, message = error_line(ed)
    assert cls == "server_error"
    assert message == (
        f"{fmt}x: the provider sent a line over 8 MiB (limits.max_event_bytes = 8388608); mia stopped reading "
        "the answer (the partial answer is kept). If this provider really sends events that large, raise the "
        "limit, e.g. setup({ limits = { max_event_bytes = 33554432 } })."
    )
    # Not retried: the server would only send the same line again.
    assert len([r for r in server.requests() if r["method"] == "POST"]) == 2
    assert growth < 3 * DEFAULT_CAP + 64 * MIB, f"peak RSS grew by {growth / MIB:.0f} MiB for a {LINE_MB} MiB line"


@pytest.mark.parametrize("framing", ["ndjson", "array"])
def test_a_configured_limit_bounds_ndjson_lines_and_json_array_elements(editor_factory, server, framing):
    cap = 2 * MIB
    ed = editor_factory(setup={
        "model": "openaix/echo",
        "providers": {"openaix": provider_config("openai", server)},
        "limits": {"max_event_bytes": cap},
    })
    growth = prompt_and_measure(ed, f"hugeline {LINE_MB} {framing}")
    cls, message = error_line(ed)
    assert cls == "server_error"
    assert message.startswith("openaix: the provider sent a line over 2 MiB (limits.max_event_bytes = 2097152);")
    assert growth < 3 * cap + 64 * MIB, f"peak RSS grew by {growth / MIB:.0f} MiB for a {LINE_MB} MiB line"


def test_a_line_under_a_raised_limit_still_arrives_whole(editor_factory, server):
    ed = editor_factory(setup={
        "model": "openaix/echo",
        "providers": {"openaix": provider_config("openai", server)},
        "limits": {"max_event_bytes": 16 * MIB},
    })
    ed.nvim.command("Mia prompt hugeline 9")
    ed.wait("require('mia.chat').state() == 'done'", 120000)
    assert ed.chat_text().endswith("\n\n" + "x" * (9 * MIB))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8MB"])
def test_a_bad_limit_is_refused_by_setup(editor_factory, bad):
    ed = editor_factory()
    with pytest.raises(NvimError, match=r"limits.max_event_bytes` must be a positive whole number of bytes"):
        ed.lua("require('mia').setup(...)", {"limits": {"max_event_bytes": bad}})


SEND = """
_G.run = { done = nil, err = nil }
require('mia').send(..., {
  on_done = function(d) run.done = d end,
  on_error = function(e) run.err = e end,
})
"""


def test_a_whole_response_over_the_limit_is_refused_with_bounded_memory(editor_factory, server):
    cap = 2 * MIB
    ed = editor_factory(setup={
        "model": "openaix/echo",
        "providers": {"openaix": provider_config("openai", server)},
        "limits": {"max_event_bytes": cap},
    })
    ed.nvim.command("Mia prompt echo warm up")
    ed.wait("require('mia.chat').state() == 'done'")
    before = status_kib(ed.pid, "VmRSS")
    if not reset_peak(ed.pid):
        before = status_kib(ed.pid, "VmHWM")
    ed.lua(SEND, {"model": "openaix/echo", "messages": [{"role": "user", "content": f"hugeline {LINE_MB}"}]})
    ed.wait("run.done ~= nil or run.err ~= nil", 120000)
    growth = (status_kib(ed.pid, "VmHWM") - before) * 1024
    err = ed.lua("return run.err")
    assert err is not None and err["class"] == "server_error", err
    assert err["message"].startswith("openaix: the provider sent a line over 2 MiB (limits.max_event_bytes = 2097152);")
    assert growth < 3 * cap + 64 * MIB, f"peak RSS grew by {growth / MIB:.0f} MiB for a {LINE_MB} MiB response"
