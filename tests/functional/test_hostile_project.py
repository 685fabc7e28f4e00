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


def test_a_bash_command_cannot_read_a_provider_key_from_its_environment(agent, server, project):
    key, openai = "scn-secret-key-0123456789", "sk-openai-secret-9876543210"
    ed = agent(mode="code", env={"MIA_TEST_SCN_KEY": key, "OPENAI_API_KEY": openai},
               providers={"scn": {"kind": "openai_compatible", "base_url": server.base_url,
                                  "api_key_env": "MIA_TEST_SCN_KEY"}},
               permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    call(ed, "bash", {"command": "printenv MIA_TEST_SCN_KEY | rev; printenv OPENAI_API_KEY | base64; echo ran"})
    done(ed)
    result = last_result(server)
    assert "ran" in result, result
    sent = json.dumps([r["body"] for r in server.requests()])
    for leak in (key, key[::-1], openai, base64.b64encode(openai.encode()).decode()[:20]):
        assert leak not in sent, leak


def test_mia_acp_asks_before_git_config_and_hides_its_key_variables_from_commands(tmp_path, server, project):
    from test_mia_acp import BIN, ROOT, SDKS, acp_config, need_binary
    import shutil
    node = shutil.which("node")
    if node is None or not (SDKS["2"] / "package.json").exists():
        pytest.skip("node or the pinned ACP SDK 2 is missing: run scripts/bootstrap")
    need_binary()
    key, openai = "acp-secret-key-0123456789", "sk-openai-secret-9876543210"
    # Unsandboxed, so that code mode asks about the command (in the sandbox it would not: :h mia-sandbox).
    config = acp_config(tmp_path, server, sandbox={"mode": "off"}, providers={
        "scn": {"kind": "openai_compatible", "base_url": server.base_url, "api_key_env": "MIA_TEST_ACP_KEY"}})
    before = (project / ".git" / "config").read_bytes()
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"),
               MIA_TEST_ACP_KEY=key, OPENAI_API_KEY=openai)
    r = subprocess.run([node, str(ROOT / "tests" / "acp" / "mia_acp_hostile.mjs"), str(SDKS["2"]), str(BIN),
                        str(config), str(project)], capture_output=True, text=True, timeout=180, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ALL OK"), out
    result = last_result(server)
    assert "ran" in result and "HOME=" in result, result
    sent = json.dumps([r["body"] for r in server.requests()])
    for leak in ("MIA_TEST_ACP_KEY", "OPENAI_API_KEY", key, openai):
        assert leak not in sent, leak
    assert (project / ".git" / "config").read_bytes() == before


def test_an_external_agents_terminal_does_not_inherit_the_provider_key_variables(editor_factory, tmp_path):
    from test_acp_client import EXAMPLE, NODE, agent_editor, tool_agent, type_prompt
    if NODE is None or not EXAMPLE.exists():
        pytest.skip("node or tests/acp/node_modules is missing: run scripts/bootstrap")
    openai = "sk-openai-secret-9876543210"
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    # The variable is in Neovim's environment, as when it is started with the key exported.
    ed.lua("vim.env.OPENAI_API_KEY = ...", openai)
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "terminal printenv OPENAI_API_KEY | rev; echo ran$((1+1))")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    answer = ed.chat_text().split("## tools", 1)[1]
    assert "ran2" in answer, answer
    assert openai[::-1] not in answer


def test_mcp_servers_and_agents_get_a_key_variable_only_when_their_config_passes_it(editor_factory, server, tmp_path):
    import time
    from test_acp_client import EXAMPLE, NODE, TOOL_AGENT
    from test_mcp import EVERYTHING
    if NODE is None or not EXAMPLE.exists() or not EVERYTHING.exists():
        pytest.skip("node or the pinned ACP/MCP test packages are missing: run scripts/bootstrap")
    # Written whole, then renamed: the test never reads a file `env` is still writing.
    spy = lambda name, then: ["/bin/sh", "-c", f"env > '{tmp_path}/{name}.part' && mv '{tmp_path}/{name}.part' "  # noqa: E731
                              f"'{tmp_path}/{name}.env'; exec \"$@\"", "sh", *then]
    ed = editor_factory(
        env={"OPENAI_API_KEY": "sk-inherited-openai-0123", "GEMINI_API_KEY": "inherited-gemini-0123"},
        setup=scenario_setup(
            server,
            mcp={"servers": {"spy": {"command": spy("mcp", [str(EVERYTHING), "stdio"]),
                                     "env": {"GEMINI_API_KEY": "given-gemini"}, "timeout_ms": 20000}}},
            agents={"spy": {"command": spy("agent", [NODE, str(TOOL_AGENT)]), "cwd": str(tmp_path),
                            "env": {"GEMINI_API_KEY": "given-gemini"}}},
        ))
    ed.nvim.command("Mia prompt echo hi")
    done(ed)
    ed.nvim.command("Mia agent spy")
    deadline = time.monotonic() + 30  # a guard against hanging, not a timing assertion
    while not all((tmp_path / f"{n}.env").exists() for n in ("mcp", "agent")) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in ("mcp", "agent"):
        env = (tmp_path / f"{name}.env").read_text()
        assert "OPENAI_API_KEY=" not in env, name
        assert "GEMINI_API_KEY=given-gemini\n" in env, name
