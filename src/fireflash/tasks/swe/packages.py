"""The PyPI packages SWE tasks are generated from: pinned, pure Python, their sdist shipping a test suite.

How the defaults were chosen (2026-12-03, this 2-core box shared with other builds, load 3-20): each
candidate's sdist downloaded (``sdist.fetch_sdist``), its suite run with pytest 8 on Python 3.11 from the
source tree (``PYTHONPATH`` at ``source_root``, ``-o addopts=``), then again in the package's image by
``fireflash tasks generate swe`` (``tests`` and ``suite_sec`` below are that in-image baseline: tests passing
twice, one run's seconds, under load 15-20 on 2 cores; each package's image built in 6-12 s on the cached
python:3.11 base, the two baseline runs 13-41 s). Left out: more-itertools 11.2.1 (21,194 subtests, 191 s),
idna 3.20 (6,441 tests, 120 s), sortedcontainers 2.4.0 (its sdist ships no tests), humanize 4.17.0 (freezegun), jmespath
1.1.0 (its tests import a ``tests`` package the sdist lacks), natsort 8.4.0 and python-dateutil 4.0.0
(hypothesis and more), attrs (hypothesis; and it is a dependency of test tools, so its original code would
sit in the image).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SwePackage(BaseModel):
    """One package SWE tasks are generated from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="the PyPI name (toolz)")
    version: str = Field(description="the pinned version whose sdist is used (1.2.0)")
    source_root: str = Field(".", description="the folder, relative to the sdist's top, that goes on PYTHONPATH ('.' or 'src')")
    modules: list[str] = Field(description="package folders or module files under source_root that are mutated")
    test_paths: list[str] = Field(description="test files or folders, relative to the sdist's top, given to pytest")
    test_requires: list[str] = Field(default_factory=lambda: ["pytest==8.3.4"],
                                     description="pip requirements the suite needs, installed in the image at build time")
    tests: int = Field(0, description="recorded passing tests in the image (measured; 0: not measured)")
    suite_sec: float = Field(0.0, description="one run of the suite in the image, seconds (measured)")


DEFAULT_PACKAGES: list[SwePackage] = [
    SwePackage(name="toolz", version="1.2.0", modules=["toolz"], test_paths=["toolz/tests"],
               tests=187, suite_sec=3.9),
    SwePackage(name="inflection", version="0.5.1", modules=["inflection"], test_paths=["test_inflection.py"],
               tests=455, suite_sec=3.8),
    SwePackage(name="cachetools", version="8.0.2", source_root="src", modules=["cachetools"], test_paths=["tests"],
               tests=476, suite_sec=8.0),
    SwePackage(name="boltons", version="26.2.0", modules=["boltons"], test_paths=["tests"],
               tests=519, suite_sec=14.4),
    SwePackage(name="six", version="1.17.0", modules=["six.py"], test_paths=["test_six.py"],
               tests=184, suite_sec=3.4),
    SwePackage(name="tabulate", version="0.10.0", modules=["tabulate"], test_paths=["test"],
               tests=280, suite_sec=6.6),
    SwePackage(name="text-unidecode", version="1.3", source_root="src", modules=["text_unidecode"],
               test_paths=["test_unidecode.py"], tests=133, suite_sec=1.2),
    SwePackage(name="parse", version="1.22.4", modules=["parse"], test_paths=["tests"],
               tests=109, suite_sec=4.1),
    SwePackage(name="semver", version="3.1.2", source_root="src", modules=["semver"], test_paths=["tests"],
               tests=515, suite_sec=4.5),
]


def select_packages(names: list[str] | None) -> list[SwePackage]:
    """The default packages named in ``names`` (all when None or empty); ``name==version`` pins another version.

    Raises:
        ValueError: a name that is not in the default list (the message lists them).
    """
    if not names:
        return list(DEFAULT_PACKAGES)
    known = {p.name: p for p in DEFAULT_PACKAGES}
    out = []
    for spec in names:
        name, _, version = spec.partition("==")
        if name not in known:
            raise ValueError(f"--packages: {name!r} is not a known SWE package; known: {', '.join(known)} "
                             "(add one to fireflash/tasks/swe/packages.py with its modules and test paths)")
        out.append(known[name].model_copy(update={"version": version}) if version else known[name])
    return out
