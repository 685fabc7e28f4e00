"""Rules that nothing gets past: every spelling of a denied path, every form
of a compound shell command, Lua tools that declare their subject, the
editor tools outside the project, rules validated in setup(), and a corrupt
permissions.json — in a real Neovim, through the agent loop, against the
scenario server."""

import json
import os
import stat

import pytest

from conftest import scenario_setup

SECRET = "TOPSECRET-7f3a"


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "secrets").mkdir(parents=True)
    (p / "src").mkdir()
    (p / "secrets" / "k").write_text(SECRET + "\n")
    (p / "src" / "main.rs").write_text("fn main() {}\n")
    os.symlink("secrets/k", p / "innocent.txt")
    return p


@pytest.fixture
def agent(editor_factory, server, project):
    def make(**extra):
        ed = editor_factory(setup=scenario_setup(server, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        # Every question is recorded and rejected unless a test says otherwise.
        ed.lua("""
          _G.asked = {}
          _G.answer = 3
          vim.ui.select = function(items, opts, cb)
            table.insert(asked, opts.prompt)
            cb(items[answer], answer)
          end
        """)
        return ed
    return make


def last_tool_result(server):
    for r in reversed(server.requests()):
        if r["method"] == "POST" and r["body"]:
            tools = [m for m in r["body"]["messages"] if m["role"] == "tool"]
            if tools:
                return tools[-1]["content"]
    return None


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def tool_call(ed, name, args):
    prompt(ed, f"tool {name} {json.dumps(args)}")


def no_secret_sent(server):
    bodies = json.dumps([r["body"] for r in server.requests()])
    return SECRET not in bodies


def path_spellings(project):
    return [
        "secrets/k",
        "./secrets/k",
        "secrets//k",
        "src/../secrets/k",
        "secrets/./k",
        str(project / "secrets" / "k"),
        str(project / "src" / ".." / "secrets" / "k"),
        "innocent.txt",  # a link to secrets/k
    ]


def test_every_spelling_of_a_denied_path_is_refused(agent, server, project):
    ed = agent(permissions={"rules": [{"tool": "read_file", "pattern": "secrets/**", "action": "deny"}]})
    for spelling in path_spellings(project):
        tool_call(ed, "read_file", {"path": spelling})
        result = last_tool_result(server)
        assert result.startswith("Permission denied (denied by the rule `read_file` on `secrets/**`)"), (spelling, result)
    assert no_secret_sent(server)
    # an allowed file in the same project still reads
    tool_call(ed, "read_file", {"path": "./src/main.rs"})
    assert "fn main() {}" in last_tool_result(server)


def test_a_search_never_reads_a_file_denied_by_name(agent, server, project):
    ed = agent(permissions={"rules": [{"tool": "*", "pattern": "secrets/**", "action": "deny"}]})
    tool_call(ed, "grep", {"pattern": "TOPSECRET"})
    tool_call(ed, "grep", {"pattern": "TOPSECRET", "path": "."})
    tool_call(ed, "glob", {"pattern": "**/k"})
    tool_call(ed, "list_dir", {"path": "secrets"})
    assert "Permission denied" in last_tool_result(server)
    assert no_secret_sent(server)
    assert "secrets/k" not in json.dumps([r["body"] for r in server.requests()])


def test_paths_outside_the_project_stay_refused_unless_a_rule_allows_them(agent, server, project, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-content\n")
    ed = agent()
    tool_call(ed, "read_file", {"path": "../outside.txt"})
    assert "outside the project root" in last_tool_result(server)
    assert "outside-content" not in json.dumps([r["body"] for r in server.requests()])
    ed2 = agent(permissions={"rules": [{"tool": "read_file", "pattern": str(tmp_path / "*.txt"), "action": "allow"}]})
    tool_call(ed2, "read_file", {"path": str(outside)})
    assert "outside-content" in last_tool_result(server)


def test_lua_tools_declare_their_subject_and_get_the_same_rules(agent, server, project, tmp_path):
    (tmp_path / "elsewhere.txt").write_text("elsewhere\n")
    ed = agent(permissions={"rules": [{"tool": "*", "pattern": "secrets/**", "action": "deny"}]})
    ed.lua("""
      _G.ran = {}
      local function reader(name, subject)
        require('mia').register_tool({
          name = name, description = 'reads a file', subject = subject,
          parameters = { type = 'object', properties = { file = { type = 'string' } }, required = { 'file' } },
          execute = function(args, ctx)
            table.insert(ran, args.file)
            local f = assert(io.open(ctx.subject.path)); local text = f:read('*a'); f:close()
            return text
          end,
        })
      end
      reader('peek', { path = 'file' })
      reader('peek_fn', function(args) return { path = args.file } end)
    """)
    for tool in ("peek", "peek_fn"):
        for spelling in ["./secrets/k", "src/../secrets/k", str(project / "secrets" / "k"), "innocent.txt"]:
            tool_call(ed, tool, {"file": spelling})
            assert last_tool_result(server).startswith("Permission denied"), (tool, spelling)
        tool_call(ed, tool, {"file": "../elsewhere.txt"})
        assert "outside the project root" in last_tool_result(server)
        tool_call(ed, tool, {"file": "./src/../src/main.rs"})
        assert "fn main() {}" in last_tool_result(server)
    assert ed.lua("return ran") == ["./src/../src/main.rs", "./src/../src/main.rs"]
    assert no_secret_sent(server)


def test_editor_tools_ask_before_touching_a_buffer_outside_the_project(agent, server, project, tmp_path):
    outside = tmp_path / "notes.txt"
    outside.write_text("private notes\n")
    ed = agent()
    ed.nvim.command(f"edit {outside}")
    ed.nvim.command(f"edit {project / 'src' / 'main.rs'}")
    tool_call(ed, "read_buffer", {"path": str(outside)})
    assert ed.lua("return #asked") == 1
    assert "read_buffer" in ed.lua("return asked[1]")
    assert "private notes" not in json.dumps([r["body"] for r in server.requests()])
    tool_call(ed, "read_buffer", {"path": "./src/main.rs"})
    assert ed.lua("return #asked") == 1, "a buffer inside the project is read without asking"
    assert "fn main() {}" in last_tool_result(server)
    ed.lua("_G.answer = 1")
    tool_call(ed, "read_buffer", {"path": str(outside)})
    assert ed.lua("return #asked") == 2
    assert "private notes" in last_tool_result(server)


COMPOUND_FORMS = [
    "git status; touch x",
    "git status | tee x",
    "git status $(touch x)",
    "git status\ntouch x",
    "git status `touch x`",
    "git status > x",
    "git status && touch x",
    "git status || touch x",
    "git status & touch x",
    "git status >> x",
    'git status "$(touch x)"',
    "git status <(touch x)",
    "(git status; touch x)",
]


def test_compound_commands_ask_and_rejected_ones_leave_no_trace(agent, server, project):
    ed = agent(permissions={"rules": [{"tool": "bash", "pattern": "git status*", "action": "allow"}]})
    tool_call(ed, "bash", {"command": "git status"})
    assert ed.lua("return #asked") == 0, "the allowed command itself runs without asking"
    for i, form in enumerate(COMPOUND_FORMS, start=1):
        tool_call(ed, "bash", {"command": form})
        assert ed.lua("return #asked") == i, form
        assert "rejected" in last_tool_result(server), form
        assert not (project / "x").exists(), form
        assert "mia wants to run `bash`" in ed.lua(f"return asked[{i}]")


def test_allow_always_remembers_the_exact_command_only(agent, server, project):
    ed = agent()
    ed.lua("_G.answer = 2")
    tool_call(ed, "bash", {"command": "echo one*"})
    assert ed.lua("return #asked") == 1
    tool_call(ed, "bash", {"command": "echo one*"})
    assert ed.lua("return #asked") == 1, "the same command is remembered"
    ed.lua("_G.answer = 3")
    tool_call(ed, "bash", {"command": "echo one; touch x"})
    tool_call(ed, "bash", {"command": "echo onetwo"})
    assert ed.lua("return #asked") == 3, "remembered commands match literally, never as globs"
    assert not (project / "x").exists()
    saved = json.loads((ed.home / "data" / "nvim" / "mia" / "permissions.json").read_text())
    assert saved["projects"][str(project.resolve())] == [{"tool": "bash", "pattern": "echo one*", "action": "allow"}]


@pytest.mark.parametrize("rule,message", [
    ({"tool": "read_file", "pattern": "secrets/[", "action": "deny"}, "`permissions.rules[1].pattern` is not a valid glob: unclosed character class"),
    ({"tool": "read_file", "pattern": "{a,b", "action": "deny"}, "`permissions.rules[1].pattern` is not a valid glob: unclosed alternate group"),
    ({"tool": "read_*[", "action": "deny"}, "`permissions.rules[1].tool` is not a valid glob: unclosed character class"),
    ({"tool": "raed_file", "pattern": "secrets/**", "action": "deny"}, '`permissions.rules[1].tool` names no known tool (did you mean "read_file"?)'),
    ({"tool": "read_file", "pattern": "secrets/**", "action": "block"}, '`permissions.rules[1].action` must be "allow", "ask" or "deny"'),
    ({"tool": "read_file", "patern": "secrets/**", "action": "deny"}, "`permissions.rules[1].patern` is not a rule key"),
    ({"tool": "read_file", "action": "deny", "mode": "cod"}, "`permissions.rules[1].mode` is not a mode"),
])
def test_setup_rejects_a_broken_rule_naming_it(editor_factory, server, rule, message):
    ed = editor_factory()
    ok, err = ed.lua("return { pcall(require('mia').setup, ...) }", scenario_setup(server, permissions={"rules": [rule]}))
    assert not ok
    assert message in err, err


GLOB_CORPUS = ["{a,{b}}", "{{a}", "a{}", "{,}", "[a-a]", "[\\]]", "[!a-c]", "[^]", "\\{", "\\}", "}", "secrets/[", "[]", "[]]", "[!]]", "a[b-a]", "a[a-b]", "{a,b}", "{a,{b}}", "a}", "{a", "x\\", "x\\[",
               "**", "a/**/b", "a**", "**a", "[a-]", "[-a]", "*.{rs,toml}", "?", "[[]", "a[]b"]


def test_setup_and_the_core_agree_on_every_glob(editor_factory, server):
    """The Lua check in setup() and the core's compiler judge the same patterns the same way."""
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua("require('mia')._core()")
    for pattern in GLOB_CORPUS:
        lua_problem = ed.lua("return require('mia.rules').glob_problem(...)", pattern)
        core = ed.lua("""
          local core = require('mia.core').get()
          local ok, err = pcall(core.configure_agent, { permissions = { rules = { { tool = 'bash', pattern = ..., action = 'deny' } } } })
          return { ok, err and tostring(err) }
        """, pattern)
        assert (lua_problem is None) == core[0], (pattern, lua_problem, core)


def test_builtin_tool_names_known_to_setup_match_the_core(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua("require('mia')._core()")
    core = sorted(t["name"] for t in ed.lua("return require('mia.tools').list()"))
    known = sorted(ed.lua("return require('mia.rules').builtin_tools"))
    assert known == core


def test_a_corrupt_permissions_file_is_reported_once_and_kept_aside(agent, server, project):
    ed = agent()
    data = ed.home / "data" / "nvim" / "mia"
    data.mkdir(parents=True, exist_ok=True)
    (data / "permissions.json").write_bytes(b'{"projects": {broken')
    ed.lua("""
      _G.warnings = {}
      local notify = vim.notify
      vim.notify = function(msg, level, o) if level == vim.log.levels.WARN then table.insert(warnings, msg) end; return notify(msg, level, o) end
    """)
    prompt(ed, "echo hello")
    ed.wait("#warnings > 0")
    warnings = [w for w in ed.lua("return warnings") if "has no price" not in w]  # the unpriced-model note aside
    assert len(warnings) == 1 and "permissions.json" in warnings[0] and "corrupt" in warnings[0], warnings
    assert (data / "permissions.json.bak").read_bytes() == b'{"projects": {broken'
    ed.lua("_G.answer = 2")
    tool_call(ed, "bash", {"command": "echo remembered"})
    assert len([w for w in ed.lua("return warnings") if "has no price" not in w]) == 1, "reported once"
    saved = json.loads((data / "permissions.json").read_text())
    assert saved["projects"][str(project.resolve())][0]["pattern"] == "echo remembered"
    assert (data / "permissions.json.bak").read_bytes() == b'{"projects": {broken'


def test_a_pipe_in_place_of_the_permissions_file_neither_holds_the_turn_nor_is_replaced(agent, server, project):
    """Another process puts a FIFO where permissions.json goes: reading it
    would wait for a writer that never comes. The turn is answered, says
    why remembered answers are not used, asks again, and leaves the FIFO."""
    ed = agent()
    data = ed.home / "data" / "nvim" / "mia"
    data.mkdir(parents=True, exist_ok=True)
    fifo = data / "permissions.json"
    os.mkfifo(fifo)
    ed.lua("""
      _G.warnings = {}
      local notify = vim.notify
      vim.notify = function(msg, level, o) if level == vim.log.levels.WARN then table.insert(warnings, msg) end; return notify(msg, level, o) end
    """)
    prompt(ed, "echo hello")
    assert "hello" in ed.chat_text()
    warnings = [w for w in ed.lua("return warnings") if "has no price" not in w]  # the unpriced-model note aside
    assert len(warnings) == 1 and str(fifo) in warnings[0] and "not a regular file" in warnings[0], warnings
    ed.lua("_G.answer = 2")
    tool_call(ed, "bash", {"command": "echo remembered"})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "left as it was"
