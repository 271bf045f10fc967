"""``fireflash tasks generate swe``: packages → images → recorded suites → mutations → gated tasks (issue 30).

    report = generate(select_packages(["toolz"]), out=Path("runs/swe"), seed=0, max_per_package=20)

Per package: the sdist (cached), its image (cached by content), the baseline (two offline runs; tests
passing both are recorded), mutations in the seed's order tried in one offline sandbox until
``3 * max_per_package`` are kept or the time budget is spent, then each kept one written as a task, run
through the nine gates (unless ``gates=False``) and moved to ``out`` when it passes them all, until
``max_per_package`` are written. ``out/generate-report.json`` has per-package counts, seconds and drop
reasons (``no_failure``, ``too_many_failures``, ``timeout``, ``collection_error``, ``nondeterministic``,
``no_statement``: no failing test statement to report, ``gates [n,...]``: the gates it failed). Each written
task's gate report is in ``out/gate-reports/<task id>.json`` (the ``tasks.gate_reports_dir`` format).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from fireflash.protocols import SCHEMA_VERSION
from fireflash.sandbox import SandboxConfig, make_backend
from fireflash.tasks.config import GatesConfig
from fireflash.tasks.swe.instruction import (
    function_source,
    package_names,
    parse_failure,
    public_function,
    write_instruction,
)
from fireflash.tasks.swe.mutate import mutations
from fireflash.tasks.swe.packages import SwePackage
from fireflash.tasks.swe.sdist import extract_sdist, fetch_sdist, swe_cache
from fireflash.tasks.swe.suite import package_image, record_suite, run_mutations
from fireflash.tasks.swe.writer import task_id, write_task

MAX_TRIES_PER_TASK = 40  # mutations prepared per task asked for (measured: 1 in 3-10 is written)


class PackageReport(BaseModel):
    """What generation did for one package (times in seconds)."""

    name: str
    version: str
    recorded_tests: int = 0
    suite_sec: float = 0.0
    tried: int = 0
    kept_by_tests: int = 0
    written: int = 0
    drops: dict[str, int] = Field(default_factory=dict)
    tasks: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict, description="image, baseline, mutations, gates")
    error: str | None = None


class GenerateReport(BaseModel):
    """``generate-report.json``."""

    schema_version: int = SCHEMA_VERSION
    seed: int
    max_per_package: int
    max_fail: int
    packages: list[PackageReport]


def module_files(pkg: SwePackage, source: Path) -> list[str]:
    """The mutable ``.py`` files of ``pkg``, relative to its source root; test paths and test files excluded."""
    root = source / pkg.source_root
    tests = [(source / t).resolve() for t in pkg.test_paths]
    files = []
    for module in pkg.modules:
        path = root / module
        for f in [path] if path.is_file() else sorted(path.rglob("*.py")):
            resolved = f.resolve()
            if any(resolved == t or t in resolved.parents for t in tests) or f.name.startswith("test_"):
                continue
            files.append(f.relative_to(root).as_posix())
    return files


def generate(packages: list[SwePackage], out: Path, seed: int = 0, max_per_package: int = 20, max_fail: int = 10,
             gates: bool = True, sandbox: SandboxConfig | None = None, budget_sec_per_package: float = 1800.0,
             say: Callable[[str], None] = print) -> GenerateReport:
    """Generate up to ``max_per_package`` gated SWE tasks per package into ``out``; write and return the report.

    Args:
        seed: with package and version, fixes the mutations and their order.
        max_fail: a mutation is kept when 1..max_fail recorded tests fail.
        budget_sec_per_package: the mutation runs stop after this.
    """
    sandbox = sandbox or SandboxConfig()
    out.mkdir(parents=True, exist_ok=True)
    report = GenerateReport(seed=seed, max_per_package=max_per_package, max_fail=max_fail, packages=[])
    for pkg in packages:
        rep = PackageReport(name=pkg.name, version=pkg.version)
        report.packages.append(rep)
        try:
            _generate_one(pkg, out, seed, max_per_package, max_fail, gates, sandbox, budget_sec_per_package, rep, say)
        except Exception as e:  # noqa: BLE001 -- one package's failure is reported, the others still run
            rep.error = f"{type(e).__name__}: {e}"
            say(f"{pkg.name} {pkg.version}: {rep.error}")
        (out / "generate-report.json").write_text(report.model_dump_json(indent=2))
    return report


def _generate_one(pkg: SwePackage, out: Path, seed: int, max_per_package: int, max_fail: int, gates: bool,
                  sandbox: SandboxConfig, budget_sec: float, rep: PackageReport, say: Callable[[str], None]) -> None:
    start = time.monotonic()
    source = extract_sdist(fetch_sdist(pkg.name, pkg.version), swe_cache() / "src" / f"{pkg.name}-{pkg.version}")
    folder, image = package_image(pkg, source, sandbox, say=say)
    rep.seconds["image"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    baseline = record_suite(pkg, folder, image, sandbox)
    recorded: list[str] = baseline["passing"]
    rep.recorded_tests, rep.suite_sec = len(recorded), round(baseline["seconds"], 1)
    rep.seconds["baseline"] = round(time.monotonic() - start, 1)
    say(f"{pkg.name} {pkg.version}: {len(recorded)} tests recorded ({rep.suite_sec} s a run)")
    root = source / pkg.source_root
    candidates = mutations(root, module_files(pkg, source), f"{pkg.name}-{pkg.version}-{seed}",
                           limit=MAX_TRIES_PER_TASK * max_per_package)
    by_id = {task_id(pkg, m): m for m in candidates}
    prefix = "" if pkg.source_root == "." else pkg.source_root.rstrip("/") + "/"
    plan = [{"id": i, "file": prefix + m.file, "mutated": m.mutated} for i, m in by_id.items()]
    start = time.monotonic()
    results = run_mutations(pkg, folder, sandbox, recorded, plan, max_fail=max_fail, max_keep=3 * max_per_package,
                            suite_sec=baseline["seconds"], deadline_sec=budget_sec)
    rep.seconds["mutations"] = round(time.monotonic() - start, 1)
    drops = Counter(r["reason"] for r in results if r["status"] == "dropped")
    kept = [r for r in results if r["status"] == "kept"]
    rep.tried, rep.kept_by_tests = len(results), len(kept)
    say(f"{pkg.name} {pkg.version}: {len(results)} mutations tried, {len(kept)} kept by the tests, dropped {dict(drops)}")
    staging = swe_cache() / "staging" / f"{pkg.name}-{pkg.version}"
    shutil.rmtree(staging, ignore_errors=True)
    tops = {Path(mod).with_suffix("").parts[0] for mod in pkg.modules}
    start = time.monotonic()
    for r in kept:
        if rep.written >= max_per_package:
            break
        m = by_id[r["id"]]
        hidden = [m.file, Path(m.file).name]
        failures, names, modules = [], set(), set()
        for n in r["failed"]:
            text = _read(source / n.split("::", 1)[0])
            f = parse_failure(n, r["details"].get(n, ""), hidden)
            failures.append(dataclasses.replace(f, test_source=function_source(text, n)))
            got = package_names(text, tops)
            names, modules = names | got[0], modules | got[1]
        try:
            function = public_function(failures, m.function, names, modules)
            instruction = write_instruction(pkg.name, pkg.version, failures, function)
        except ValueError:
            drops["no_statement"] += 1
            continue
        task_dir = write_task(staging, pkg, source, m, instruction, r["failed"], recorded, baseline["seconds"])
        failed = asyncio.run(_failed_gates(task_dir, sandbox)) if gates else []
        if failed:
            drops[f"gates {failed}"] += 1
            say(f"{task_dir.name}: failed gates {failed}")
            continue
        final = out / task_dir.name
        shutil.rmtree(final, ignore_errors=True)
        shutil.move(task_dir, final)
        rep.written += 1
        rep.tasks.append(final.name)
        report_file = task_dir.parent / f"{task_dir.name}.gates.json"
        if report_file.is_file():  # as `fireflash tasks validate --report-dir` writes it: tasks.gate_reports_dir
            (out / "gate-reports").mkdir(exist_ok=True)
            shutil.copy(report_file, out / "gate-reports" / f"{final.name}.json")
        say(f"{final.name}: written" + (" (passed all nine gates)" if gates else " (gates not run)"))
    rep.seconds["gates_and_write"] = round(time.monotonic() - start, 1)
    rep.drops = dict(drops)


async def _failed_gates(task_dir: Path, sandbox: SandboxConfig) -> list[int]:
    """The gates the task at ``task_dir`` fails (``[]``: passes all nine; a load failure counts as gate 0)."""
    from fireflash.curation.gates import (
        validate_task,  # the gates import the whole grading stack: only when used
    )
    from fireflash.curation.requirements import task_stated
    from fireflash.tasks.harbor import load_harbor
    from fireflash.tasks.loader import TaskLoadError, load_task

    try:
        task = load_harbor(task_dir, images=True)  # read only: no image built for the gate-2 check
    except TaskLoadError:
        return [0]
    # gate 2 costs milliseconds on the host, the other eight a minute or more: a task failing it is dropped
    # before its image is built (its full report would say the same)
    stated = task_stated(task)
    if stated.missing:
        missing = "; ".join(f"{r.kind} {r.value!r} ({r.where})" for r in stated.missing[:8])
        (task_dir.parent / f"{task_dir.name}.gates.json").write_text(f'{{"failed_gates": [2], "missing": {json.dumps(missing)}}}\n')
        return [2]
    task = load_task(task_dir, sandbox=sandbox, say=lambda _: None)  # placed in its image (built now)
    backend = make_backend(sandbox)
    try:
        report = await validate_task(task, backend, GatesConfig())
    finally:
        await backend.close()
    (task_dir.parent / f"{task_dir.name}.gates.json").write_text(report.model_dump_json(indent=2))
    return report.failed_gates


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
