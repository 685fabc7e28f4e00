"""Installing without a toolchain (build.lua, :Mia install; :h mia-install):
a loopback HTTP mirror serves a release folder that scripts/dist built in
this run (scripts/test passes it as MIA_TEST_DIST; without it the session
builds one), and a fresh copy of the plugin (no target/) with cargo removed
from PATH downloads, verifies and installs it. Damaged, tampered or
unreachable releases are refused with one message, and the library
installed before keeps loading."""

import hashlib
import http.server
import os
import platform
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from pynvim.api.common import NvimError

from conftest import ROOT, nvim_binary, scenario_setup

VERSION = "0.1.0"
TAG = f"v{VERSION}"
ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(platform.machine())
ASSET = f"mia-{TAG}-{ARCH}-linux-gnu.tar.gz"

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or ARCH is None, reason="the install tests serve Linux archives")


@pytest.fixture(scope="session")
def release(tmp_path_factory):
    """The folder scripts/dist built: MIA_TEST_DIST, else built now (this
    machine's architecture only)."""
    given = os.environ.get("MIA_TEST_DIST")
    if given:
        out = Path(given)
    else:
        out = tmp_path_factory.mktemp("dist")
        subprocess.run([str(ROOT / "scripts" / "dist"), str(out)], check=True,
                       env={**os.environ, "MIA_DIST_TARGETS": f"{ARCH}-linux-gnu"})
    assert (out / TAG / ASSET).exists(), f"scripts/dist built no {ASSET} in {out}"
    assert (out / "test-pubkey").exists(), "the release folder was not signed with a throwaway key"
    return out


