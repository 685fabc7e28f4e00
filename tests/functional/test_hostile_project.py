"""A hostile project (issue 45): the model plants a command in a
repository's control files, or reads a provider key from the shell's
environment. Through the paths an attacker takes — the agent loop with the
scenario server's `tool` scenario, `@` typed in the prompt buffer with real
keys, a bash call's checkpoint — in a real headless Neovim."""

import base64
import json
import os
import subprocess

import pytest

from conftest import scenario_setup, tool_results

PLANTED = '[core]\n\tfsmonitor = "touch PWNED; false"\n'


def git(project, *args):
    subprocess.run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "src").mkdir(parents=True)
    (p / "src" / "main.rs").write_text("fn main() {}\n")
    (p / "a.txt").write_text("foo\n")
    git(p, "init", "-q")
    git(p, "add", "-A")
    git(p, "commit", "-qm", "x")
    return p


def plant(project, marker_dir):
    """Config and attributes that make git run `touch <marker_dir>/PWNED-<what>`
    from its fsmonitor, a clean filter (every file) and a textconv."""
    touch = lambda what: f"touch '{marker_dir}/PWNED-{what}'; false"  # noqa: E731
    with open(project / ".git" / "config", "a") as f:
        f.write(f'[core]\n\tfsmonitor = "{touch("fsmonitor")}"\n'
                f'[filter "evil"]\n\tclean = "{touch("filter")}"\n'
                f'[diff "evil"]\n\ttextconv = "{touch("textconv")}"\n')
    (project / ".git" / "info").mkdir(exist_ok=True)
    (project / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")


def pwned(marker_dir):
    return sorted(p.name for p in marker_dir.iterdir() if p.name.startswith("PWNED"))


@pytest.fixture
def agent(editor_factory, server, project):
    def make(env=None, **extra):
        ed = editor_factory(env=env, setup=scenario_setup(server, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        # Every plain question is recorded and rejected (the third option).
        ed.lua("""
          _G.asked = {}
          vim.ui.select = function(items, opts, cb)
            table.insert(asked, opts.prompt)
            cb(items[3], 3)
          end
        """)
        return ed
    return make


def call(ed, tool, args):
    ed.nvim.command(f"Mia prompt tool {tool} {json.dumps(args)}")


def done(ed):
    ed.wait("require('mia.chat').state() == 'done'")


def review_lines(ed):
    ed.wait("require('mia.review').showing_lines() ~= nil")
    return ed.lua("return require('mia.review').showing_lines()")


def last_result(server):
    return tool_results(server)[-1][-1]["content"]


def test_in_code_mode_every_spelling_of_a_write_to_git_config_is_reviewed_and_a_rejection_leaves_it(
        agent, server, project):
    os.symlink(".git", project / "innocent")
    before = (project / ".git" / "config").read_bytes()
    ed = agent(mode="code")
    for spelling in [".git/config", "./.git/config", "src/../.git/config", ".git//config",
                     str(project / ".git" / "config"), "innocent/config"]:
        call(ed, "write_file", {"path": spelling, "content": PLANTED})
        lines = review_lines(ed)
        assert lines[0] == ".git/config", (spelling, lines)
        ed.nvim.input("r")
        ed.nvim.input("no<CR>")
        done(ed)
        assert (project / ".git" / "config").read_bytes() == before, spelling
        assert "rejected" in last_result(server), spelling
    # An ordinary file still lands without a question in code mode.
    call(ed, "write_file", {"path": "b.txt", "content": "ok\n"})
    done(ed)
    assert (project / "b.txt").read_text() == "ok\n"


def test_a_control_file_accepted_for_the_session_is_still_reviewed_each_time(agent, server, project):
    ed = agent(mode="code")
    for n in (1, 2):
        call(ed, "write_file", {"path": ".mia/tools/t.lua", "content": f"return {{}} -- {n}\n"})
        assert review_lines(ed)[0].startswith(".mia/tools/t.lua"), n
        ed.nvim.input("f")  # accept, and edits to this file for the session
        done(ed)
        assert (project / ".mia" / "tools" / "t.lua").read_text() == f"return {{}} -- {n}\n"


def test_a_bash_command_writing_git_config_asks_even_when_bash_is_allowed(agent, server, project):
    before = (project / ".git" / "config").read_bytes()
    ed = agent(mode="code", permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    call(ed, "bash", {"command": "echo '[core] fsmonitor = x' >> .git/config"})
    done(ed)
    assert ed.lua("return #asked") == 1
    assert (project / ".git" / "config").read_bytes() == before
    call(ed, "bash", {"command": "git config core.fsmonitor 'touch PWNED'"})
    done(ed)
    assert ed.lua("return #asked") == 2
    assert (project / ".git" / "config").read_bytes() == before
    call(ed, "bash", {"command": "echo fine"})
    done(ed)
    assert ed.lua("return #asked") == 2 and "fine" in last_result(server)


def test_typing_at_completes_files_without_running_the_repositorys_fsmonitor(editor_factory, server, project,
                                                                          tmp_path):
    plant(project, tmp_path)
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua("vim.cmd.cd(...)", str(project))
    ed.nvim.command("Mia open")
    ed.nvim.input("i@src/ma")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '@src/main.rs')")
    assert pwned(tmp_path) == []


def test_a_bash_calls_checkpoint_scan_runs_no_program_the_repository_names(agent, server, project, tmp_path):
    plant(project, tmp_path)
    # Racily clean: git must hash the content again (through the filter) to know it is unchanged.
    (project / "a.txt").write_text("foo\n")
    ed = agent(mode="code", permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    call(ed, "bash", {"command": "echo hi > b.txt"})
    done(ed)
    assert (project / "b.txt").read_text() == "hi\n"
    assert pwned(tmp_path) == []
