"""@-mentions and images (issue 14): what a mention attaches reaches the
model's request (read at the scenario server), is drawn as one line in the
chat, is refused by deny rules in every spelling, and is re-sent as a diff
when it changed; typed with real keys in a real headless Neovim."""

import base64
import json
import os
import subprocess

import pytest

from conftest import KEYS, provider_config, scenario_setup

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "src").mkdir(parents=True)
    (p / "src" / "main.rs").write_text("fn main() {\n    println!(\"MAIN_MARKER\");\n}\n")
    (p / "src" / "other.rs").write_text("// other\n")
    (p / "README.md").write_text("readme\n")
    subprocess.run(["git", "init", "-q", str(p)], check=True)
    subprocess.run(["git", "-C", str(p), "add", "-A"], check=True)
    return p


def start(editor_factory, server, project, env=None, **extra):
    ed = editor_factory(env=env, setup=scenario_setup(server, **extra))
    ed.lua("vim.cmd.cd(...)", str(project))
    return ed


def posts(server):
    return [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]


def last_user_text(server):
    """The text of the last user message of the last request (OpenAI format)."""
    for m in reversed(posts(server)[-1]["messages"]):
        if m["role"] == "user":
            c = m["content"]
            return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
    return ""


def you_sections(ed):
    """What the chat shows under each `## You` (up to the answer's header)."""
    out = []
    for part in ed.chat_text().split("## You\n\n")[1:]:
        out.append(part.split("\n## ")[0])
    return out


def send_from_prompt(ed, keys):
    """Types `keys` into the chat's prompt buffer and sends them with <CR>."""
    ed.nvim.command("Mia open")
    ed.nvim.input("i" + keys)
    ed.nvim.input("<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")


def done(ed):
    ed.wait("require('mia.chat').state() == 'done'")


def test_a_mention_sends_exactly_that_file_and_the_chat_shows_one_line(editor_factory, server, project):
    ed = start(editor_factory, server, project)
    send_from_prompt(ed, "explain @src/main.rs please")
    done(ed)
    body = json.dumps(posts(server)[-1])
    assert body.count("MAIN_MARKER") == 1, body
    assert "// other" not in body
    sent = last_user_text(server)
    assert sent.startswith("explain @src/main.rs please"), sent
    assert '<file path="src/main.rs" lines="3">\nfn main() {' in sent
    (you,) = you_sections(ed)
    assert "📎 @src/main.rs (3 lines)" in you, you
    assert "MAIN_MARKER" not in you


def test_a_denied_file_is_refused_in_every_spelling_and_nothing_is_sent(editor_factory, server, project):
    (project / ".env").write_text("API_TOKEN=DENIED_MARKER\n")
    (project / "a").mkdir()
    (project / "envlink").symlink_to(project / ".env")
    ed = start(editor_factory, server, project,
               permissions={"rules": [{"tool": "read_file", "pattern": ".env", "action": "deny"}]})
    spellings = [".env", "./.env", "a/../.env", str(project / ".env"), "envlink"]
    for i, spelling in enumerate(spellings):
        if i == 0:
            send_from_prompt(ed, f"read @{spelling}")
        else:
            ed.nvim.command(f"Mia prompt read @{spelling}")
        ed.wait("require('mia.chat').state() == 'error'")
        shown = ed.chat_text() + ed.messages()
        assert f"@{spelling} is not sent: reading it is denied by the rule `read_file` on `.env`" in shown, shown
        if i == 0:
            # Nothing is lost: the refused text is back in the prompt to fix.
            assert ed.lua("return require('mia.prompt').text()") == "read @.env"
    assert posts(server) == []
    assert "DENIED_MARKER" not in ed.chat_text()


def test_a_changed_file_is_resent_as_a_diff_also_after_resume(editor_factory, server, project):
    lines = [f"line {i}" for i in range(1, 61)]
    target = project / "src" / "big.txt"
    target.write_text("\n".join(lines) + "\n")
    ed = start(editor_factory, server, project)
    ed.nvim.command("Mia prompt look @src/big.txt")
    done(ed)
    assert "line 1\nline 2\n" in last_user_text(server)
    lines[29] = "line thirty CHANGED"
    target.write_text("\n".join(lines) + "\n")
    ed.nvim.command("Mia prompt again @src/big.txt")
    done(ed)
    sent = last_user_text(server)
    assert "@@ -27,7 +27,7 @@" in sent and "-line 30\n+line thirty CHANGED" in sent, sent
    assert "line 1\n" not in sent and "changed_since_turn=\"1\"" in sent
    assert "📎 @src/big.txt (diff since turn 1)" in you_sections(ed)[1]
    ed.nvim.command("Mia prompt same @src/big.txt")
    done(ed)
    assert 'unchanged_since_turn="2"' in last_user_text(server)
    # A resumed session remembers what the model saw.
    ed.close()
    again = start(editor_factory, server, project)
    (info,) = again.lua("return require('mia').sessions.list({ cwd = vim.fn.getcwd() })")["sessions"]
    again.lua("require('mia').sessions.load(...)", info["sessionId"])
    shown = you_sections(again)
    assert "📎 @src/big.txt (60 lines)" in shown[0] and "📎 @src/big.txt (diff since turn 1)" in shown[1], shown
    assert "line 1\nline 2" not in shown[0]
    lines[49] = "line fifty CHANGED"
    target.write_text("\n".join(lines) + "\n")
    again.nvim.command("Mia prompt resumed @src/big.txt")
    done(again)
    sent = last_user_text(server)
    assert "-line 50\n+line fifty CHANGED" in sent and "line 1\n" not in sent, sent
    assert "changed_since_turn=\"2\"" in sent


