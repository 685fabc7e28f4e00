"""Project rules files (issue 14's first part): read at every turn, put in
the system prompt, named in the chat, bounded and kept inside the project;
in a real headless Neovim against the scenario server."""

import json

import pytest

from conftest import scenario_setup


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "src" / "deep").mkdir(parents=True)
    return p


def system_of_last_request(server):
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    return next(m["content"] for m in bodies[-1]["messages"] if m["role"] == "system")


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def start(editor_factory, server, project, **extra):
    ed = editor_factory(setup=scenario_setup(server, **extra))
    ed.lua("vim.cmd.cd(...)", str(project))
    return ed


def test_rules_apply_by_path_show_in_the_chat_and_edits_count_next_turn(editor_factory, server, project, tmp_path):
    (project / "AGENTS.md").write_text("Always answer in French.\n")
    (project / "src" / "AGENTS.md").write_text("Use tabs in src.\n")
    (project / "src" / "deep" / "main.rs").write_text("fn main() {}\n")
    (project / ".cursor" / "rules").mkdir(parents=True)
    (project / ".cursor" / "rules" / "rust.mdc").write_text("---\nglobs: *.rs\nalwaysApply: false\n---\nNo unwrap.\n")
    (project / ".cursor" / "rules" / "py.mdc").write_text("---\nglobs: *.py\n---\nUse black.\n")
    (tmp_path / "outside.md").write_text("OUTSIDE SECRET\n")
    (project / "CLAUDE.md").symlink_to(tmp_path / "outside.md")
    ed = start(editor_factory, server, project)
    # The file being discussed is the one the user edits.
    ed.nvim.command(f"edit {project / 'src' / 'deep' / 'main.rs'}")
    prompt(ed, "hello")
    system = system_of_last_request(server)
    assert "Always answer in French." in system and "Use tabs in src." in system and "No unwrap." in system
    assert "Use black." not in system and "OUTSIDE SECRET" not in system
    assert "_rules: AGENTS.md, src/AGENTS.md, .cursor/rules/rust.mdc_" in ed.chat_text()
    # An edit counts from the next turn; a removed file no longer applies.
    (project / "AGENTS.md").write_text("Always answer in German.\n")
    (project / "src" / "AGENTS.md").unlink()
    prompt(ed, "again")
    system = system_of_last_request(server)
    assert "German" in system and "French" not in system and "Use tabs" not in system
    assert ed.chat_text().rstrip().count("_rules: AGENTS.md, .cursor/rules/rust.mdc_") == 1
    # A resumed session shows which rules each turn applied.
    ed.close()
    again = start(editor_factory, server, project)
    (info,) = again.lua("return require('mia').sessions.list({ cwd = vim.fn.getcwd() })")["sessions"]
    again.lua("require('mia').sessions.load(...)", info["sessionId"])
    text = again.chat_text()
    assert "_rules: AGENTS.md, src/AGENTS.md, .cursor/rules/rust.mdc_" in text, text
    assert "_rules: AGENTS.md, .cursor/rules/rust.mdc_" in text, text


def test_rules_can_be_configured_cut_and_turned_off(editor_factory, server, project, tmp_path):
    (project / "AGENTS.md").write_text("x" * 5000)
    (project / "TEAM.md").write_text("Team rule.\n")
    user = tmp_path / "my-rules.md"
    user.write_text("My own rule.\n")
    ed = start(editor_factory, server, project, rules={"files": ["AGENTS.md", "TEAM.md"], "user_file": str(user), "max_kb": 1})
    prompt(ed, "hello")
    system = system_of_last_request(server)
    assert "My own rule." in system and "Team rule." in system
    assert "x" * 1024 in system and "x" * 1025 not in system
    assert "cut here: 1024 of its 5000 bytes are sent" in system
    assert "_rules: your rules, AGENTS.md, TEAM.md_" in ed.chat_text()
    ed.lua("require('mia').setup(...)", scenario_setup(server, rules=False))
    prompt(ed, "again")
    assert "Team rule." not in system_of_last_request(server)


def test_a_denied_rules_file_is_not_sent_and_bad_options_are_refused(editor_factory, server, project):
    (project / "AGENTS.md").write_text("secret rules\n")
    ed = start(editor_factory, server, project,
               permissions={"rules": [{"tool": "read_file", "pattern": "AGENTS.md", "action": "deny"}]})
    prompt(ed, "hello")
    assert "secret rules" not in system_of_last_request(server)
    assert "_rules:" not in ed.chat_text()
    err = ed.lua("return select(2, pcall(require('mia').setup, { rules = { files = { '../x.md' } } }))")
    assert "rules.files[1]" in err and "inside the project" in err, err
    err = ed.lua("return select(2, pcall(require('mia').setup, { rules = { max_kb = 0 } }))")
    assert "rules.max_kb" in err, err
