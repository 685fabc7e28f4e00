"""A conversation is never lost: message numbers come from the store, a
compaction is stored as a message of its own, and a resumed session shows
every prompt and answer while its next request sends the summary in place
of what it covers — in real Neovims, against the scenario server, with the
real SQLite file."""

import json
import os
import sqlite3
import subprocess
import time

import pytest

from conftest import scenario_setup


@pytest.fixture
def make(editor_factory, server, data_home, tmp_path):
    def make(name="nvim"):
        e = editor_factory(name=name, env={"XDG_DATA_HOME": str(data_home)}, setup=scenario_setup(server))
        e.lua("vim.cmd.cd(...)", str(tmp_path))
        return e
    return make


def rows(data_home):
    """The stored messages (turn ends, which have no parts, left out)."""
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        return c.execute(
            "select seq, role, kind, covers_from, covers_to, parts from messages where parts <> '[]' order by seq"
        ).fetchall()


def turn_ends(data_home):
    """How each stored turn ended, in order."""
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        return [
            r[0]
            for r in c.execute(
                "select json_extract(meta, '$.turn_end.stopReason') from messages where parts = '[]' order by seq"
            )
        ]


def text_of(parts):
    return "".join(p.get("text", "") for p in json.loads(parts))


def posts(server):
    return [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]


