"""CLI commands of curation and evaluation; the top-level CLI mounts them (``fireflash.cli``).

    fireflash eval [TASKS...] --model M [-c C] [a.b=v...]        Pass@k, tokens, cost (default TASKS: bundled:heldout)
    fireflash report RUN_DIR                                      plots + summary of a training run
    fireflash report pareto RESULTS... --points CSV               cost / Pass@1 frontier (PNG + table)
    fireflash report compare RESULTS... [--label L] [--run DIR]   Pass@1 with bootstrap CIs vs the first (alias: compare)
    fireflash tasks probe [TASKS...] [-c C] [--out M] [a.b=v...]  difficulty probe → pool manifest

Mount with ``app.command("eval")(eval_command)``, ``app.add_typer(report_app, name="report")``,
``app.command("compare")(compare_command)`` and ``tasks_app.command("probe")(probe_command)``; ``app`` below holds eval and report for tests.
Positional words containing '=' (``runtime.max_inflight_attempts=4``) are config overrides, the others
task paths (directories, dirs of tasks, ``bundled:SPLIT``). Eval and probe run as training does: the
same harness, engine and sandbox sections, ``runtime.max_inflight_attempts`` attempts at a time and
``runtime.max_attempt_retries`` retries of infrastructure failures.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from fireflash.config import FireFlashConfig
from fireflash.protocols import Task
from fireflash.sandbox.config import SandboxConfig

console = Console()
_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)+=")


def split_args(words: list[str] | None) -> tuple[list[str], list[str]]:
    """Positional words → (task paths, ``a.b=value`` overrides)."""
    words = words or []
    return [w for w in words if not _OVERRIDE.match(w)], [w for w in words if _OVERRIDE.match(w)]


def _config(config: Path | None, overrides: list[str]) -> FireFlashConfig:
    from fireflash.cli import resolve_config  # lazy: fireflash.cli imports this module

    return resolve_config(config, overrides)


def _load_tasks(specs: list[str], sandbox: SandboxConfig) -> list[Task]:
    from fireflash.tasks.loader import load_tasks

    tasks, errors = load_tasks(specs, sandbox=sandbox)
    for e in errors:
        console.print(f"[yellow]skipped[/] {e}")
    if not tasks:
        console.print(f"[red]no tasks loaded from {', '.join(specs)}[/]")
        raise typer.Exit(2)
    return tasks


@dataclass
class Stack:
    """The training stages an eval or probe runs through, built from the config tree."""

    backend: Any
    engine: Any
    tokenizer: Any
    grader_for: Callable[[Task], Any]
    model: str


@asynccontextmanager
async def build_stack(cfg: FireFlashConfig, model: str) -> AsyncIterator[Stack]:
    """Sandbox backend, tokenizer, engine and graders exactly as ``fireflash train`` builds them; closed on exit."""
    from fireflash.engines import make_engine
    from fireflash.grading.graders import make_grader
    from fireflash.models import load_tokenizer, resolve_model_dir
    from fireflash.sandbox import make_backend

    model_dir = resolve_model_dir(model, cfg.model.cache_dir)
    tokenizer = load_tokenizer(str(model_dir), cfg.model.cache_dir)
    engine = make_engine(cfg.engine, str(model_dir), tokenizer=tokenizer, cache_dir=cfg.model.cache_dir)
    backend = make_backend(cfg.sandbox)
    graders: dict[str, Any] = {}
    try:
        yield Stack(backend, engine, tokenizer, lambda t: graders.setdefault(t.id, make_grader(t.grader)), model)
    finally:
        await backend.close()
        close = getattr(engine, "close", None)
        if close is not None:
            await close()


ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
ArgsArg = typer.Argument(None, help="Task paths (dirs or bundled:SPLIT) and KEY.PATH=VALUE overrides.", show_default=False)
ModelOpt = typer.Option(None, "--model", "-m", help="Embedded name or HF directory (default: model.name_or_path).")
EvalOutOpt = typer.Option(None, "--out", "-o", help="Results directory (default: evaluation.results_dir).")
ManifestOutOpt = typer.Option(
    None, "--out", "-o", help="Pool manifest JSON (default: tasks.pool_manifest or RUN_DIR/pool_manifest.json)."
)
RunDirArg = typer.Argument(..., help="Run directory holding metrics.jsonl.")
ReportOutOpt = typer.Option(None, "--out", "-o", help="Report directory (default RUN_DIR/report).")
ResultsArg = typer.Argument(None, help="`fireflash eval` results.json files or their directories.")
PointsOpt = typer.Option(None, "--points", "-p", help="CSV of other systems: name,setting,cost_per_trial_usd,pass_at_1_pct[,benchmark].")
ParetoOutOpt = typer.Option(Path("runs/pareto"), "--out", "-o", help="Directory for pareto.png and pareto.md.")
CompareResultsArg = typer.Argument(..., help="`fireflash eval` results.json files or their directories; the first is the baseline.")
LabelOpt = typer.Option(None, "--label", "-l", help="Name of each RESULTS path, in order (default: its directory name).")
RunOpt = typer.Option(None, "--run", "-r", help="Training run directory (RL or SFT metrics.jsonl) to plot in curves.png.")
CompareOutOpt = typer.Option(Path("runs/compare"), "--out", "-o", help="Directory for compare.png, compare.md, compare.json, curves.png.")
ResamplesOpt = typer.Option(10_000, "--resamples", help="Bootstrap resamples of the task set.")
SeedOpt = typer.Option(0, "--seed", help="Bootstrap random seed.")


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _run_or_exit(main: Callable[[], Any]) -> Any:
    """Run ``main`` under asyncio; a missing model or unusable sandbox exits 2 with its fix, not a traceback."""
    from fireflash.models import ModelNotFound
    from fireflash.sandbox.errors import SandboxUnavailable

    try:
        return asyncio.run(main())
    except (ModelNotFound, SandboxUnavailable) as e:
        console.print(f"[red]{type(e).__name__}: {e}[/]")
        raise typer.Exit(2) from None


def eval_command(
    args: list[str] | None = ArgsArg,
    model: str | None = ModelOpt,
    config: Path | None = ConfigOpt,
    out: Path | None = EvalOutOpt,
) -> None:
    """Evaluate a model: Pass@1 over N trials per task, pass@k, tokens, cost, failures (RECIPE.md §6)."""
    from fireflash.evaluation.cost import PriceUnavailable, resolve_prices
    from fireflash.evaluation.runner import evaluate
    from fireflash.progress import Progress

    specs, overrides = split_args(args)
    cfg = _config(config, overrides)
    specs = specs or ["bundled:heldout"]
    tasks = _load_tasks(specs, cfg.sandbox)
    model_name = model or cfg.model.name_or_path
    ev = cfg.evaluation
    try:
        prices = resolve_prices(ev.prices, model_name)
    except PriceUnavailable as e:
        console.print(f"[yellow]cost not computed[/]: {e}")
        prices = None
    out_dir = out or Path(ev.results_dir)

    async def run() -> Any:
        async with build_stack(cfg, model_name) as stack:
            with Progress("eval trials", console, total=len(tasks) * ev.trials_per_task) as progress:
                solved = [0]

                def tick(trial: Any) -> None:
                    solved[0] += trial.solved
                    progress.advance(info=f"{solved[0]} solved")

                return await evaluate(
                    tasks, backend=stack.backend, engine=stack.engine, tokenizer=stack.tokenizer, harness=cfg.harness,
                    grader_for=stack.grader_for, trials_per_task=ev.trials_per_task, ks=ev.pass_at_k, prices=prices,
                    max_concurrent=cfg.runtime.max_inflight_attempts, max_retries=cfg.runtime.max_attempt_retries,
                    out_dir=out_dir, model=model_name, setting=ev.setting, task_set=", ".join(specs),
                    engine_settings=cfg.engine.model_dump(mode="json"),
                    on_trial=tick,
                )

    results = _run_or_exit(run)
    table = Table(title=f"eval {model_name}: {len(tasks)} tasks × {ev.trials_per_task} trials")
    for col in ["", "tasks", "lost"] + [f"pass@{k}" for k in ev.pass_at_k] + ["reward", "out tok", "$/trial", "$/solve"]:
        table.add_column(col, justify="right")
    for name, a in [("all", results.overall)] + [(c.category, c) for c in results.categories]:
        table.add_row(name, str(a.n_tasks), str(a.n_lost), *[_fmt(a.pass_at_k[str(k)], ".1%") for k in ev.pass_at_k],
                      _fmt(a.mean_reward, ".3f"), _fmt(a.mean_n_output_tokens, ".0f"), _fmt(a.cost_per_trial_usd, ".4f"),
                      _fmt(a.cost_per_solve_usd, ".4f"))
    console.print(table)
    console.print(f"results: {out_dir / 'results.json'}, tables: {out_dir / 'results.md'}, trajectories: {out_dir / 'trajectories'}")


def probe_command(
    args: list[str] | None = ArgsArg,
    config: Path | None = ConfigOpt,
    out: Path | None = ManifestOutOpt,
) -> None:
    """Probe tasks with the base policy under training conditions; keep those it is unsure about (RECIPE.md §2)."""
    from fireflash.config import ConfigError, check_trainable_sampling
    from fireflash.tasks.probe import probe_tasks

    specs, overrides = split_args(args)
    cfg = _config(config, overrides)
    try:  # probing measures pass rates under the training conditions (RECIPE.md §2): what training refuses, too
        check_trainable_sampling(cfg, probing=True)
    except ConfigError as e:
        typer.echo(f"ConfigError: {e}", err=True)
        raise typer.Exit(2) from None
    tasks = _load_tasks(specs or list(cfg.tasks.paths), cfg.sandbox)
    manifest_path = out or Path(cfg.tasks.pool_manifest or Path(cfg.tracking.run_dir) / "pool_manifest.json")
    p = cfg.tasks.probe

    async def run() -> Any:
        async with build_stack(cfg, cfg.model.name_or_path) as stack:
            return await probe_tasks(
                tasks, backend=stack.backend, engine=stack.engine, tokenizer=stack.tokenizer, harness=cfg.harness,
                grader_for=stack.grader_for, attempts_per_task=p.attempts_per_task, keep_min_pass_rate=p.keep_min_pass_rate,
                keep_max_pass_rate=p.keep_max_pass_rate, group_size=cfg.runtime.group_size,
                max_concurrent=cfg.runtime.max_inflight_attempts, max_retries=cfg.runtime.max_attempt_retries,
                manifest_path=manifest_path, model=cfg.model.name_or_path,
            )

    try:
        manifest, unprobed = _run_or_exit(run)
    except ValueError as e:  # a manifest probed under other conditions: say so without a traceback
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    kept = sorted(manifest.kept_ids)
    console.print(
        f"probed {len(manifest.tasks)} tasks, kept {len(kept)} with pass rate in "
        f"[{manifest.keep_min_pass_rate:.0%}, {manifest.keep_max_pass_rate:.0%}]; expected zero-signal groups "
        f"(G={manifest.group_size}): {_fmt(manifest.expected_zero_signal_before, '.1%')} before → "
        f"{_fmt(manifest.expected_zero_signal_after, '.1%')} after filtering"
    )
    if unprobed:
        console.print(f"[yellow]{len(unprobed)} task(s) lost attempts to infrastructure[/] and will be probed on rerun: {', '.join(unprobed)}")
    if kept:
        console.print(f"pool manifest: {manifest_path}  (train on it with tasks.pool_manifest={manifest_path})")
    else:
        rates = [t.pass_rate for t in manifest.tasks]
        why = "the policy solves none of them" if rates and max(rates) == 0 else "none lies in the keep range"
        console.print(
            f"pool manifest: {manifest_path}  [yellow]no task to train on: {why}[/] (a warmer policy, easier "
            "tasks, or a wider tasks.probe keep range)"
        )


class _ReportGroup(TyperGroup):
    """``fireflash report RUN_DIR`` runs the default ``run`` subcommand; ``report pareto ...`` the frontier."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


