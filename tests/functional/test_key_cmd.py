"""Keys from a command (`api_key_cmd`, a password manager): run in the
background, cached for the process, read again once when the provider
refuses the key, never logged or stored, and run away from the project's
files and the other providers' keys."""

import os
from pathlib import Path

from conftest import scenario_setup

OLD, NEW = "sk-old-key-0000aaaa", "sk-new-key-1111bbbb"
OTHER = "sk-other-provider-secret-9999"


def key_program(bin_dir: Path, runs: Path, keys):
    """`keycmd`: prints keys[n] on its n-th run (the last one after), plus a
    line of metadata as `pass show` does; records its runs, cwd and env."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "keycmd"
    lines = "\n".join(keys)
    program.write_text(f"""#!/bin/sh
n=$(cat '{runs}' 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > '{runs}'
pwd > '{runs}.cwd'
env > '{runs}.env'
key=$(printf '%s\\n' '{lines}' | sed -n "${{n}}p")
[ -n "$key" ] || key=$(printf '%s\\n' '{lines}' | tail -n 1)
printf '%s\\nurl: example\\n' "$key"
""")
    program.chmod(0o755)
    return program


def make_editor(editor_factory, server, tmp_path, keys):
    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    key_program(bin_dir, runs, keys)
    project = tmp_path / "project"
    project.mkdir()
    # A project that plants its own `keycmd`, with "." early in PATH.
    planted = project / "keycmd"
    planted.write_text(f"#!/bin/sh\necho planted > '{tmp_path}/planted-ran'\necho sk-planted\n")
    planted.chmod(0o755)
    env = {"PATH": f".:{bin_dir}:{os.environ['PATH']}", "OPENAI_API_KEY": OTHER, "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    opts = scenario_setup(server, model="kc/echo", providers={
        "kc": {"kind": "openai_compatible", "base_url": server.base_url, "api_key_cmd": ["keycmd", "show", "kc"]}})
    ed = editor_factory(env=env, setup=opts)
    ed.lua("vim.cmd.cd(...)", str(project))
    return ed, runs


def prompt(ed, text, state="done"):
    ed.nvim.command("Mia prompt " + text)
    ed.wait(f"require('mia.chat').state() == '{state}'")


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def files_holding(root: Path, secrets):
    """Files under `root` whose bytes hold one of `secrets`."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found


def test_a_refused_key_is_read_again_from_the_command_once_then_cached(editor_factory, server, tmp_path):
    ed, runs = make_editor(editor_factory, server, tmp_path, [OLD, NEW])
    prompt(ed, "needkey " + NEW)  # the server refuses OLD once
    assert ed.chat_text().endswith("ok"), ed.chat_text()
    assert runs.read_text().strip() == "2"
    assert len(posts(server)) == 2
    prompt(ed, "echo cached")
    assert runs.read_text().strip() == "2"  # cached for the process
    # Run in the home directory, not the project; the planted program never ran;
    # other providers' keys are not inherited.
    assert Path(runs.with_suffix(".cwd").read_text().strip()) == tmp_path / "home"
    assert not (tmp_path / "planted-ran").exists()
    assert OTHER not in runs.with_suffix(".env").read_text()
    # The command's keys reach no log, store or message (NEW is in the
    # prompt, so the store holds it as the user's words).
    assert OLD not in ed.messages() and NEW not in ed.messages()
    assert files_holding(ed.home, [OLD]) == []
    assert files_holding(ed.home / "state", [NEW]) == []


def test_a_key_refused_again_after_reading_it_again_names_both_sources(editor_factory, server, tmp_path):
    ed, runs = make_editor(editor_factory, server, tmp_path, [OLD])
    prompt(ed, "badkey", state="error")
    text = ed.chat_text()
    assert "(auth_failure)" in text, text
    assert "the key `keycmd show kc` prints (providers.kc.api_key_cmd)" in text, text
    assert "providers.kc.api_key_env" in text, text
    assert OLD not in text
    assert runs.read_text().strip() == "2"  # read again once
    assert len(posts(server)) == 1  # the same key is not sent twice
