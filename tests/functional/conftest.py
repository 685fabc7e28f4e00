"""Fixtures for mia's functional tests: a real headless Neovim (driven over
RPC by pynvim) with the plugin and its native library loaded, talking real
HTTP over loopback to the project's scenario server."""

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import json
from pathlib import Path

import re

import pynvim
import pytest

FOOTER = re.compile(r"\n\n── [^\n]* ──(?=\n|$)")

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "target" / "release" / "libmia_core.so"
SERVER = ROOT / "scripts" / "scenario_server.py"


def nvim_binary() -> str:
    """The Neovim to test with: $MIA_NVIM, the project's venv, then PATH."""
    for candidate in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv" / "bin" / "nvim"), shutil.which("nvim")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.exit("no Neovim found: run scripts/test (it installs one) or set MIA_NVIM", 2)


class ServerForks:
    """This test process's `scenario_server.py --fork`: it forks each test's
    server from an already started Python (~0.2 s of CPU less per server,
    ~600 servers per run)."""

    proc = None

    @classmethod
    def start(cls, args):
        """(pid, port) of a new server with these arguments."""
        if cls.proc is None or cls.proc.poll() is not None:
            cls.proc = subprocess.Popen(
                [sys.executable, str(SERVER), "--fork"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                # Its own session: Ctrl-C in the terminal reaches pytest, which
                # ends it by closing its stdin.
                start_new_session=True,
            )
        cls.proc.stdin.write(json.dumps(list(args)) + "\n")
        cls.proc.stdin.flush()
        line = cls.proc.stdout.readline()
        pid, _, rest = line.partition(" ")
        if not rest.startswith("LISTENING "):
            raise RuntimeError(f"scenario server did not start: {line.strip() or 'the forking process ended'}")
        return int(pid), int(rest.split()[1])

    @classmethod
    def close(cls):
        """Ends the forking process (it ends the servers still running)."""
        if cls.proc is not None:
            cls.proc.stdin.close()
            try:
                cls.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                cls.proc.kill()
                cls.proc.wait()
            cls.proc = None


class ScenarioServer:
    """The project's scenario server, a process of its own on 127.0.0.1."""

    def __init__(self, extra_args=()):
        pid, self.port = ServerForks.start(extra_args)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        # The server is the forking process's child, not ours: it is
        # signalled and awaited through a pidfd, which names that process
        # alone even once its pid is free again.
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already gone
            self.pid = self.pidfd = None
        except OSError:  # no pidfds here (Linux < 5.3): by pid, see stop()
            self.pidfd = None

    def requests(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_requests", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.pidfd is None:
            if self.pid is not None:
                self._stop_by_pid()
            return
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    signal.pidfd_send_signal(self.pidfd, sig)
                except ProcessLookupError:
                    return
                if select.select([self.pidfd], [], [], 10)[0]:
                    return
        finally:
            os.close(self.pidfd)
            self.pidfd = None

    def _stop_by_pid(self):
        """Without a pidfd: the forking process reaps its servers as they
        end, so the pid is ours until it is gone."""
        pid, self.pid = self.pid, None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.01)


@pytest.fixture(scope="session", autouse=True)
def server_forks():
    yield
    ServerForks.close()


@pytest.fixture
def server():
    s = ScenarioServer()
    yield s
    s.stop()


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Editor:
    """A headless Neovim child with mia on its runtimepath."""

    def __init__(self, tmp_path: Path, env=None, setup=None):
        self.home = tmp_path
        base_env = {
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
        base_env.update(env or {})
        argv = ["env", *[f"{k}={v}" for k, v in base_env.items()], nvim_binary(), "--embed", "--headless", "--clean",
                "--cmd", f"set rtp^={ROOT}", "--cmd", "set shortmess+=I"]
        self.nvim = pynvim.attach("child", argv=argv)
        self.pid = self.nvim.call("getpid")
        if setup is not None:
            self.lua("require('mia').setup(...)", setup)

    def lua(self, code: str, *args):
        return self.nvim.exec_lua(code, *args)

    def wait(self, condition: str, timeout_ms: int = 30000):
        """Runs Neovim's own loop until the Lua expression is true (a guard, not a timing assertion).

        Waits in short slices, returning to Neovim's main loop between them:
        `vim.wait` runs events but never reads typed keys, so one long wait
        right after `nvim_input` could hold the keys back until it ends."""
        deadline = time.monotonic() + timeout_ms / 1000
        check = f"return vim.wait(50, function() return {condition} end, 5)"
        ok = self.lua(check)
        while not ok and time.monotonic() < deadline:
            ok = self.lua(check)
        assert ok, f"timed out waiting for: {condition}\nchat:\n{self.chat_text()}\nmessages:\n{self.messages()}"

    def chat_text(self, footers: bool = False) -> str:
        """The chat buffer's text; the cost footer after each answer is left
        out unless `footers` (its figures depend on prompt sizes; tests of
        the footer read it whole)."""
        text = self.lua(
            "local c = package.loaded['mia.chat']; if not c then return '' end "
            "return table.concat(vim.api.nvim_buf_get_lines(c.buffer(), 0, -1, false), '\\n')"
        )
        return text if footers else FOOTER.sub("", text)

    def messages(self) -> str:
        return self.lua("return vim.api.nvim_exec2('messages', { output = true }).output")

    def state(self) -> str:
        return self.lua("return require('mia.chat').state()")

    def close(self):
        try:
            self.nvim.close()
        except Exception:
            pass
        # Closing the channel makes Neovim quit (VimLeavePre ends the runtime and
        # the agents it started); a Neovim still there after 2 s is killed.
        for _ in range(200):
            try:
                if "\nState:\tZ" in Path(f"/proc/{self.pid}/status").read_text():
                    break
            except OSError:  # gone, or being reaped while we read
                break
            time.sleep(0.01)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextlib.contextmanager
def mcp_http_server(program):
    """An MCP server program that serves streamable HTTP on $PORT (like
    server-everything's `streamableHttp`), on a free loopback port: its URL."""
    port = free_port()
    proc = subprocess.Popen([str(program), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def process_running(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its parent has not looked)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        # Gone before or while /proc was read.
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def quit_editor(ed):
    """The user quits with :qa! (VimLeavePre runs), and Neovim is gone."""
    ed.nvim.input(":qa!<CR>")
    for _ in range(500):
        if not process_running(ed.pid):
            break
        time.sleep(0.01)
    ed.close()


def kill_neovim_and_wait_for(ed, pids):
    """SIGKILLs `ed`'s Neovim, as an OOM killer or a crash would (it gets no
    chance to end anything), then waits (bounded) for `pids` to end; the
    ones still running."""
    os.kill(ed.pid, signal.SIGKILL)
    deadline = time.monotonic() + 15  # a guard against hanging, not a timing assertion
    while any(process_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if process_running(p)]


def tool_results(server):
    """The tool results each chat request carried (OpenAI wire format)."""
    out = []
    for r in server.requests():
        if r["method"] == "POST" and r["body"]:
            out.append([m for m in r["body"]["messages"] if m["role"] == "tool"])
    return out


def scenario_setup(server: ScenarioServer, **extra):
    opts = {
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
        # quick, deterministic retries: 10 ms then 20 ms
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
    }
    opts.update(extra)
    return opts


@pytest.fixture
def editor_factory(tmp_path):
    editors = []

    def make(name="nvim", **kwargs):
        e = Editor(tmp_path / name, **kwargs)
        editors.append(e)
        return e

    yield make
    for e in editors:
        e.close()


@pytest.fixture
def editor(editor_factory, server):
    if not LIB.exists():
        pytest.fail(f"{LIB} is missing: build it with `cargo build --release` (scripts/test does)")
    return editor_factory(setup=scenario_setup(server))


# Test keys for the formats that need one (the scenario server accepts any).
KEYS = {"MIA_TEST_ANTHROPIC_KEY": "ak-test-secret-0123456789", "MIA_TEST_GEMINI_KEY": "gk-test-secret-0123456789"}


def provider_config(fmt, server):
    """A provider of wire format `fmt` ("openai", "anthropic", "gemini", "ollama") at the scenario server."""
    root = f"http://127.0.0.1:{server.port}"
    return {
        "openai": {"kind": "openai_compatible", "base_url": root + "/v1"},
        "anthropic": {"kind": "anthropic", "base_url": root, "api_key_env": "MIA_TEST_ANTHROPIC_KEY"},
        "gemini": {"kind": "gemini", "base_url": root + "/v1beta", "api_key_env": "MIA_TEST_GEMINI_KEY"},
        "ollama": {"kind": "ollama", "base_url": root},
    }[fmt]


@pytest.fixture
def data_home(tmp_path):
    """One XDG_DATA_HOME that several Neovims share (the same store file)."""
    d = tmp_path / "shared-data"
    d.mkdir()
    return d