def prompt(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'")


def resume_in(ed):
    """Resumes the only session the way a user does: :Mia sessions, pick it."""
    ed.lua("vim.ui.select = function(items, opts, cb) _G.picked = #items; cb(items[1], 1) end")
    ed.nvim.command("Mia sessions")
    # Polled from here rather than inside vim.wait: the pick then runs from
    # Neovim's own loop, as it does for a user, not nested in a test's wait.
    loaded = "return _G.picked ~= nil and require('mia.chat').state() == 'idle' and " \
             "#vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false) > 1"
    for _ in range(1500):
        if ed.lua(loaded):
            break
        time.sleep(0.02)
    assert ed.lua(loaded), f"the session was not resumed:\n{ed.chat_text()}\n{ed.messages()}"
    assert ed.lua("return _G.picked") == 1


def turns(chat_text):
    """The transcript as (who, text) in order: prompts, answers and notes."""
    out = []
    for block in chat_text.split("\n\n"):
        if block == "## You":
            out.append(["you", None])
        elif block.startswith("## mia"):
            out.append(["mia", None])
        elif block.startswith("> _"):
            out.append(["note", block])
        elif out and out[-1][1] is None:
            out[-1][1] = block
    return [tuple(t) for t in out]


def test_compact_then_a_new_prompt_keeps_every_message_and_resume_sends_the_summary(make, server, data_home):
    first = make("first")
    prompt(first, "alpha?")
    prompt(first, "beta?")
    # /compact typed in the chat's prompt buffer, sent with <CR> as a user does.
    first.nvim.command("Mia open")
    first.lua("vim.api.nvim_set_current_win(vim.fn.bufwinid(require('mia.prompt').buffer()))")
    first.nvim.input("i/compact<Esc>")
    first.lua("vim.wait(50)")
    first.nvim.input("<CR>")
    first.wait("require('mia.chat').buffer() and table.concat(vim.api.nvim_buf_get_lines("
               "require('mia.chat').buffer(), 0, -1, false), '\\n'):find('context compacted', 1, true) ~= nil")
    prompt(first, "gamma?")
    live = first.chat_text()
    first.close()

    second = make("second")
    resume_in(second)
    resumed = second.chat_text()
    assert turns(resumed) == [
        ("you", "alpha?"), ("mia", "alpha?"), ("you", "beta?"), ("mia", "beta?"),
        ("note", "> _context compacted_"), ("you", "gamma?"), ("mia", "gamma?"),
    ]
    assert resumed == live
    listing = second.lua("return require('mia').sessions.list({})")["sessions"]
    assert [s["_meta"]["messageCount"] for s in listing] == [6]  # the compaction is no message

    stored = rows(data_home)
    # Each turn also ends with a row of its own (seq 2, 5 and 9), never sent to the model.
    assert [(r[0], r[1], r[2]) for r in stored] == [
        (0, "user", "message"), (1, "assistant", "message"), (3, "user", "message"), (4, "assistant", "message"),
        (6, "user", "compaction"), (7, "user", "message"), (8, "assistant", "message"),
    ]
    assert turn_ends(data_home) == ["end_turn", "end_turn", "end_turn"]
    assert [text_of(r[5]) for r in stored if r[2] == "message"][::2] == ["alpha?", "beta?", "gamma?"]
    compaction = stored[4]
    assert (compaction[3], compaction[4]) == (0, 4)
    summary = text_of(compaction[5])
    assert summary.startswith("(Summary of the earlier conversation)")

    prompt(second, "delta?")
    sent = posts(server)[-1]["messages"]
    contents = [(m["role"], m["content"]) for m in sent if m["role"] != "system"]
    assert contents == [("user", summary), ("user", "gamma?"), ("assistant", "gamma?"), ("user", "delta?")]
    # The store kept appending after the compaction: nothing was overwritten.
    assert [text_of(r[5]) for r in rows(data_home)][7:] == ["delta?", "delta?"]
    assert turn_ends(data_home) == ["end_turn"] * 4


def test_automatic_compaction_on_context_overflow_stores_the_summary(make, server, data_home):
    first = make("first")
    prompt(first, "echo an earlier turn")
    prompt(first, "context", state="error")
    first_text = first.chat_text()
    assert "> _context compacted_" in first_text
    first.close()

    stored = rows(data_home)
    assert [(r[0], r[1], r[2]) for r in stored] == [
        (0, "user", "message"), (1, "assistant", "message"), (3, "user", "message"), (4, "user", "compaction"),
    ]
    assert turn_ends(data_home) == ["end_turn", "error"]
    # The run kept its latest two messages (the answer and "context") verbatim.
    assert (stored[3][3], stored[3][4]) == (0, 0)
    summary = text_of(stored[3][5])
    assert summary.startswith("(Summary of the earlier conversation)")
    live = first_text

    second = make("second")
    resume_in(second)
    assert turns(second.chat_text()) == [
        ("you", "echo an earlier turn"), ("mia", "echo an earlier turn"), ("you", "context"), ("mia", None),
        ("note", "> _context compacted_"),
    ]
    assert second.chat_text() == live  # the error included
    prompt(second, "echo after resume")
    sent = posts(server)[-1]["messages"]
    contents = [(m["role"], m["content"]) for m in sent if m["role"] != "system"]
    assert contents == [
        ("user", summary), ("assistant", "echo an earlier turn"), ("user", "context"), ("user", "echo after resume"),
    ]


def test_a_store_another_process_holds_does_not_hold_back_the_first_request(make, server, data_home):
    """The first prompt's request goes out while the store is still opening
    (here: waiting for another process's write lock), and its answer
    streams; once the lock is released the prompt is stored before the
    answer and the turn's end, in that order."""
    first = make("first")
    prompt(first, "before?")
    first.close()
    store = sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3", isolation_level=None)
    try:
        store.execute("BEGIN IMMEDIATE")  # what another Neovim does while it writes
        second = make("second")
        second.nvim.command("Mia prompt held?")
        # Polled without Neovim's wait: the lock is held at most 3 s (the
        # store gives up waiting after 5), and Neovim must stay free meanwhile.
        answered = False
        for _ in range(150):
            if second.chat_text().count("held?") == 2:  # the prompt and its echo
                answered = True
                break
            time.sleep(0.02)
        sent = [m["content"] for m in posts(server)[-1]["messages"] if m["role"] == "user"]
        assert answered, f"no answer while the store was locked:\n{second.chat_text()}"
        assert sent == ["held?"]
        assert second.lua("return require('mia.chat').state()") == "streaming"  # its end waits for the store
    finally:
        store.execute("ROLLBACK")
        store.close()
    second.wait("require('mia.chat').state() == 'done'")
    with sqlite3.connect(data_home / "nvim" / "mia" / "mia.sqlite3") as c:
        stored = c.execute(
            "select seq, role, parts, json_extract(meta, '$.turn_end.stopReason') from messages where session_id = "
            "(select id from sessions order by created_at_ms desc limit 1) order by seq"
        ).fetchall()
    assert [(seq, role, text_of(parts), end) for seq, role, parts, end in stored] == [
        (0, "user", "held?", None), (1, "assistant", "held?", None), (2, "assistant", "", "end_turn"),
    ]
    # (the one note that budgets cannot count the unpriced test model aside)
    assert second.messages().replace("mia: scn/echo has no price", "").count("mia:") == 0, second.messages()


def test_a_store_that_cannot_be_opened_is_said_once_and_the_chat_goes_on(make, server, data_home):
    """A file that is no database where the store should be: the prompt is
    still answered, and one warning names the file, says chats are not being
    saved and what to do; the next prompt does not repeat it."""
    path = data_home / "nvim" / "mia" / "mia.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database\n" * 300)
    ed = make()
    prompt(ed, "first?")
    prompt(ed, "second?")
    assert turns(ed.chat_text()) == [("you", "first?"), ("mia", "first?"), ("you", "second?"), ("mia", "second?")]
    warnings = [line for line in ed.messages().splitlines() if "not being saved" in line]
    assert len(warnings) == 1, ed.messages()
    assert str(path) in warnings[0] and "not a usable mia database" in warnings[0], warnings[0]
    assert "move it away" in warnings[0] and warnings[0].endswith("(then restart Neovim)"), warnings[0]
    assert path.read_bytes() == b"not a database\n" * 300  # left as it was
    # The log has it too, though the opening fails at once, while the first
    # command may still be starting the logger (the log is written behind).
    log = ed.lua("return require('mia.config').get().log_file")
    deadline = time.monotonic() + 10
    while True:
        with open(log, encoding="utf-8") as f:
            logged = [line for line in f if "cannot open the store" in line]
        if logged or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(logged) == 1 and str(path) in logged[0] and "ERROR" in logged[0], logged
    ed.nvim.command("checkhealth mia")
    files = "\n".join(ed.nvim.current.buffer[:]).split("mia: files", 1)[1]
    assert "ERROR the store could not be opened: chats and costs are not being saved" in files, files
    assert "not a usable mia database" in files and "restart Neovim once the file is fixed" in files, files


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs of its own (the suite runs as root), unmounted after the test."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory):
    """Fills the filesystem holding `directory` to its last byte with one file."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 1 << 20
        while size >= 1:
            try:
                os.write(fd, b"\0" * size)
            except OSError:
                size //= 2
    finally:
        os.close(fd)


def stored(db):
    """The stored prompts' texts, how many turn ends and how many usage rows the file holds."""
    with sqlite3.connect(db) as c:
        prompts = [
            text_of(p) for (p,) in c.execute("select parts from messages where role = 'user' order by seq")
        ]
        ends = c.execute("select count(*) from messages where parts = '[]'").fetchone()[0]
        usage = c.execute("select count(*) from usage").fetchone()[0]
    return prompts, ends, usage


