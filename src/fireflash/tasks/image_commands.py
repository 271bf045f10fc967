"""``fireflash images bases`` and ``fireflash tasks build``: environment images ahead of a run.

    fireflash images bases                         Debian bookworm + trixie from Debian's archive (~1.5 min each)
    fireflash images bases --suite trixie
    fireflash tasks build my-tasks/ bundled:train  each task's image, built once, cached by content
    fireflash tasks build t/ --report-dir runs/images sandbox.image_builder=docker

Words containing '=' are config overrides (``sandbox.base_images={"ubuntu:24.04"="..."}``), as in
``fireflash eval``. Exit 2 for a bad option, config or missing tool; exit 1 when any image failed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fireflash.progress import Progress
from fireflash.sandbox.config import SandboxConfig
from fireflash.sandbox.containers import (
    ContainerCommandFailed,
    ContainerTool,
    ContainerToolMissing,
    find_tool,
)
from fireflash.tasks.bases import DEBIAN_BASES, BaseBuildError, ensure_base
from fireflash.tasks.images import ImageBuildError, ImageRecord, task_image
from fireflash.tasks.loader import TaskLoadError, task_dirs

images_app = typer.Typer(help="Container images: local Debian bases for offline machines.", no_args_is_help=True)
console = Console()

ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
OverridesArg = typer.Argument(None, help="Config overrides KEY.PATH=VALUE.", show_default=False)
SuiteOpt = typer.Option(None, "--suite", help="Only these suites (bookworm, trixie); repeatable.")
WordsArg = typer.Argument(..., metavar="PATHS... [KEY.PATH=VALUE...]", show_default=False,
                          help="Task directories, directories of tasks, bundled:SPLIT; and config overrides.")
RebuildOpt = typer.Option(False, "--rebuild", help="Build even when the cached image exists.")
ReportDirOpt = typer.Option(None, help="Write one JSON ImageRecord per task here.")


def _say(text: str) -> None:
    """One plain line, never wrapped or read as markup (build output holds brackets)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _setup(config: Path | None, overrides: list[str]) -> tuple[SandboxConfig, ContainerTool]:
    """The [sandbox] section and its container tool; a bad config or a missing tool exits 2 with the fix."""
    from fireflash.config import ConfigError, load_config

    try:
        cfg = load_config(config, overrides).sandbox
        return cfg, find_tool(cfg.image_builder)
    except (ConfigError, ContainerToolMissing) as e:
        _fail(f"{type(e).__name__}: {e}")


@images_app.command("bases")
def bases_command(
    overrides: list[str] | None = OverridesArg,
    suite: list[str] | None = SuiteOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Build the local Debian bases with mmdebstrap (Debian's archive only); existing ones are kept."""
    refs = {s: r for r, s in DEBIAN_BASES.items()}
    unknown = sorted(set(suite or []) - set(refs))
    if unknown:
        _fail(f"--suite {', '.join(unknown)}: choose from {', '.join(sorted(refs))}")
    _, tool = _setup(config, overrides or [])
    failed = False
    for name in sorted(suite or refs):
        ref = refs[name]
        if tool.exists(ref):
            _say(f"{ref}: exists, kept")
            continue
        try:
            with Progress(f"building {ref}", console) as progress:
                ensure_base(tool, ref, _say, progress.line)
        except BaseBuildError as e:
            _say(f"BaseBuildError: {e}")
            failed = True
    if failed:
        raise typer.Exit(1)


def build_command(
    words: list[str] = WordsArg,
    rebuild: bool = RebuildOpt,
    report_dir: Path | None = ReportDirOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Build (or find) every task's environment image; print what each got, substitutions included."""
    paths = [w for w in words if "=" not in w]
    if not paths:
        _fail("no task paths given: pass task directories, directories of tasks, or bundled:train")
    cfg, tool = _setup(config, [w for w in words if "=" in w])
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    dirs: list[Path] = []
    for spec in paths:
        try:
            dirs += task_dirs(spec)
        except TaskLoadError as e:
            _fail(f"TaskLoadError: {e}")
    start = time.monotonic()
    records: list[ImageRecord] = []
    errors: list[str] = []
    for i, task_dir in enumerate(dirs, 1):
        try:
            with Progress(f"[{i}/{len(dirs)}] {task_dir.name}", console) as progress:
                record = task_image(task_dir, cfg, tool, _say, progress.line, rebuild)
        except (ImageBuildError, ContainerCommandFailed) as e:
            _say(f"{type(e).__name__}: {e}")
            errors.append(task_dir.name)
            continue
        records.append(record)
        how = "cached" if record.cached else f"built in {record.build_sec:.0f} s"
        _say(f"{record.task_id}: {record.image} ({how})")
        if report_dir:
            (report_dir / f"{record.task_id}.json").write_text(record.model_dump_json(indent=2))
    table = Table(title=f"images: {len(dirs)} tasks, {time.monotonic() - start:.0f} s ({tool.kind})")
    for column in ("task", "image", "FROM substituted", "staged for test.sh"):  # full image names are above
        table.add_column(column, overflow="fold")
    for r in records:
        subs = ", ".join(sorted({f"{s.original} → {s.replacement}"
                                 for s in r.substitutions}))
        staged = r.verifier.summary() if r.verifier else ""
        table.add_row(escape(r.task_id), "cached" if r.cached else f"built {r.build_sec:.0f} s", escape(subs),
                      escape(staged))
    for name in errors:
        table.add_row(escape(name), "[red]failed[/red]", "", "")
    console.print(table)
    if errors:
        raise typer.Exit(1)
