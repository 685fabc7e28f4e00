"""Project tools (`.mia/tools/*.lua`) are trusted by content: a new or
changed file is asked about before it runs, "never" is remembered for that
content, and a damaged trust file is reported once and kept aside — in a
real Neovim (restarted on the same home) against the scenario server."""

import json
import os
import signal
import threading

import pytest

from conftest import LIB, scenario_setup

HELLO = "return { name = 'hello', description = 'says hello', execute = function() return '%s' end }\n"


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / ".mia" / "tools").mkdir(parents=True)
    return p


@pytest.fixture
def tools_dir(project):
    return project / ".mia" / "tools"


@pytest.fixture
def start(editor_factory, server, project):
    """Starts Neovim in the project with vim.ui.select answering the trust
    question with `answer` (1 trust, 2 not now, 3 never) and recording each
    question. Every start uses the same home, like restarting Neovim."""
    if not LIB.exists():
        pytest.fail(f"{LIB} is missing: build it with `cargo build --release`")
    running = []

    def make(answer):
        for ed in running:
            ed.close()
        ed = editor_factory("home", setup=scenario_setup(server))
        running.append(ed)
        ed.lua("vim.cmd.cd(...)", str(project))
        ed.lua("""
          _G.answer = ...
          _G.asked = {}
          vim.ui.select = function(items, opts, cb)
            if opts.kind ~= 'mia_trust' then return cb(items[1], 1) end
            table.insert(asked, opts.prompt)
            cb(items[answer], answer)
          end
        """, answer)
        return ed
    return make


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def asked(ed):
    return ed.lua("return asked")


def tool_names(ed):
    return ed.lua("return vim.tbl_map(function(t) return t.name end, require('mia.tools').list())")


def last_tool_result(server):
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    return [m for m in bodies[-1]["messages"] if m["role"] == "tool"][-1]["content"]


def trust_file(ed):
    return ed.home / "data" / "nvim" / "mia" / "trusted.json"


def real(path):
    return os.path.realpath(str(path))


def test_trusted_tool_file_loads_in_the_next_neovim_without_asking(start, server, tools_dir):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    ed = start(answer=1)
    prompt(ed, "echo first")
    assert len(asked(ed)) == 1 and "hello.lua (new)" in asked(ed)[0]
    stored = json.loads(trust_file(ed).read_text())
    assert stored["files"][real(tools_dir / "hello.lua")]["answer"] == "trust"

    ed = start(answer=2)
    prompt(ed, "tool hello {}")
    assert asked(ed) == []
    assert last_tool_result(server) == "hello v1"


def test_a_pipe_in_place_of_the_trust_file_does_not_hold_the_editor(start, server, tools_dir):
    """Another process puts a FIFO where trusted.json goes: reading it on
    Neovim's main thread would wait for a writer that never comes. The
    prompt is answered, the tool is asked about as a new one, and the
    answer is remembered in a file of its own."""
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    ed = start(answer=1)
    trust_file(ed).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(trust_file(ed))
    # A guard, not a timing: a Neovim stuck on the pipe is killed so the test fails instead of hanging.
    watchdog = threading.Timer(30, os.kill, (ed.pid, signal.SIGKILL))
    watchdog.start()
    try:
        ed.nvim.input(":Mia prompt echo first<CR>")
        ed.wait("require('mia.chat').state() == 'done'")
    finally:
        watchdog.cancel()
    assert len(asked(ed)) == 1 and "hello.lua (new)" in asked(ed)[0]
    stored = json.loads(trust_file(ed).read_text())
    assert stored["files"][real(tools_dir / "hello.lua")]["answer"] == "trust"


def test_edited_tool_file_asks_again_and_stays_unloaded_until_yes(start, server, tools_dir):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    prompt(start(answer=1), "echo trust it")
    (tools_dir / "hello.lua").write_text(HELLO % "hello v2 (edited)")

    ed = start(answer=2)
    prompt(ed, "echo not now")
    assert len(asked(ed)) == 1 and "hello.lua (changed)" in asked(ed)[0]
    assert "hello" not in tool_names(ed)

    ed.lua("_G.answer = 1")
    prompt(ed, "tool hello {}")
    assert len(asked(ed)) == 2
    assert last_tool_result(server) == "hello v2 (edited)"


