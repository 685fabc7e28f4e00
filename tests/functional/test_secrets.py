"""A canary API key never leaks: not into the log (at trace level), the
store or any file under the data directory, any buffer, :messages,
notifications, the error tables `mia.stream` callbacks get, :checkhealth, or
a request body or URL. Every provider kind, the key from the environment,
written in setup() or in a header of the user's own, through normal answers, every HTTP error status,
retries, broken streams and a server that echoes the key back."""

import json
import os
import secrets
import time
import sqlite3
from pathlib import Path

import pytest

KINDS = ["openai", "anthropic", "gemini", "openai_compatible"]
FORMS = ["api_key_env", "api_key"]
ENV_VAR = "MIA_CANARY_API_KEY"

# Streams through mia.stream: normal answers, retried failures, failures that
# are given up on, every status the scenario server can send, broken streams
# and a server quoting the key back in its 401 body.
STREAMED = [
    "echo canary normal path",
    "reason 2",
    'tool read_file {"path": "a.txt"}',
    "split echo pieces everywhere",
    "nousage counted anyway",
    "retry429 2 0.05",
    "fail5xx 2 500",
    "fail5xx 9 503",
    "noretry 1",
    "overloaded 1",
    "context",
    "filtered",
    "reset 3",
    "truncate 3",
    "stall 2",
    "malformed",
    "badkey",
    "badkey masked",
] + [f"http {s}" for s in (400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504, 529)]

# The same through the chat (:Mia prompt), which also records the session.
CHATTED = ["echo chat normal path", "http 401", "badkey", "badkey masked", "fail5xx 1 500", "reset 2", "malformed",
           # tools whose output holds the key: the shell's environment, a config file
           'tool bash {"command": "echo key=$MIA_CANARY_API_KEY"}',
           'tool read_file {"path": "init.lua"}']

CAPTURE = """
_G.seen = {}
local function keep(v) table.insert(_G.seen, type(v) == 'string' and v or vim.inspect(v)) end
_G.keep = keep
local notify = vim.notify
vim.notify = function(msg, ...) keep(msg); return notify(msg, ...) end
local notify_once = vim.notify_once
vim.notify_once = function(msg, ...) keep(msg); return notify_once(msg, ...) end
"""

STREAM = """
_G.run = { done = false }
local req, stream = ...
local cbs = {
  on_delta = function(d) keep(d) end,
  on_done = function(d) keep(d); run.done = true end,
  on_error = function(e) keep(e); run.err = e; run.done = true end,
}
if stream then require('mia').stream(req, cbs) else require('mia').send(req, cbs) end
"""


def make_canary() -> str:
    return "sk-canary-" + secrets.token_hex(16)


def masked(key: str) -> str:
    """How the scenario server's `badkey masked` (like OpenAI) shows a key."""
    return key[:8] + "*" * 20 + key[-4:]


def provider(kind, form, key, server):
    root = f"http://127.0.0.1:{server.port}"
    base = {"anthropic": root, "gemini": root + "/v1beta"}.get(kind, root + "/v1")
    cfg = {"kind": kind, "base_url": base}
    if form == "api_key_env":
        cfg["api_key_env"] = ENV_VAR
    elif form == "api_key":
        cfg["api_key"] = key
    else:  # the key in a header of the user's own (an OpenAI-compatible server)
        cfg["headers"] = {"Authorization": f"Bearer {key}"}
    return cfg


