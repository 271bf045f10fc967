"""``fireflash tasks generate swe``: SWE tasks from real PyPI packages (issue 30).

    fireflash tasks generate swe --packages toolz,inflection --seed 0 --out runs/swe --max-per-package 20
    fireflash tasks generate swe --out runs/swe                # every package of the default list
    fireflash tasks generate swe --packages toolz --no-gates   # write kept bugs without running the gates

Needs PyPI (the sdists, the first time) and the image builder (podman/buildah) for the package images;
the suites, mutations and gates then run offline in the training sandbox. Prints progress lines and writes
``OUT/generate-report.json`` (per package: recorded tests, mutations tried, kept, written, drop reasons,
seconds). Exits 1 when no task was written.
"""

from __future__ import annotations

from pathlib import Path

import typer

from fireflash.tasks.swe.packages import DEFAULT_PACKAGES, select_packages

generate_app = typer.Typer(help="Generate task sets (issue 30: SWE tasks from PyPI packages).", no_args_is_help=True)


OutOpt = typer.Option(..., "--out", help="Folder the tasks and generate-report.json are written to.")
PackagesOpt = typer.Option("", "--packages", help="Comma-separated names (name==version pins another version); "
                           f"default: all of {', '.join(p.name for p in DEFAULT_PACKAGES)}.")
SeedOpt = typer.Option(0, "--seed", help="With package and version, fixes the mutations and their order.")
MaxPerPackageOpt = typer.Option(20, "--max-per-package", min=1, help="Tasks written per package, at most.")
MaxFailOpt = typer.Option(10, "--max-fail", min=1, help="A bug is kept when 1..N recorded tests fail.")
BudgetOpt = typer.Option(1800.0, "--budget-sec-per-package", min=1.0, help="Seconds of mutation runs per package, at most.")
GatesOpt = typer.Option(True, "--gates/--no-gates", help="Run the nine gates before writing a task.")


@generate_app.command("swe")
def swe_command(
    out: Path = OutOpt,
    packages: str = PackagesOpt,
    seed: int = SeedOpt,
    max_per_package: int = MaxPerPackageOpt,
    max_fail: int = MaxFailOpt,
    budget_sec: float = BudgetOpt,
    gates: bool = GatesOpt,
) -> None:
    """Generate FAIL_TO_PASS tasks by mutating real packages; each written task passed the nine gates."""
    from fireflash.curation.swe_generate import generate  # imports the sandbox and image stack: only when run

    try:
        chosen = select_packages([p.strip() for p in packages.split(",") if p.strip()])
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    report = generate(chosen, out, seed=seed, max_per_package=max_per_package, max_fail=max_fail, gates=gates,
                      budget_sec_per_package=budget_sec, say=lambda line: print(line, flush=True))
    written = sum(p.written for p in report.packages)
    for p in report.packages:
        print(f"{p.name} {p.version}: {p.written} written, {p.kept_by_tests} kept by the tests of {p.tried} tried; "
              f"drops {p.drops}; seconds {p.seconds}" + (f"; error {p.error}" if p.error else ""))
    print(f"{written} tasks in {out} (report: {out / 'generate-report.json'})")
    if not written:
        raise typer.Exit(1)