def completion_words(ed):
    return ed.lua("return vim.tbl_map(function(i) return i.word end, vim.fn.complete_info({ 'items' }).items)")


def test_a_pipe_mentioned_from_the_prompt_is_refused_at_once_and_the_chat_goes_on(editor_factory, server, project):
    """Another process puts a FIFO in the project: opening it to read would
    wait for a writer that never comes. Mentioned from the prompt buffer, it
    is refused at once, naming the cause, and nothing is sent; :Mia stop
    finds no turn held, and the next prompt is answered."""
    os.mkfifo(project / "fifo")
    ed = start(editor_factory, server, project)
    send_from_prompt(ed, "read @fifo please")
    ed.wait("require('mia.chat').state() == 'error'")
    shown = ed.chat_text() + ed.messages()
    assert "@fifo cannot be attached: it is not a regular file (a pipe, device or socket)" in shown, shown
    assert ed.lua("return require('mia.prompt').text()") == "read @fifo please"
    assert posts(server) == []
    ed.nvim.input(":Mia stop<CR>")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('no answer is streaming') ~= nil")
    ed.nvim.command("Mia prompt after the pipe")
    done(ed)
    assert last_user_text(server).startswith("after the pipe")
    assert len(posts(server)) == 1


def test_typing_a_path_completes_the_git_visible_files_fuzzily(editor_factory, server, project):
    (project / ".gitignore").write_text("ignored.rs\n")
    (project / "ignored.rs").write_text("x\n")
    (project / "src" / "untracked_main.rs").write_text("x\n")  # not added, yet visible to git
    ed = start(editor_factory, server, project)
    ed.nvim.command("Mia open")
    ed.nvim.input("i@src/ma")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '@src/main.rs')")
    words = completion_words(ed)
    assert "@src/other.rs" not in words and "@ignored.rs" not in words, words
    # fuzzy: letters in order, not a prefix
    ed.nvim.input("<C-e><C-u>@unmai")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '@src/untracked_main.rs')")
    ed.nvim.input("<C-y>")
    ed.wait("vim.api.nvim_get_current_line() == '@src/untracked_main.rs'")
    # with no MCP server configured, `@` still offers the editor's mentions
    ed.nvim.input("<C-u>@")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '@selection')")
    assert "@diagnostics" in completion_words(ed) and "@buffer" in completion_words(ed)


def test_a_large_file_list_is_matched_in_slices_and_the_menu_follows(editor_factory, server, project):
    for i in range(30):
        (project / "src" / f"gen_{i:02d}.rs").write_text("x\n")
    ed = start(editor_factory, server, project)
    # lists longer than SYNC_MAX are matched across loop turns; 2 makes this small project one
    ed.lua("require('mia.mentions').SYNC_MAX = 2")
    ed.nvim.command("Mia open")
    ed.nvim.input("i@gen_2")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            "vim.fn.complete_info({ 'items' }).items), '@src/gen_27.rs')")
    words = completion_words(ed)
    assert "@src/main.rs" not in words and "@src/gen_07.rs" not in words, words
    ed.nvim.input("<C-y>")
    ed.wait("vim.api.nvim_get_current_line():find('^@src/gen_2%d.rs$') ~= nil")


def test_buffer_selection_and_diagnostics_send_what_the_editor_holds(editor_factory, server, project):
    notes = project / "notes.txt"
    notes.write_text("".join(f"saved {i}\n" for i in range(1, 11)))
    ed = start(editor_factory, server, project)
    ed.nvim.command(f"edit {notes}")
    ed.lua("vim.api.nvim_buf_set_lines(0, 0, 1, false, { 'UNSAVED_EDIT' })")
    send_from_prompt(ed, "echo @buffer")
    done(ed)
    sent = last_user_text(server)
    assert "UNSAVED_EDIT\nsaved 2\n" in sent and 'name="notes.txt"' in sent, sent
    # the last visual selection of the buffer being edited: lines 3-4
    ed.nvim.command("wincmd t")
    ed.nvim.command(f"buffer {notes}")
    ed.nvim.input("3GVj<Esc>")
    ed.wait("vim.api.nvim_buf_get_mark(0, '>')[1] == 4")
    send_from_prompt(ed, "echo @selection")
    done(ed)
    sent = last_user_text(server)
    assert "saved 3\nsaved 4\n" in sent and "saved 5" not in sent and "saved 2" not in sent, sent
    assert "📎 @notes.txt:3-4" in you_sections(ed)[1]
    ed.lua("local b = vim.fn.bufnr(...); local ns = vim.api.nvim_create_namespace('t'); "
           "vim.diagnostic.set(ns, b, { { lnum = 1, col = 2, message = 'DIAG_MARKER', severity = 1, source = 'lint' } })",
           str(notes))
    send_from_prompt(ed, "echo @diagnostics")
    done(ed)
    sent = last_user_text(server)
    assert "2:3: ERROR: DIAG_MARKER [lint]" in sent, sent


