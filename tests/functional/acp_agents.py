"""The pinned ACP counterparts (tests/acp, installed by scripts/bootstrap) and
how to run them offline: the SDK's example agent and claude-agent-acp against
the scenario server, driven by tests/acp/sdk_client.mjs (the SDK's own
client).  Shared by tests/functional/test_acp_counterparts.py and
benches/acp_sdk_baseline.py; mia's chat tests can take the commands and
the environment from here too."""

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACP = ROOT / "tests" / "acp"
MODULES = ACP / "node_modules"
SDK_CLIENT = ACP / "sdk_client.mjs"
EXAMPLE_AGENT = MODULES / "acp-sdk-0.17" / "dist" / "examples" / "agent.js"
CLAUDE_AGENT = MODULES / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"


GEMINI_CLI = MODULES / "@google" / "gemini-cli" / "bundle" / "gemini.js"
CODEX_ACP = MODULES / "@zed-industries" / "codex-acp-linux-x64" / "bin" / "codex-acp"
GEMINI_MODEL = "gemini-2.5-flash"
CODEX_MODEL = "gpt-5.4-mini"


def node():
    """The node binary, or None."""
    return shutil.which("node")


def codex_missing():
    """Why codex-acp cannot run here, or None."""
    if not CODEX_ACP.exists():
        return f"{CODEX_ACP.relative_to(ROOT)} is missing: run scripts/bootstrap (it installs tests/acp)"
    if not shutil.which("bwrap"):
        return "bubblewrap (bwrap) is not installed: Codex's sandbox needs it (scripts/bootstrap installs it)"
    return None


def missing():
    """Why the counterparts cannot run here (a message naming the fix), or None."""
    if not node():
        return "node is not installed: the ACP counterpart tests need node (and npm for scripts/bootstrap)"
    for path in (EXAMPLE_AGENT, CLAUDE_AGENT):
        if not path.exists():
            return f"{path.relative_to(ROOT)} is missing: run scripts/bootstrap (it installs tests/acp)"
    return None


def example_agent_command():
    return [node(), str(EXAMPLE_AGENT)]


def claude_agent_command():
    return [node(), str(CLAUDE_AGENT)]


def claude_env(port, home):
    """What claude-agent-acp 0.23.1 needs to run offline against the scenario
    server on `port`: any key, no nonessential traffic (no telemetry, update
    or title requests), a throwaway HOME (it writes ~/.claude), and
    IS_SANDBOX=1 because its bundled CLI refuses to run as root without it
    (session/new then fails with "Query closed before response received")."""
    Path(home).mkdir(parents=True, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "ANTHROPIC_API_KEY": "sk-test-anything",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "HOME": str(home),
        "IS_SANDBOX": "1",
    }


class Run:
    """One sdk_client.mjs run: its JSON lines, by event."""

    def __init__(self, lines, returncode, stderr):
        self.lines, self.returncode, self.stderr = lines, returncode, stderr
        self.summary = next((x for x in reversed(lines) if x["event"] == "summary"), None)

    def events(self, name):
        return [x for x in self.lines if x["event"] == name]

    @property
    def turns(self):
        return self.summary["turns"] if self.summary else []

    @property
    def timings(self):
        return self.summary["timings"] if self.summary else {}

    def explain(self):
        """Everything needed to see why a run failed, for assertion messages."""
        return json.dumps(self.lines, indent=1)[-6000:] + "\n--- stderr ---\n" + self.stderr[-4000:]


def run_sdk_client(command, prompts, cwd, env=None, permission="allow_once", timeout_s=120,
                   stderr_file=None, quiet=False):
    """Drive `command` with the SDK's ClientSideConnection through
    initialize -> session/new -> session/prompt for each of `prompts`."""
    opts = {"command": [str(c) for c in command], "env": env or {}, "cwd": str(cwd),
            "prompts": prompts, "permission": permission, "timeoutMs": int(timeout_s * 1000),
            "quiet": quiet}
    if stderr_file:
        opts["stderrFile"] = str(stderr_file)
    proc = subprocess.run([node(), str(SDK_CLIENT), json.dumps(opts)], capture_output=True,
                          text=True, timeout=timeout_s + 15, cwd=str(cwd),
                          env={k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC")})
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Run(lines, proc.returncode, proc.stderr)


def gemini_command():
    return [node(), str(GEMINI_CLI), "--acp"]


def gemini_env(port, home):
    """What Gemini CLI 0.61.0 needs to run offline against the scenario
    server on `port`: a throwaway HOME whose ~/.gemini/settings.json picks
    the API key login and the model and turns off telemetry, usage
    statistics, update checks and folder trust; any key; the scenario server
    as Gemini's API (GOOGLE_GEMINI_BASE_URL)."""
    home = Path(home)
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "model": {"name": GEMINI_MODEL},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=1))
    return {
        "HOME": str(home),
        "GEMINI_API_KEY": "test-gemini-key",
        "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}",
    }


def codex_command():
    return [str(CODEX_ACP)]


def codex_env(port, base):
    """What codex-acp 0.16.0 needs to run offline against the scenario
    server on `port`: a throwaway CODEX_HOME (under `base`) whose
    config.toml names a provider with the scenario server's /v1 as its
    base_url, a key variable and the Responses API, asks on request and
    keeps the sandbox read-only (so an edit asks too); any key. TMPDIR is
    moved beside CODEX_HOME: Codex refuses to put its sandbox helper links in
    a CODEX_HOME under the temporary directory, and its sandbox needs them
    (and bubblewrap, `bwrap`)."""
    base = Path(base)
    home, tmp = base / "codex-home", base / "codex-tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"""model = "{CODEX_MODEL}"
model_provider = "scn"
approval_policy = "on-request"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.scn]
name = "scenario server"
base_url = "http://127.0.0.1:{port}/v1"
env_key = "SCN_CODEX_KEY"
wire_api = "responses"
""")
    return {"CODEX_HOME": str(home), "HOME": str(home), "TMPDIR": str(tmp), "SCN_CODEX_KEY": "test-codex-key"}