def test_tool_file_edited_during_the_session_is_dropped_until_trusted_again(start, server, tools_dir):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    ed = start(answer=1)
    prompt(ed, "tool hello {}")
    assert last_tool_result(server) == "hello v1"
    (tools_dir / "hello.lua").write_text(HELLO % "hello v2")
    ed.lua("_G.answer = 2")
    prompt(ed, "echo again")
    assert "hello.lua (changed)" in asked(ed)[-1]
    assert "hello" not in tool_names(ed)


def test_new_file_in_a_trusted_directory_asks_only_about_itself(start, server, tools_dir):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    prompt(start(answer=1), "echo trust it")
    (tools_dir / "extra.lua").write_text(
        "return { name = 'extra', description = 'extra', execute = function() return 'extra ran' end }\n")

    ed = start(answer=2)
    prompt(ed, "echo not now")
    question = asked(ed)[0]
    assert "extra.lua (new)" in question and "hello.lua" not in question
    names = tool_names(ed)
    assert "hello" in names and "extra" not in names

    ed.lua("_G.answer = 1")
    prompt(ed, "tool extra {}")
    assert last_tool_result(server) == "extra ran"


def test_never_is_remembered_for_that_content_only(start, server, tools_dir):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    ed = start(answer=3)
    prompt(ed, "echo never")
    assert len(asked(ed)) == 1
    assert "hello" not in tool_names(ed)

    ed = start(answer=1)
    prompt(ed, "echo again")
    assert asked(ed) == []
    assert "hello" not in tool_names(ed)

    (tools_dir / "hello.lua").write_text(HELLO % "hello v2")
    ed = start(answer=2)
    prompt(ed, "echo changed")
    assert "hello.lua (changed)" in asked(ed)[0]


def test_corrupt_trust_file_is_reported_once_and_kept_as_bak(start, server, tools_dir, tmp_path):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    path = tmp_path / "home" / "data" / "nvim" / "mia" / "trusted.json"
    path.parent.mkdir(parents=True)
    damaged = b'{"/somewhere/.mia/tools": "trust", \x00 truncated'
    path.write_bytes(damaged)

    ed = start(answer=1)
    prompt(ed, "echo first")
    prompt(ed, "tool hello {}")
    assert last_tool_result(server) == "hello v1"
    messages = ed.messages()
    assert messages.count("trusted.json is unreadable") == 1, messages
    assert str(path) in messages and "moved to " + str(path) + ".bak" in messages
    assert (path.parent / "trusted.json.bak").read_bytes() == damaged
    stored = json.loads(path.read_text())
    assert stored["files"][real(tools_dir / "hello.lua")]["answer"] == "trust"


def test_corrupt_trust_file_never_replaces_an_earlier_backup(start, tools_dir, tmp_path):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    path = tmp_path / "home" / "data" / "nvim" / "mia" / "trusted.json"
    path.parent.mkdir(parents=True)
    (path.parent / "trusted.json.bak").write_bytes(b"older backup")
    path.write_bytes(b"[1, 2")

    ed = start(answer=2)
    prompt(ed, "echo first")
    assert "moved to " + str(path) + ".bak.1" in ed.messages()
    assert (path.parent / "trusted.json.bak").read_bytes() == b"older backup"
    assert (path.parent / "trusted.json.bak.1").read_bytes() == b"[1, 2"
    assert not path.exists()


def test_old_directory_answers_ask_once_per_file_and_refusals_stay(start, server, tools_dir, tmp_path):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    refused = tmp_path / "refused"
    (refused / ".mia" / "tools").mkdir(parents=True)
    (refused / ".mia" / "tools" / "nope.lua").write_text(
        "return { name = 'nope', description = 'nope', execute = function() return 'nope' end }\n")
    path = tmp_path / "home" / "data" / "nvim" / "mia" / "trusted.json"
    path.parent.mkdir(parents=True)
    old = {real(tools_dir): "trust", real(refused / ".mia" / "tools"): "never"}
    path.write_text(json.dumps(old))

    ed = start(answer=1)
    prompt(ed, "tool hello {}")
    assert len(asked(ed)) == 1 and "hello.lua (new)" in asked(ed)[0]
    assert last_tool_result(server) == "hello v1"
    assert "unreadable" not in ed.messages()
    stored = json.loads(path.read_text())
    assert stored["files"][real(tools_dir / "hello.lua")]["answer"] == "trust"
    assert stored["dirs"] == {real(refused / ".mia" / "tools"): "never"}

    ed = start(answer=1)
    prompt(ed, "echo again")
    ed.lua("vim.cmd.cd(...)", str(refused))
    prompt(ed, "echo in the refused project")
    assert asked(ed) == []
    assert "nope" not in tool_names(ed)