class Mirror:
    """A static HTTP server on 127.0.0.1 over a folder, with faults for
    files by name: "404", "500", "stall" (headers and a few bytes, then
    nothing), "truncate" (half the bytes under the full Content-Length),
    "gate" (waits for `release_gate` before serving)."""

    def __init__(self, folder: Path, faults=None):
        self.folder = folder
        self.faults = faults or {}
        self.done = threading.Event()
        self.gate = threading.Event()
        self.requests = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(folder), **kw)

            def log_message(self, *a):
                pass

            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                mirror.requests.append(self.path)
                fault = mirror.faults.get(name)
                if fault in ("404", "500"):
                    self.send_error(int(fault))
                    return
                if fault == "gate":
                    mirror.gate.wait(60)
                if fault in ("stall", "truncate"):
                    data = (folder / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if fault == "stall":
                        self.wfile.write(data[:100])
                        self.wfile.flush()
                        mirror.done.wait(60)
                    else:
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                    self.close_connection = True
                    return
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.done.set()
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def mirror(release, tmp_path):
    """mirror(faults) -> a Mirror over a copy of the release folder (tests tamper with the copy)."""
    made = []

    def make(faults=None):
        folder = tmp_path / f"mirror{len(made)}"
        shutil.copytree(release, folder)
        m = Mirror(folder, faults)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def fresh_tree(dest: Path) -> Path:
    """The plugin as a fresh clone has it: the files git tracks (and new
    ones not ignored), as they are in the worktree; no target/ or lib/."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.split(b"\0")
    for rel in filter(None, listed):
        src = ROOT / os.fsdecode(rel)
        if src.is_file():
            (dest / os.fsdecode(rel)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(rel))
    assert not (dest / "target").exists() and not (dest / "lib").exists()
    return dest


def path_without_cargo() -> str:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "cargo").exists()]
    return os.pathsep.join(dirs)


def install_env(m: Mirror, home: Path, cargo=False, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MIA_CORE_PATH", "MIA_RELEASE_URL", "MIA_RELEASE_PUBKEY", "CARGO_TARGET_DIR")}
    env.update({
        "MIA_RELEASE_URL": m.url,
        "MIA_RELEASE_PUBKEY": str(m.folder / "test-pubkey"),
        "MIA_INSTALL_STALL_SECONDS": "2",
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
    })
    if not cargo:
        env["PATH"] = path_without_cargo()
    env.update(extra)
    return env


def build_lua(plugin: Path, m: Mirror, cargo=False, timeout=120, **extra):
    """`nvim --headless -l build.lua` at the plugin's root."""
    return subprocess.run([nvim_binary(), "--headless", "-l", "build.lua"], cwd=plugin, capture_output=True, text=True,
                          env=install_env(m, plugin.parent / "home", cargo, **extra), timeout=timeout)


def lib_files(plugin: Path) -> dict:
    """Every file under lib/ with its SHA-256."""
    lib = plugin / "lib"
    return {str(p.relative_to(lib)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(lib.rglob("*")) if p.is_file()}


def editor_on(plugin: Path, editor_factory, server, **env):
    """A Neovim with this copy of the plugin (not the worktree) on its runtimepath."""
    ed = editor_factory(setup=None, env={"MIA_CORE_PATH": "", "PATH": path_without_cargo(), **env})
    ed.lua("vim.opt.rtp:remove(...); vim.opt.rtp:prepend(select(2, ...))", str(ROOT), str(plugin))
    ed.lua("for k in pairs(package.loaded) do if k:match('^mia') then package.loaded[k] = nil end end")
    ed.lua("require('mia').setup(...)", scenario_setup(server))
    return ed


def answers(ed, words: str):
    ed.nvim.command(f"Mia prompt echo {words}")
    ed.wait("require('mia.chat').state() == 'done'")
    assert words in ed.chat_text()


def test_build_lua_downloads_verifies_and_installs_without_cargo_then_mia_answers(mirror, tmp_path, editor_factory, server):
    plugin = fresh_tree(tmp_path / "mia")
    m = mirror()
    r = build_lua(plugin, m)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(f"mia: installed downloaded v{VERSION}, verified"), r.stdout
    assert f"/{TAG}/{ASSET}" in m.requests and f"/{TAG}/SHA256SUMS.sig" in m.requests
    assert set(lib_files(plugin)) == {"libmia_core.so", "mia-acp", "mia-install.json"}
    assert not (plugin / "target").exists()

    ed = editor_on(plugin, editor_factory, server)
    answers(ed, "from the downloaded library")
    assert ed.lua("return require('mia.core').lib_path()") == str(plugin / "lib" / "libmia_core.so")
    ed.nvim.command("checkhealth mia")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    assert (f"installed: downloaded v{VERSION}, verified (SHA-256 and the release's signature); "
            f"target {ARCH}-linux-gnu, needs glibc ≥ 2.") in report
    acp = plugin / "lib" / "mia-acp"
    assert f"{acp}, version {VERSION}: an ACP client starts it" in report


def test_mia_install_downloads_in_the_background_then_mia_answers(mirror, tmp_path, editor_factory, server):
    plugin = fresh_tree(tmp_path / "mia")
    m = mirror({ASSET: "gate"})
    env = {k: v for k, v in install_env(m, tmp_path / "home").items() if k.startswith("MIA_")}
    env["MIA_INSTALL_STALL_SECONDS"] = "60"  # the held download must not count as a stall
    ed = editor_on(plugin, editor_factory, server, **env)
    assert "install" in ed.lua("return vim.fn.getcompletion('Mia ', 'cmdline')")
    ed.nvim.command("Mia install")
    # The archive's download is held at the mirror: the editor still answers.
    ed.wait("require('mia.install').running")
    assert ed.lua("return 1 + 1") == 2
    assert not (plugin / "lib" / "libmia_core.so").exists()
    m.gate.set()
    ed.wait("not require('mia.install').running")
    assert f"mia: installed downloaded v{VERSION}, verified" in ed.messages()
    answers(ed, "right after the install")


@pytest.fixture(scope="session")
def installed(release, tmp_path_factory):
    """A fresh tree with a library installed by build.lua (copied by each test)."""
    plugin = fresh_tree(tmp_path_factory.mktemp("installed") / "mia")
    folder = tmp_path_factory.mktemp("mirror")
    shutil.copytree(release, folder, dirs_exist_ok=True)
    m = Mirror(folder)
    try:
        r = build_lua(plugin, m)
    finally:
        m.close()
    assert r.returncode == 0, r.stderr
    return plugin


def flip_a_byte(f: Path):
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


def rewrite_sums_for_tampered_archive(folder: Path):
    """The attacker who controls the host changes the archive and its checksum."""
    archive = folder / TAG / ASSET
    flip_a_byte(archive)
    sums = folder / TAG / "SHA256SUMS"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    lines = [f"{digest}  {ASSET}" if line.endswith(ASSET) else line for line in sums.read_text().splitlines()]
    sums.write_text("\n".join(lines) + "\n")


def sign_with_another_key(folder: Path):
    key = folder / "other-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "not-the-release", "-f", str(key)], check=True)
    sig = folder / TAG / "SHA256SUMS.sig"
    sig.unlink()
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "mia-release", str(folder / TAG / "SHA256SUMS")],
                   check=True, capture_output=True)


