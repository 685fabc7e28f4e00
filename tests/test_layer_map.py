"""CONTRIBUTING.md's layer map says which of mia's crates names which; the
crates' manifests are what the compiler enforces. This keeps the two the
same: an edge added to a manifest without the map (or the other way round)
fails here."""

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manifest_edges():
    """{crate: {crates it names}} among the workspace's members, from cargo."""
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    ours = {p["name"] for p in meta["packages"]}
    return {p["name"]: {d["name"] for d in p["dependencies"] if d["name"] in ours and d["kind"] is None}
            for p in meta["packages"]}


def documented_edges():
    """The "Edges" paragraph of CONTRIBUTING.md: `a → b, c` items, the
    `mia-` prefix left out after the arrow, then "x, y and z name no mia crate"."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    para = re.search(r"^Edges \(.*?(?=\n\n)", text, re.S | re.M)
    assert para, "CONTRIBUTING.md has no paragraph starting with 'Edges ('"
    para = " ".join(para.group(0).split()).split("):", 1)[1]  # after the legend
    out = {}
    for a, bs in re.findall(r"`([\w-]+) → ([^`]*)`", para):
        out[name(a)] = {name(b.strip()) for b in bs.split(",")}
    leaves = re.search(r"\. ([^.]*) name no mia crate", para)
    assert leaves, "the Edges paragraph ends with the crates that name no mia crate"
    for leaf in re.findall(r"`([\w-]+)`", leaves.group(1)):
        out[name(leaf)] = set()
    return out


def name(short):
    return short if short in ("mia",) or short.startswith("mia-") else f"mia-{short}"


def test_the_layer_map_in_contributing_is_the_crates_manifests():
    assert documented_edges() == manifest_edges()