def test_corrupt_trust_file_that_cannot_be_moved_aside_is_left_untouched(start, server, tools_dir, tmp_path):
    (tools_dir / "hello.lua").write_text(HELLO % "hello v1")
    path = tmp_path / "home" / "data" / "nvim" / "mia" / "trusted.json"
    path.parent.mkdir(parents=True)
    (path.parent / "trusted.json.bak").write_bytes(b"old")
    for n in range(1, 101):
        (path.parent / f"trusted.json.bak.{n}").write_bytes(b"old")
    path.write_bytes(b"not json")

    ed = start(answer=1)
    prompt(ed, "tool hello {}")
    prompt(ed, "echo again")
    assert last_tool_result(server) == "hello v1"
    messages = ed.messages()
    assert messages.count("could not be moved aside") == 1, messages
    assert "answers hold for this Neovim only" in messages
    assert path.read_bytes() == b"not json"
    assert len(asked(ed)) == 1


def test_binary_tool_file_is_refused_once_without_asking(start, tools_dir):
    (tools_dir / "blob.lua").write_bytes(b"\x1bLJ\x02\x00bytecode")
    ed = start(answer=1)
    prompt(ed, "echo one")
    prompt(ed, "echo two")
    assert asked(ed) == []
    assert ed.messages().count("blob.lua is not Lua source text") == 1


def test_project_tools_follow_the_project_when_the_directory_changes(start, server, project, tmp_path):
    (project / ".mia" / "tools" / "hello.lua").write_text(HELLO % "from the first project")
    other = tmp_path / "other"
    (other / ".mia" / "tools").mkdir(parents=True)
    (other / ".mia" / "tools" / "bye.lua").write_text(
        "return { name = 'bye', description = 'says bye', execute = function() return 'bye' end }\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    ed = start(answer=1)
    prompt(ed, "tool hello {}")
    assert last_tool_result(server) == "from the first project"
    # A plain directory: the first project's tool leaves at once, nothing is asked.
    ed.nvim.input(f":cd {plain}<CR>")
    ed.wait("not vim.tbl_contains(vim.tbl_map(function(t) return t.name end, require('mia.tools').list()), 'hello')")
    prompt(ed, "tool hello {}")
    assert "hello" in last_tool_result(server) and "from the first project" not in last_tool_result(server)
    # Another project: its new file is asked about at the next prompt, not on :cd.
    ed.nvim.input(f":tcd {other}<CR>")
    ed.wait(f"vim.fn.getcwd() == '{other}'")
    assert len(asked(ed)) == 1
    prompt(ed, "tool bye {}")
    assert len(asked(ed)) == 2 and "bye.lua (new)" in asked(ed)[1]
    assert last_tool_result(server) == "bye"
    assert "hello" not in tool_names(ed)
    # Back to the first project: its trusted tool loads on :cd, without a question; the other's leaves.
    ed.nvim.input(f":cd {project}<CR>")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(t) return t.name end, require('mia.tools').list()), 'hello')")
    assert "bye" not in tool_names(ed) and len(asked(ed)) == 2


def test_a_project_without_tools_does_not_load_their_module_until_it_has_some(start, server, project, tools_dir):
    """The project tools' module (~460 lines of Lua) is not read for a plain
    prompt in a project without `.mia/tools`; a tools directory made later
    is asked about at the next prompt, and its tool runs."""
    tools_dir.rmdir()
    ed = start(answer=1)
    prompt(ed, "echo first")
    assert ed.lua("return package.loaded['mia.tools.project'] == nil")
    assert asked(ed) == []
    tools_dir.mkdir()
    (tools_dir / "hello.lua").write_text(HELLO % "made later")
    prompt(ed, "tool hello {}")
    assert len(asked(ed)) == 1 and "hello.lua (new)" in asked(ed)[0]
    assert last_tool_result(server) == "made later"