REFUSALS = {
    "tampered_library": (lambda f: flip_a_byte(f / TAG / ASSET), {},
                         f"{ASSET} does not match the release's checksum"),
    "tampered_checksums": (rewrite_sums_for_tampered_archive, {},
                           "the checksums file's signature does not verify against the release key"),
    "bad_signature": (sign_with_another_key, {},
                      "the checksums file's signature does not verify against the release key"),
    "truncated_download": (None, {ASSET: "truncate"}, f"downloading {{url}}/{TAG}/{ASSET} failed: "),
    "not_found": (None, {ASSET: "404"}, f"downloading {{url}}/{TAG}/{ASSET} failed: The requested URL returned error: 404"),
    "server_error": (None, {"SHA256SUMS": "500"}, f"downloading {{url}}/{TAG}/SHA256SUMS failed: The requested URL returned error: 500"),
    "stalled_server": (None, {ASSET: "stall"}, f"downloading {{url}}/{TAG}/{ASSET} failed: no data for 2 s"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_bad_release_is_refused_with_one_message_and_the_previous_library_still_loads(
        case, installed, mirror, tmp_path, editor_factory, server):
    plugin = tmp_path / "mia"
    shutil.copytree(installed, plugin)
    before = lib_files(plugin)
    tamper, faults, cause = REFUSALS[case]
    m = mirror(faults)
    if tamper:
        tamper(m.folder)
    r = build_lua(plugin, m)
    assert r.returncode != 0
    said = [line for line in r.stderr.splitlines() if line.startswith("mia: could not install")]
    assert len(said) == 1, r.stderr
    msg = said[0]
    assert msg.startswith(f"mia: could not install the native library v{VERSION}: " + cause.format(url=m.url)), msg
    assert "Nothing was installed; the library in use (if any) is unchanged." in msg
    assert "`:Mia install`" in msg and "https://rustup.rs" in msg
    assert "Building from source" not in msg  # no cargo on PATH
    assert lib_files(plugin) == before, "something of the refused release was installed"
    assert not any(p.name.startswith(".install-") for p in (plugin / "lib").iterdir())
    ed = editor_on(plugin, editor_factory, server)
    answers(ed, f"still here after {case}")


def test_a_lua_error_through_the_downloaded_library_is_an_error_not_a_crash(installed, tmp_path, editor_factory, server):
    """zig links its own libunwind statically unless told otherwise; LuaJIT
    raises errors with the system's unwinder, and the two crashed Neovim."""
    plugin = tmp_path / "mia"
    shutil.copytree(installed, plugin)
    ed = editor_on(plugin, editor_factory, server)
    # Checked by the library: its error is raised from Rust through LuaJIT.
    with pytest.raises(NvimError, match=r"a message needs `content`"):
        ed.lua("require('mia').stream({ messages = { { role = 'user' } } }, {})")
    assert ed.lua("return require('mia.core').lib_path()") == str(plugin / "lib" / "libmia_core.so")


def test_with_cargo_a_missing_artifact_falls_back_to_a_source_build(mirror, tmp_path, editor_factory, server):
    """Expensive: cargo builds mia's crate in the fresh tree. Its
    dependencies come from a copy of the worktree's target/release (built by
    the Rust tests with the same profile), so only mia's crate compiles."""
    plugin = fresh_tree(tmp_path / "mia")
    target = tmp_path / "cargo-target"
    for part in ("build", ".fingerprint"):
        shutil.copytree(ROOT / "target" / "release" / part, target / "release" / part, symlinks=True)
    (target / "release" / "deps").mkdir()
    for f in (ROOT / "target" / "release" / "deps").iterdir():
        if f.name.startswith(("lib", "mia")) and not f.name.startswith("libmia") and f.is_file():
            shutil.copy2(f, target / "release" / "deps" / f.name)
    m = mirror({ASSET: "404"})
    r = build_lua(plugin, m, cargo=True, timeout=1800, CARGO_TARGET_DIR=str(target))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(f"mia: installed built from source (v{VERSION}) on this machine"), r.stdout
    assert "returned error: 404; falling back to a source build" in r.stderr
    assert (target / "release" / "libmia_core.so").exists()
    ed = editor_on(plugin, editor_factory, server)
    answers(ed, "from the source build")
    ed.nvim.command("checkhealth mia")
    report = ed.lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
    assert f"installed: built from source (v{VERSION}) on this machine" in report
    assert "the download had failed: downloading" in report