@pytest.fixture(params=[(k, f) for k in KINDS for f in FORMS] + [("openai_compatible", "headers")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def case(request, editor_factory, server, tmp_path):
    kind, form = request.param
    key = make_canary()
    opts = {
        "model": "canary/echo",
        "providers": {"canary": provider(kind, form, key, server)},
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2, "max_wait_ms": 500},
        "timeouts": {"stream_idle_ms": 800},
        "log_level": "trace",
    }
    # the built-in providers have no key, so :Mia health online asks only ours
    env = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": ""}
    if form == "api_key_env":
        env[ENV_VAR] = key
    ed = editor_factory(env=env, setup=opts)
    ed.lua(CAPTURE)
    # questions are answered "Allow always for this project": permissions.json is written
    ed.lua("vim.ui.select = function(items, opts, cb) keep(opts.prompt); cb(items[2], 2) end")
    ed.lua("vim.cmd.cd(...)", str(tmp_path))
    (tmp_path / "a.txt").write_text("file text\n")
    (tmp_path / "init.lua").write_text(f'require("mia").setup({{ providers = {{ x = {{ api_key = "{key}" }} }} }})\n')
    return ed, kind, form, key


def run(ed, prompt, stream=True):
    ed.lua(STREAM, {"model": "canary/echo", "messages": [{"role": "user", "content": prompt}]}, stream)
    ed.wait("run.done")
    return ed.lua("return run.err")


def chat(ed, prompt):
    ed.nvim.command("Mia prompt " + prompt)
    ed.wait("require('mia.chat').state() ~= 'streaming'")


def forbidden(key):
    """The key, its random part, and the masked form a server may echo."""
    return [key, key[len("sk-canary-"):], masked(key)]


def leaks(text, key):
    return [f for f in forbidden(key) if f in text]


def every_buffer(ed):
    return ed.lua("""
      local out = {}
      for _, b in ipairs(vim.api.nvim_list_bufs()) do
        if vim.api.nvim_buf_is_loaded(b) then
          table.insert(out, vim.api.nvim_buf_get_name(b) .. '\\n' ..
            table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\\n'))
        end
      end
      return out
    """)


def files_under(root: Path):
    return sorted(p for p in root.rglob("*") if p.is_file())


def assert_nothing_leaked(ed, server, key, store=True):
    """Every place the brief names, each checked for the canary."""
    where = {}
    log = Path(ed.lua("return require('mia.config').get().log_file"))
    ed.wait(f"vim.fn.filereadable({json.dumps(str(log))}) == 1")
    where["log"] = log.read_bytes().decode("utf-8", "replace")
    data = Path(ed.lua("return require('mia.config').get().data_dir"))
    stored = files_under(data)
    assert not store or {"mia.sqlite3", "permissions.json"} <= {p.name for p in stored}, stored
    for p in stored:
        where[f"data file {p.name}"] = p.read_bytes().decode("latin-1")
    for i, text in enumerate(every_buffer(ed)):
        where[f"buffer {i}"] = text
    where[":messages"] = ed.messages()
    where["notify and callbacks"] = "\n".join(ed.lua("return _G.seen"))
    recorded = server.requests()
    for r in recorded:
        assert not r.get("key_in_url"), r["path"]
        for name in ("authorization", "x-api-key", "x-goog-api-key"):
            assert r["headers"].get(name) in (None, "<redacted>"), r["headers"]
    where["request bodies and URLs"] = json.dumps([(r["path"], r["body"]) for r in recorded], ensure_ascii=False)
    found = {place: leaks(text, key) for place, text in where.items()}
    assert not {p: f for p, f in found.items() if f}, "the canary leaked"
    return where


def quit_and_scan_files(ed, key):
    """Quits Neovim (the store checkpoints its WAL, the log is flushed), then
    reads the log and every data file again."""
    log = Path(ed.lua("return require('mia.config').get().log_file"))
    data = Path(ed.lua("return require('mia.config').get().data_dir"))
    try:
        ed.nvim.command("qa!")
    except Exception:
        pass  # the RPC channel closes under the call
    for _ in range(500):
        try:
            state = Path(f"/proc/{ed.pid}/status").read_text()
        except FileNotFoundError:
            break
        if "\nState:\tZ" in state:
            break
        time.sleep(0.01)
    for p in [log, *files_under(data)]:
        assert not leaks(p.read_bytes().decode("latin-1"), key), f"the canary leaked into {p}"


def test_canary_key_never_leaks_on_any_path(case, server):
    ed, kind, form, key = case
    errors = {prompt: run(ed, prompt) for prompt in STREAMED}
    # the paths were really taken: answers, retries and each failure class
    assert errors["echo canary normal path"] is None
    assert errors["retry429 2 0.05"] is None and errors["fail5xx 2 500"] is None
    assert errors["fail5xx 9 503"]["message"].endswith("(after 2 retries)")
    assert errors["http 401"]["class"] == "auth_failure"
    assert errors["http 404"]["class"] == "model_not_found"
    assert errors["http 429"]["class"] == "rate_limit"
    assert errors["reset 3"]["class"] == "network_error"
    assert errors["stall 2"]["class"] == "timeout"
    assert "malformed chunk" in errors["malformed"]["message"]
    # a server quoting the key back: the user sees that it was removed
    for prompt in ("badkey", "badkey masked"):
        assert errors[prompt]["class"] == "auth_failure"
        assert "Incorrect API key provided: <redacted>." in errors[prompt]["message"], errors[prompt]["message"]

    for prompt in ("echo not streamed", "http 401", "badkey", "badkey masked", "fail5xx 1 502"):
        run(ed, prompt, stream=False)
    ed.lua("_G.listed = nil; require('mia').list_models('canary', function(err, ids) listed = { err, ids } end)")
    ed.wait("listed ~= nil")
    ed.lua("keep(listed)")

    chats = {}
    for prompt in CHATTED:
        ed.nvim.command("Mia new")  # each prompt alone: a failed turn stays in the history
        chat(ed, prompt)
        chats[prompt] = ed.chat_text()
        ed.lua("keep(...)", chats[prompt])
    assert chats["echo chat normal path"].endswith("\n\necho chat normal path")
    for prompt in ("badkey", "badkey masked"):
        assert "Incorrect API key provided: <redacted>." in chats[prompt], chats[prompt]
    # the tools ran and their output went back to the model, without the key
    posts = [r for r in server.requests() if r["method"] == "POST"]
    tool_turns = [json.dumps(r["body"]) for r in posts if "<redacted>" in json.dumps(r["body"])]
    assert len(tool_turns) == 1, [leaks(json.dumps(r["body"]), key) for r in posts]
    # the shell does not even inherit the key's variable (only the config file read needed redacting)
    assert "key=" in chats[CHATTED[-2]] and "key=<redacted>" not in chats[CHATTED[-2]], chats[CHATTED[-2]]
    assert 'api_key = "<redacted>"' in chats[CHATTED[-1]], chats[CHATTED[-1]]

    ed.nvim.command("checkhealth mia")
    health = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    expected = {"api_key_env": f"${ENV_VAR} is set", "api_key": "API key set in setup()"}.get(form, "no API key needed")
    assert f"canary ({kind}) " in health and expected in health, health
    ed.nvim.command("Mia health online")
    online = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    assert "canary answers in " in online, online

    # the key went out: the server saw its header on every request, redacted
    posts = [r for r in server.requests() if r["method"] == "POST"]
    header = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}.get(kind, "authorization")
    assert posts and all(r["headers"].get(header) == "<redacted>" for r in posts)

    where = assert_nothing_leaked(ed, server, key)
    assert "retrying" in where["log"]  # the trace-level log was written, with the retries in it
    db = Path(ed.lua("return require('mia.config').get().data_dir")) / "mia.sqlite3"
    with sqlite3.connect(db) as conn:
        stored = conn.execute("select count(*) from messages").fetchone()[0]
    assert stored >= 2  # the chat was recorded, so the store was really checked
    quit_and_scan_files(ed, key)


