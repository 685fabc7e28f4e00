"""`doc/mia.txt` as Neovim reads it: `:helptags` runs clean on it, and
every `:Mia` subcommand and every `setup()` option has a help tag."""

import re
import shutil

from conftest import ROOT


def test_helptags_run_clean_and_every_command_and_option_has_a_tag(editor_factory, tmp_path):
    doc = tmp_path / "doc"
    doc.mkdir()
    shutil.copy(ROOT / "doc" / "mia.txt", doc / "mia.txt")
    ed = editor_factory()
    ed.lua("vim.v.errmsg = ''")
    ed.nvim.command(f"helptags {doc}")  # raises on a duplicate tag
    assert ed.lua("return vim.v.errmsg") == ""
    tags = {line.split("\t")[0] for line in (doc / "tags").read_text().splitlines()}
    subcommands = ed.lua("return vim.tbl_keys(require('mia.commands').subcommands)")
    missing = [s for s in subcommands if f":Mia-{s}" not in tags]
    assert subcommands and not missing, f"subcommands without a :Mia-NAME tag: {missing}"
    source = (ROOT / "lua" / "mia" / "config.lua").read_text()
    block = source[source.index("--- @class mia.Config\n"):]
    options = re.findall(r"^--- @field (\w+)\??", block.split("\nlocal ", 1)[0], flags=re.M)
    missing = [o for o in options if f"mia-config-{o}" not in tags]
    assert len(options) > 15 and not missing, f"setup() options without a mia-config-NAME tag: {missing}"
    # Every |link| names a tag that exists.
    text = (doc / "mia.txt").read_text()
    links = {link for link in re.findall(r"\|([^|\s]+)\|", text) if not link.startswith('"')}
    builtin = set()
    for tagfile in ed.lua("return vim.fn.globpath(vim.o.runtimepath, 'doc/tags', 0, 1)"):
        with open(tagfile, encoding="utf-8", errors="replace") as f:
            builtin.update(line.split("\t")[0] for line in f)
    dangling = sorted(link for link in links if link not in tags and link not in builtin)
    assert not dangling, f"links to no tag: {dangling}"