report_app = typer.Typer(cls=_ReportGroup, no_args_is_help=True, help="Reports: a training run's plots, the Pareto frontier, or a Pass@1 comparison.")


@report_app.command("run")
def report_run(
    run_dir: Path = RunDirArg,
    out: Path | None = ReportOutOpt,
) -> None:
    """Plot a training run's metrics (reward, pass rate, entropy, TIS, drift, staleness, idle, tokens)."""
    from fireflash.evaluation.report import write_report
    from fireflash.runtime.tracking import MetricsError

    try:
        report_dir = write_report(run_dir, out)
    except (FileNotFoundError, MetricsError) as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    console.print(f"report: {report_dir / 'report.md'} (plots: {report_dir}/*.png)")


@report_app.command("pareto")
def report_pareto(
    results: list[Path] | None = ResultsArg,
    points: Path | None = PointsOpt,
    out: Path = ParetoOutOpt,
) -> None:
    """Mark the cost / Pass@1 Pareto frontier (log-cost axis) of our runs and other systems (RECIPE.md §6)."""
    from fireflash.evaluation.pareto import pareto_table, write_pareto

    try:
        png, md, pts = write_pareto(results or [], points, out)
    except (ValueError, FileNotFoundError) as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    console.print(pareto_table(pts))
    console.print(f"plot: {png}, table: {md}")