def test_checkhealth_reports_a_key_without_printing_it(editor_factory, server):
    key = make_canary()
    env = {ENV_VAR: key, "OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key, "GEMINI_API_KEY": key}
    providers = {f"{k}_{f}": provider(k, f, key, server) for k in KINDS for f in FORMS}
    for builtin in ("openai", "anthropic", "gemini"):  # their keys are set: keep them on loopback
        providers[builtin] = provider(builtin, "api_key_env", key, server)
        providers[builtin]["api_key_env"] = f"{builtin.upper()}_API_KEY"
    ed = editor_factory(env=env, setup={"model": "openai_api_key/echo", "providers": providers, "log_level": "trace"})
    ed.lua(CAPTURE)
    ed.nvim.command("Mia health online")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    for name in providers:
        assert f"{name} answers in " in report, report
    for builtin in ("openai", "anthropic", "gemini"):
        assert f"${builtin.upper()}_API_KEY is set" in report
    assert not leaks(report, key)
    assert_nothing_leaked(ed, server, key, store=False)  # no prompt yet: no store


@pytest.mark.parametrize("pasted", ["sk-canary-{hex}", "AIzaCanary{hex}"])
def test_a_key_pasted_as_api_key_env_is_refused_without_being_printed(editor_factory, server, pasted):
    key = pasted.format(hex=secrets.token_hex(16))
    ed = editor_factory()
    ed.lua(CAPTURE)
    opts = {"model": "canary/echo", "providers": {"canary": {"kind": "gemini", "api_key_env": key}}}
    result = ed.lua("return { pcall(require('mia').setup, ...) }", opts)
    assert result[0] is False, "setup() took a key as api_key_env: every 'Set <var>' hint would print it"
    message = result[1]
    assert message.startswith("mia.setup: `providers.canary.api_key_env` must be the name of an environment variable")
    assert key not in message and key[-12:] not in message
    assert not leaks(ed.messages() + "\n".join(ed.lua("return _G.seen")), key)
