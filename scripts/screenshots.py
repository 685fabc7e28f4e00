#!/usr/bin/env python3
"""Makes the README's pictures from real runs, so that they can be made again
whenever the UI changes:

    .venv/bin/python scripts/screenshots.py [OUTDIR]     (default doc/images)

Neovim with mia (scripts/demo_init.lua, this checkout's library from
`cargo build --release`) runs in a tmux window against the offline scenario
server; keys are typed into it as a user would, and each picture is the
window captured with its colours (`tmux capture-pane -e`) and turned into SVG
by scripts/ansi_svg.py:

  chat.svg     an answer streamed into the chat, with its cost footer
  review.svg   an edit the model proposes, shown as a diff before it lands
  costs.svg    :MiaCosts
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from ansi_svg import svg  # noqa: E402

COLS, ROWS = 112, 34


def nvim_binary():
    venv = ROOT / ".venv" / "bin" / "nvim"
    return os.environ.get("MIA_NVIM") or (str(venv) if venv.exists() else "nvim")


class Window:
    def __init__(self, name, command, env):
        self.name = name
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(COLS), "-y", str(ROWS),
                        "env", *[f"{k}={v}" for k, v in env.items()], *command], check=True)

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def screen(self, colours=False):
        args = ["tmux", "capture-pane", "-p", "-t", self.name] + (["-e"] if colours else [])
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout

    def wait_for(self, text, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.screen():
                time.sleep(0.3)  # the last redraw
                return
            time.sleep(0.1)
        raise SystemExit(f"screenshots: `{text}` never showed; the screen was:\n{self.screen()}")

    def command(self, text):
        self.keys("Escape", ":" + text, "Enter")

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "doc" / "images"
    out.mkdir(parents=True, exist_ok=True)
    if not (ROOT / "target" / "release" / "libmia_core.so").exists():
        raise SystemExit("screenshots: build the library first (cargo build --release)")
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "scenario_server.py")],
                              stdout=subprocess.PIPE, text=True)
    tmp = Path(tempfile.mkdtemp(prefix="mia-shots-"))
    project = tmp / "project"
    project.mkdir()
    (project / "greet.py").write_text('def greet(name):\n    return "Hello " + name\n\n\nprint(greet("world"))\n')
    window = None
    try:
        port = int(server.stdout.readline().split()[1])
        env = {
            "MIA_DEMO_ROOT": str(ROOT),
            "MIA_DEMO_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "XDG_DATA_HOME": str(tmp / "data"),
            "XDG_STATE_HOME": str(tmp / "state"),
            "XDG_CONFIG_HOME": str(tmp / "config"),
            "TERM": "xterm-256color",
            "COLORTERM": "truecolor",
        }
        window = Window(f"mia-shots-{os.getpid()}", [nvim_binary(), "-u", str(ROOT / "scripts" / "demo_init.lua"),
                                                      "--cmd", f"cd {project}", "+set termguicolors",
                                                      str(project / "greet.py")], env)
        window.wait_for("mia demo")
        window.command("Mia prompt echo mia streams this answer off the main thread, so typing never waits; "
                       "every answer ends with what it cost, and the statusline keeps the session total.")
        window.wait_for("── ")
        (out / "chat.svg").write_text(svg(window.screen(colours=True), COLS))

        window.command('Mia prompt tool edit_file {"path": "greet.py", "old_string": "\\"Hello \\" + name", '
                       '"new_string": "f\\"Hello, {name}!\\""}')
        window.wait_for("Hello, {name}!")
        (out / "review.svg").write_text(svg(window.screen(colours=True), COLS))
        window.keys("Escape")
        window.command("Mia stop")

        window.command("MiaCosts")
        window.wait_for("$")
        time.sleep(0.5)
        (out / "costs.svg").write_text(svg(window.screen(colours=True), COLS))
    finally:
        if window:
            window.close()
        server.terminate()
        server.wait(timeout=10)
    for name in ("chat.svg", "review.svg", "costs.svg"):
        print(out / name)


if __name__ == "__main__":
    main()
