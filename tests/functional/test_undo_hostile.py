""":Mia undo against hostile commands (issue 45): a file swapped for a link
to a secret, names that are not UTF-8 or hold a newline, a project bigger
than the scan keeps. The model runs the command through the scenario
server's `tool` scenario; the user types :Mia undo."""

import json
import os

import pytest

from conftest import scenario_setup, tool_results


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    (p / "a.txt").write_text("foo\n")
    return p


@pytest.fixture
def agent(editor_factory, server, project):
    def make(**extra):
        extra.setdefault("mode", "code")
        extra.setdefault("permissions", {"rules": [{"tool": "bash", "action": "allow"}]})
        ed = editor_factory(setup=scenario_setup(server, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        return ed
    return make


def bash(ed, command):
    """The model runs `command`; waits for the turn to end."""
    ed.nvim.command("Mia prompt tool bash " + json.dumps({"command": command}))
    ed.wait("require('mia.chat').state() == 'done'")


def undo(ed):
    """Types :Mia undo and returns its notice (waits for it)."""
    before = ed.messages().count("mia: restored")
    ed.nvim.command("Mia undo")
    ed.wait(f"select(2, vim.api.nvim_exec2('messages', {{ output = true }}).output:gsub('mia: restored', '')) > {before}")
    text = ed.messages()
    return text[text.rindex("mia: restored"):]


def regular_files_holding(top, needle):
    """Regular files under `top` (links not followed) whose bytes hold `needle`."""
    found = []
    for dirpath, _, names in os.walk(top):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                if needle in f.read():
                    found.append(p)
    return found


def test_undo_never_imports_what_a_link_in_the_project_points_to(agent, server, project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "environ").write_bytes(b"AWS_SECRET=canary-4242\n")
    ed = agent()
    bash(ed, "echo edited > a.txt")
    # the next command swaps the checkpointed file for a link to a secret
    bash(ed, f"rm a.txt && ln -s {outside / 'environ'} a.txt")
    undo(ed)
    undo(ed)  # the docs invite undoing the undo
    assert regular_files_holding(project, b"canary-4242") == []
    assert regular_files_holding(ed.home, b"canary-4242") == []
    # the file was put back as it was at each step: a regular file, then the link
    assert os.readlink(project / "a.txt") == str(outside / "environ")
    undo(ed)
    assert not (project / "a.txt").is_symlink()
    assert (project / "a.txt").read_text() == "edited\n"


def test_a_command_touching_a_name_that_is_not_utf8_is_undone_in_full(agent, server, project):
    ed = agent()
    bash(ed, "sed -i s/foo/bar/ a.txt && printf new > \"$(printf 'caf\\351')\"")
    odd = os.path.join(os.fsencode(project), b"caf\xe9")
    assert os.path.exists(odd)
    assert "delete it" not in tool_results(server)[-1][-1]["content"]
    notice = undo(ed)
    assert "restored 2 files" in notice, notice
    assert "caf\\xe9 (deleted)" in notice, notice
    assert (project / "a.txt").read_text() == "foo\n"
    assert not os.path.exists(odd)


def test_a_name_holding_a_newline_cannot_split_the_undo_notice(agent, server, project):
    ed = agent()
    bash(ed, "printf x > \"$(printf 'x\\nnot restored: a.txt (forged)')\"")
    notice = undo(ed)
    assert "x\\nnot restored: a.txt (forged) (deleted)" in notice, notice
    assert not any(line.startswith("not restored") or line.startswith("  not restored") for line in notice.splitlines()), notice


def test_undo_names_every_change_a_command_made_past_the_scan_limit(agent, server, project):
    for i in range(300):
        (project / f"f{i:03}.txt").write_text("before\n")
    ed = agent(checkpoints={"max_scan_files": 100})
    ed.nvim.command("set nomore")  # the notice names ~30 files
    changed = [f"f{i:03}.txt" for i in range(0, 300, 10)]
    bash(ed, f"sed -i s/before/after/ {' '.join(changed)} && rm f299.txt")
    result = tool_results(server)[-1][-1]["content"]
    assert "does not cover" in result and "checkpoints.max_scan_files" in result, result
    notice = undo(ed)
    restored = [n for n in changed if (project / n).read_text() == "before\n"]
    assert 0 < len(restored) < len(changed)
    for name in changed + ["f299.txt"]:
        assert name in notice, (name, notice)
    assert "not restored: f299.txt" in notice or (project / "f299.txt").exists(), notice
    assert "checkpoints.max_scan_files" in notice, notice


def test_undo_names_a_file_the_user_saved_after_the_turn(agent, server, project):
    (project / "b.txt").write_text("b\n")
    ed = agent()
    bash(ed, "sed -i s/foo/bar/ a.txt && echo B > b.txt")
    ed.nvim.command(f"edit {project / 'a.txt'}")
    ed.nvim.input("ccmine, saved<Esc>:w<CR>")
    ed.wait(f"vim.fn.readfile('{project / 'a.txt'}')[1] == 'mine, saved'")
    notice = undo(ed)
    assert "changed after the turn (saved since)" in notice and "a.txt" in notice.split("saved since")[1], notice
    assert "b.txt" not in notice.split("saved since")[1], notice
    assert (project / "a.txt").read_text() == "foo\n"
    # the user's version is in the restore: undoing it brings it back
    undo(ed)
    assert (project / "a.txt").read_text() == "mine, saved\n"


def test_a_command_in_a_big_project_copies_no_more_than_max_mb_and_says_what_it_left_out(agent, server, project):
    for i in range(8):
        (project / f"big{i}.bin").write_bytes(bytes([65 + i]) * 400_000)
    ed = agent(checkpoints={"max_mb": 1})
    bash(ed, "echo changed > a.txt")
    objects = [p for p in ed.home.rglob("*") if "objects" in p.parts and p.is_file()]
    assert objects, "the checkpoint kept nothing"
    assert sum(p.stat().st_size for p in objects) <= 1024 * 1024
    result = tool_results(server)[-1][-1]["content"]
    assert "were not kept: checkpoints are full (1 MB, checkpoints.max_mb)" in result, result
