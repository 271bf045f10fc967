"""A package's source distribution from PyPI: downloaded once (sha256 checked), cached, extracted.

The sdist, not a wheel, because only sdists ship a package's test suite. The index is PyPI's JSON API
(``https://pypi.org/pypi/NAME/json``, its ``releases``; mirrors may lack the per-version page; ``$FIREFLASH_PYPI_URL`` points elsewhere); the files are
cached under ``$FIREFLASH_CACHE/swe/sdists/`` so everything after the first download is offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

from fireflash.protocols import cache_root

PYPI_URL = "https://pypi.org/pypi"


class SdistError(RuntimeError):
    """No usable sdist for a package version; the message names the package, what failed and the fix."""


def swe_cache() -> Path:
    """``$FIREFLASH_CACHE/swe``: sdists, package images' build contexts, recorded suites, mutation results."""
    return cache_root() / "swe"


def fetch_sdist(name: str, version: str, timeout_sec: float = 120.0) -> Path:
    """The ``.tar.gz`` sdist of ``name==version``, from the cache or downloaded now (sha256 checked).

    Raises:
        SdistError: the index cannot be reached, the version has no ``.tar.gz`` sdist, or the digest differs.
    """
    target_dir = swe_cache() / "sdists"
    found = sorted(target_dir.glob(f"{_normal(name)}-{version}.tar.gz"))
    if found:
        return found[0]
    base = os.environ.get("FIREFLASH_PYPI_URL", PYPI_URL).rstrip("/")
    url = f"{base}/{name}/json"
    try:
        with urllib.request.urlopen(url, timeout=timeout_sec) as response:
            meta = json.load(response)
    except OSError as e:
        raise SdistError(f"{name}=={version}: cannot read {url} ({e}); check the name, the pinned version and "
                         "that PyPI is reachable (or set FIREFLASH_PYPI_URL)") from e
    sdists = [u for u in meta.get("releases", {}).get(version, []) if u.get("packagetype") == "sdist" and u["filename"].endswith(".tar.gz")]
    if not sdists:
        raise SdistError(f"{name}=={version}: PyPI lists no .tar.gz sdist; pick a version that ships one")
    entry = sdists[0]
    data = _download(urllib.parse.urljoin(url, entry["url"]), timeout_sec, name, version)
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["digests"]["sha256"]:
        raise SdistError(f"{name}=={version}: {entry['filename']} has sha256 {digest}, PyPI says "
                         f"{entry['digests']['sha256']}; retry the download")
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / f"{_normal(name)}-{version}.tar.gz"
    part = path.with_suffix(".part")
    part.write_bytes(data)
    part.rename(path)
    return path


def extract_sdist(sdist: Path, dest: Path) -> Path:
    """Extract ``sdist`` into ``dest`` (replaced) and return the source tree (the archive's single top folder).

    Raises:
        SdistError: the archive has no single top-level folder.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")  # "data" refuses absolute paths, links out of dest and devices
    tops = [p for p in dest.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise SdistError(f"{sdist}: expected one top-level folder, found {[p.name for p in tops]}")
    return tops[0]


def _download(url: str, timeout_sec: float, name: str, version: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout_sec) as response:
            return response.read()
    except OSError as e:
        raise SdistError(f"{name}=={version}: cannot download {url} ({e}); retry, or check that PyPI is reachable") from e


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")