def health(ed):
    """What :checkhealth mia shows (its tab is closed again)."""
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.nvim.current.buffer[:])
    ed.nvim.command("tabclose")
    return text


def test_a_full_disk_is_said_once_and_what_it_kept_out_is_written_when_space_returns(editor_factory, server, small_disk):
    """The data directory's disk fills between two prompts: the chat goes on,
    the user is told once why it is not being saved, and once space returns
    every prompt, answer (a long streamed one included), turn end and usage
    row reaches the SQLite file, and the next turn says saving works again."""
    data = small_disk / "mia"
    ed = editor_factory(setup=scenario_setup(server, data_dir=str(data)))
    ed.lua("""
      _G.warnings = {}
      local notify = vim.notify
      vim.notify = function(msg, level, o)
        if level == vim.log.levels.WARN then table.insert(warnings, msg) end
        return notify(msg, level, o)
      end
    """)
    prompt(ed, "before the disk fills")
    db = data / "mia.sqlite3"
    assert stored(db) == (["before the disk fills"], 1, 1)
    fill(small_disk)
    # Five prompts, then an answer streamed over about two seconds (saved as it streams).
    sent = [f"while full {i}" for i in range(1, 6)] + ["slow 60 30"]
    for text in sent:
        prompt(ed, text)
        assert text in ed.chat_text()
    assert "w00059" in ed.chat_text()
    warnings = [w for w in ed.lua("return warnings") if "has no price" not in w]  # the unpriced-model note aside
    assert len(warnings) == 1, warnings
    assert "not being saved: the disk holding " + str(db) + " is full" in warnings[0], warnings
    assert "writes it once it can" in warnings[0]
    # Nothing of it reached the file (the disk really was full).
    assert stored(db)[0] == ["before the disk fills"]
    assert "the store cannot be written: not saving: the disk holding" in health(ed)
    (small_disk / "filler").unlink()
    # The kept writes go in on their own, without another prompt (a guard, not a timing).
    deadline = time.monotonic() + 60
    while stored(db)[0] != ["before the disk fills"] + sent:
        assert time.monotonic() < deadline, stored(db)
        time.sleep(0.1)
    assert stored(db) == (["before the disk fills"] + sent, 7, 7)
    with sqlite3.connect(db) as c:
        (answer, state), = c.execute(
            "select parts, state from messages where role = 'assistant' and parts like '%w00000%'"
        ).fetchall()
    assert state == "complete" and text_of(answer).split() == [f"w{i:05d}" for i in range(60)], (state, answer)
    # The next turn says so, once.
    prompt(ed, "after")
    warnings = [w for w in ed.lua("return warnings") if "has no price" not in w]
    assert len(warnings) == 2 and "saving works again" in warnings[1], warnings
    assert stored(db)[1:] == (8, 8)
    text = health(ed)
    assert "cannot be written" not in text and "were not saved" not in text, text


def test_a_hard_limit_holds_while_the_disk_is_full(editor_factory, server, small_disk):
    """The usage rows a full disk keeps out of the file still count: the
    session limit refuses the next request and nothing is sent."""
    data = small_disk / "mia"
    opts = scenario_setup(server, data_dir=str(data), pricing={"scn/echo": {"input": 3.0, "output": 15.0}},
                          costs={"session_limit_usd": 0.000001, "hard_limit": True})
    ed = editor_factory(setup=opts)
    # The store opens (listing sessions reads it) before the disk fills.
    ed.lua("require('mia').sessions.list({})")
    assert (data / "mia.sqlite3").exists()
    fill(small_disk)
    prompt(ed, "echo costs money")
    assert stored(data / "mia.sqlite3")[2] == 0, "the usage row stayed out of the file"
    before = len(posts(server))
    prompt(ed, "echo again", state="error")
    assert len(posts(server)) == before
    assert "costs.session_limit_usd" in ed.chat_text()
