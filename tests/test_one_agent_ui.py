"""Issue 46: the Lua side renders updates and sends what the user typed; it
does not ask which kind of agent it talks to. The chat, slash, sessions and
API modules hold no branch on `agents.external()` (the core's `agent_*`
functions take either kind)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["lua/mia/api.lua", "lua/mia/chat.lua", "lua/mia/slash.lua", "lua/mia/sessions.lua"]


def test_the_ui_modules_do_not_branch_on_the_kind_of_agent():
    found = []
    for name in MODULES:
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            code = line.split("--", 1)[0]
            if re.search(r"\bexternal\s*\(", code):
                found.append(f"{name}:{n}: {line.strip()}")
    assert not found, "a branch on the agent's kind:\n" + "\n".join(found)
