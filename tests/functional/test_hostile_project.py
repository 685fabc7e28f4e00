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