def compare_command(
    results: list[Path] = CompareResultsArg,
    label: list[str] | None = LabelOpt,
    run: list[Path] | None = RunOpt,
    out: Path = CompareOutOpt,
    resamples: int = ResamplesOpt,
    seed: int = SeedOpt,
) -> None:
    """Held-out Pass@1 of eval runs (e.g. base, SFT, SFT+RL) with 95% bootstrap CIs and the paired change vs the first."""
    from rich import box
    from rich.markup import escape

    from fireflash.evaluation.compare import write_compare

    try:
        comparison = write_compare(results, out, labels=label, run_dirs=run or (), n_resamples=resamples, seed=seed)
    except ValueError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    trials = sorted({r.trials_per_task for r in comparison.results})
    table = Table(title=f"Pass@1 on {len(comparison.task_ids)} common tasks × {'/'.join(map(str, trials))} trials, "
                  f"{comparison.level:.0%} CI over tasks", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("label / model", overflow="fold")
    # results from before the sampled-token record, without saved trajectories, have no entropy: no empty column
    show_entropy = any(r.sampled_entropy is not None for r in comparison.results)
    for col in ["Pass@1 %", "Δ pts", "sig", "reward", "tok/solve"] + ["entropy"] * show_entropy + ["lost"]:
        table.add_column(col, justify="right", no_wrap=True)
    for r in comparison.results:
        p1, d, h, dh = r.pass_at_1, r.delta, r.sampled_entropy, r.entropy_delta
        entropy = "–" if h is None else f"{h.mean:.3f}" + ("" if dh is None else f"\n{dh.mean:+.3f}\n[{dh.low:+.2f}, {dh.high:+.2f}]")
        table.add_row(
            f"{escape(r.label)}\n[dim]{escape(r.model)}[/]", f"{100 * p1.mean:.1f}\n[{100 * p1.low:.1f}, {100 * p1.high:.1f}]",
            "base" if d is None else f"{100 * d.mean:+.1f}\n[{100 * d.low:+.1f}, {100 * d.high:+.1f}]",
            "" if r.significant is None else ("yes" if r.significant else "no"), f"{r.mean_reward:.3f}",
            _fmt(r.output_tokens_per_solve, ".0f"), *[entropy] * show_entropy, str(r.n_lost),
        )
    console.print(table)
    if show_entropy:
        console.print("[dim]entropy: nats per sampled token on these trials (Δ vs the first, paired over tasks)[/]")
    dropped = [f"{r.label} {r.n_tasks_dropped}" for r in comparison.results if r.n_tasks_dropped]
    if dropped:
        console.print(f"[yellow]tasks dropped (not graded in every result)[/]: {', '.join(dropped)}")
    console.print(f"plot: {out / 'compare.png'}, table: {out / 'compare.md'}" + (f", curves: {out / 'curves.png'}" if run else ""))


report_app.command("compare")(compare_command)


app = typer.Typer(help="Curation and evaluation.", no_args_is_help=True, add_completion=False)
app.command("eval")(eval_command)
app.add_typer(report_app, name="report")