FORMATS = ["openai", "anthropic", "gemini"]


def image_of(fmt, body):
    """The base64 image data of the last user message, read the way each wire format carries it."""
    if fmt == "openai":
        user = [m for m in body["messages"] if m["role"] == "user"][-1]
        (url,) = [c["image_url"]["url"] for c in user["content"] if c["type"] == "image_url"]
        assert url.startswith("data:image/png;base64,")
        return url.split(",", 1)[1]
    if fmt == "anthropic":
        user = [m for m in body["messages"] if m["role"] == "user"][-1]
        (src,) = [c["source"] for c in user["content"] if c["type"] == "image"]
        assert src["type"] == "base64" and src["media_type"] == "image/png"
        return src["data"]
    user = [c for c in body["contents"] if c["role"] == "user"][-1]
    (inline,) = [p["inlineData"] for p in user["parts"] if "inlineData" in p]
    assert inline["mimeType"] == "image/png"
    return inline["data"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_image_mention_reaches_each_provider_in_its_own_shape(editor_factory, server, project, fmt):
    (project / "shot.png").write_bytes(PNG)
    ed = editor_factory(env=KEYS, setup={"model": f"{fmt}x/echo",
                                         "providers": {f"{f}x": provider_config(f, server) for f in FORMATS}})
    ed.lua("vim.cmd.cd(...)", str(project))
    ed.nvim.command("Mia prompt what is in @shot.png")
    done(ed)
    assert image_of(fmt, posts(server)[-1]) == PNG_B64
    assert "📎 @shot.png (image/png, 70 bytes)" in you_sections(ed)[0]


def test_a_model_without_images_gets_a_clear_error_and_nothing_is_sent(editor_factory, server, project):
    (project / "shot.png").write_bytes(PNG)
    ed = start(editor_factory, server, project,
               pricing={"scn/echo": {"input": 1, "output": 1, "images": False}})
    ed.nvim.command("Mia prompt what is in @shot.png")
    ed.wait("require('mia.chat').state() == 'error'")
    shown = ed.chat_text() + ed.messages()
    assert "scn/echo does not take images, and this message carries shot.png" in shown, shown
    assert posts(server) == []


def fake_clipboard(tmp_path, script):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("wl-paste", "xclip"):
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + script)
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_mia_paste_attaches_the_clipboards_image_to_the_next_message(editor_factory, server, project, tmp_path):
    (tmp_path / "clip.png").write_bytes(PNG)
    ed = start(editor_factory, server, project, env=fake_clipboard(tmp_path, f"cat '{tmp_path / 'clip.png'}'\n"))
    ed.nvim.command("Mia paste")
    ed.wait("vim.api.nvim_buf_get_lines(require('mia.prompt').buffer(), 0, -1, false)[1] == '@clipboard-1.png '")
    ed.nvim.command("startinsert!")
    ed.nvim.input("describe it<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")
    done(ed)
    assert image_of("openai", posts(server)[-1]) == PNG_B64
    assert "📎 @clipboard-1.png (image/png, 70 bytes)" in you_sections(ed)[0]
    assert "paste" in ed.lua("return vim.fn.getcompletion('Mia pa', 'cmdline')")


def test_mia_paste_says_when_the_clipboard_holds_no_image(editor_factory, server, project, tmp_path):
    env = fake_clipboard(tmp_path, "echo 'Error: target image/png not available' >&2\nexit 1\n")
    ed = start(editor_factory, server, project, env=env)
    ed.nvim.command("Mia paste")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('clipboard holds no image', 1, true) ~= nil")
    assert "target image/png not available" in ed.messages()


def test_a_folder_mention_sends_a_listing_without_denied_entries(editor_factory, server, project):
    (project / "src" / "secret.key").write_text("k\n")
    ed = start(editor_factory, server, project,
               permissions={"rules": [{"tool": "list_dir", "pattern": "**/*.key", "action": "deny"}]})
    ed.nvim.command("Mia prompt what is in @src/")
    done(ed)
    sent = last_user_text(server)
    assert '<folder path="src" entries="2">\nsrc/main.rs\nsrc/other.rs\n</folder>' in sent, sent
    assert "📎 @src/ (2 entries)" in you_sections(ed)[0]


def test_checkhealth_names_the_clipboard_tool(editor_factory, server, project, tmp_path):
    ed = start(editor_factory, server, project, env=fake_clipboard(tmp_path, "exit 0\n"))
    ed.nvim.command("checkhealth mia")
    report = "\n".join(ed.nvim.current.buffer[:])
    assert ":Mia paste reads images from the clipboard with wl-paste" in report, report
