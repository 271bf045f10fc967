"""`fireflash train`: build every stage from the config tree and run the loop (reads top to bottom).

    checks → tasks → sandbox backend → tokenizer, trainer policy, engine → LocalRuntime.run → checkpoints, report
    runtime.backend = "ray": checks → tasks → placement → ray.init → RayRuntime.run (actors build their own parts)

``check_training`` runs first (and is all ``--dry-run`` adds to the plan): nothing is written into the run
directory until the engine setting, the run directory, the model and the task pool are known to be usable.

Builders hand flat arguments to each class (STYLE.md 15); nothing below receives the whole tree.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from fireflash.config import ConfigError, FireFlashConfig, check_trainable_sampling, dump_config
from fireflash.progress import Progress
from fireflash.protocols import Task

console = Console()


class _Status:
    """Live view of a run: recent steps plus rollout counters (rendered by rich on every refresh)."""

    def __init__(self, runtime: Any, steps: int) -> None:
        self.runtime, self.steps = runtime, steps

    def __rich__(self) -> Table:
        rt, history = self.runtime, self.runtime.history
        t = rt.total
        table = Table(
            title=f"fireflash train — step {rt.trainer.step}/{self.steps}, weight version {rt.trainer.weight_version}",
            caption=f"attempts: {t.attempts} done ({len(t.rewards)} graded, {t.solved} solved, {t.lost_attempts} lost), "
            f"{rt.running_attempts} running · groups: {t.groups_done} done, {t.groups_zero_signal} zero-signal, "
            f"{t.groups_lost} lost, {len(rt.queue)} queued" + _curation_caption(rt) + _mix_caption(rt),
            show_edge=False,
        )
        for col in ("step", "reward", "pass", "tokens/att", "entropy", "stale", "zero-sig", "trainer idle", "engine idle", "step s"):
            table.add_column(col, justify="right")
        for m in history[-8:]:
            table.add_row(
                f"{m['weight_version']:.0f}", _fmt(m, 'rollout/reward_mean', 3), _fmt(m, 'rollout/pass_rate', 2),
                _fmt(m, 'rollout/sampled_tokens_mean', 0), f"{m.get('entropy/mean', 0.0):.3f}",
                f"{m.get('stale/dropped_share', 0.0):.2f}", _fmt(m, 'groups/zero_signal_share', 2),
                f"{m['trainer/idle_share']:.0%}", f"{m['engine/idle_share']:.0%}", f"{m['step_sec']:.1f}",
            )
        return table


def _watch(runtime: Any, steps: int) -> Live | Progress:
    """The live table in a terminal; without one (``make train > log``) a plain line at least every 30 s."""
    if console.is_terminal:
        return Live(_Status(runtime, steps), console=console, refresh_per_second=1)
    return Progress("train", console, total=steps, completed=runtime.trainer.step, poll=lambda: _line(runtime))


def _line(runtime: Any) -> tuple[int, str]:
    """(steps done, rollout counters and the last step's pass rate) for a plain progress line."""
    t, last = runtime.total, (runtime.history[-1] if runtime.history else {})
    pass_rate = f", last step pass {_fmt(last, 'rollout/pass_rate', 2)}" if last else ""
    return runtime.trainer.step, (f"attempts {t.attempts} ({t.solved} solved, {t.lost_attempts} lost), "
                                  f"{runtime.running_attempts} running, {len(runtime.queue)} groups queued{pass_rate}")


def _curation_caption(runtime: Any) -> str:
    """The live view's curation counts (issue 29); empty without online curation state."""
    sampler = getattr(getattr(runtime, "loop", None), "sampler", None)
    if sampler is None:
        return ""
    return f" · curation: {len(sampler.retired)} retired, {sampler.total['readmitted']} re-probes"


def _mix_caption(runtime: Any) -> str:
    """The live view's groups drawn per mix source, with each one's target share (issue 30); empty without a mix."""
    mix = getattr(getattr(runtime, "loop", None), "mix", None)
    if mix is None:
        return ""
    return " · mix: " + ", ".join(f"{s} {mix.drawn[s]} drawn (target {mix.weights[s]:.0%})" for s in mix.sources)


def _fmt(m: dict[str, float], key: str, digits: int) -> str:
    """A metric for the progress table; '–' for a window without graded attempts (the key is absent)."""
    return f"{m[key]:.{digits}f}" if key in m else "–"


def threads_per_role(configured: int | None) -> int:
    """torch intra-op threads for each of the engine and trainer (half the cores by default)."""
    return configured or max(1, (os.cpu_count() or 2) // 2)


def role_threads(threads_per_role_setting: int | None, engine_num_threads: int | None) -> tuple[int, int]:
    """(engine, trainer) torch threads on the local backend: ``runtime.threads_per_role`` each (half the cores
    by default), except that an explicit ``engine.num_threads`` wins for the engine. Each role sets its
    count inside its own thread (``LocalEngine``'s worker, ``TrainerThread``)."""
    per_role = threads_per_role(threads_per_role_setting)
    return engine_num_threads or per_role, per_role


def check_train_config(cfg: FireFlashConfig) -> None:
    """Engine and sampling settings ``fireflash train`` cannot run, though eval, probe and ``agent run`` can; sampling
    the trainer cannot correct for (top_p < 1, greedy: ``check_trainable_sampling``). SGLang and vLLM servers get
    the same checks (issue 31); vLLM also needs ``engine.weight_sync = 'collective'``.

    Raises:
        ConfigError: the message names the field and the fix.
    """
    check_trainable_sampling(cfg)
    engine = cfg.engine
    servers = engine.kind in ("sglang", "vllm")
    if servers and not engine.url and cfg.runtime.backend == "local":
        raise ConfigError(
            f"engine.kind = {engine.kind!r} on runtime.backend = 'local' needs engine.url, e.g. "
            "engine.url='http://127.0.0.1:30000' (a server started with `fireflash serve MODEL`, or vLLM's `vllm serve` "
            "with --weight-transfer-config); only runtime.backend = 'ray' launches engine servers itself"
        )
    if engine.kind == "sglang":
        import logging

        from fireflash.engines.sglang_launch import check_sglang_training

        try:
            for warning in check_sglang_training(engine.args, engine.weight_sync):
                logging.getLogger(__name__).warning(warning)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if engine.kind == "vllm" and engine.weight_sync == "disk":
        raise ConfigError(
            "engine.kind = 'vllm' with engine.weight_sync = 'disk': vLLM's RL routes take new weights only through its "
            "weight-transfer group (engines/vllm_transfer.py); use engine.weight_sync = 'collective'"
        )
    if servers and engine.weight_sync == "collective" and engine.weight_sync_timeout_sec <= engine.request_timeout_sec:
        # SGLang installs an update only once the turns it is sampling have finished (a turn lasts at most
        # request_timeout_sec), as vLLM's pause mode 'wait' does, while the trainer waits in the broadcast, which fails
        # after weight_sync_timeout_sec
        raise ConfigError(
            f"engine.weight_sync_timeout_sec ({engine.weight_sync_timeout_sec:g}) must exceed "
            f"engine.request_timeout_sec ({engine.request_timeout_sec:g}), the longest a turn can take: an SGLang "
            "server takes new weights only once its running turns have finished; raise weight_sync_timeout_sec"
        )


def check_training(cfg: FireFlashConfig, resume: bool) -> list[Task]:
    """Everything ``fireflash train`` can check before it writes into the run directory; returns the task pool.

    Loads no model (an embedded one is not dequantised) and starts nothing; ``--dry-run`` runs it too.

    Raises:
        ConfigError: an engine setting training cannot use (``check_train_config``).
        fireflash.tracking.RunDirInUse: without ``resume``, ``tracking.run_dir`` already holds a run.
        fireflash.training.checkpoint.CheckpointError: with ``resume``, it holds no checkpoint.
        fireflash.models.ModelNotFound: ``model.name_or_path`` does not resolve (not checked on resume: the
            checkpoint is the model).
        fireflash.tasks.TaskLoadError: a task fails to load, or none is left after the pool manifest (with
            ``tasks.mix``: in any one source, named), or a task is in two sources.
        FileNotFoundError / ValueError: ``tasks.pool_manifest`` is missing or not a manifest.
        fireflash.tasks.heldout.HeldoutLeak: the pool holds held-out tasks and ``tasks.allow_heldout`` is off.
    """
    from fireflash.curation.pool import load_mix_pool, load_pool
    from fireflash.models import check_model
    from fireflash.tasks.heldout import check_not_heldout
    from fireflash.tracking import refuse_existing_run

    check_train_config(cfg)
    run_dir = Path(cfg.tracking.run_dir)
    if resume:
        from fireflash.training.checkpoint import latest_checkpoint

        latest_checkpoint(run_dir / "checkpoints")
    else:
        refuse_existing_run(run_dir, "tracking.run_dir")
        check_model(cfg.model.name_or_path, cfg.model.cache_dir)
    if cfg.tasks.mix:  # each task tagged with its source (metadata["source"]) for the run loop's draw
        tasks = load_mix_pool({name: src.paths for name, src in cfg.tasks.mix.items()}, cfg.tasks.pool_manifest,
                              cfg.tasks.gate_reports_dir, sandbox=cfg.sandbox)
    else:
        tasks = load_pool(cfg.tasks.paths, cfg.tasks.pool_manifest, cfg.tasks.gate_reports_dir, sandbox=cfg.sandbox)
    if not cfg.tasks.allow_heldout:
        check_not_heldout(tasks, "tasks.paths", allow_with="tasks.allow_heldout=true")
    return tasks


async def _train(cfg: FireFlashConfig, resume: bool, tasks: list[Task] | None) -> Path:
    from fireflash.engines import make_engine
    from fireflash.grading import make_grader
    from fireflash.models import load_policy, load_tokenizer, resolve_model_dir
    from fireflash.runtime.local import LocalRuntime
    from fireflash.sandbox import make_backend
    from fireflash.tracking import MetricsWriter
    from fireflash.training.checkpoint import resume_model_dir
    from fireflash.training.trainer import Trainer, default_device

    tasks = check_training(cfg, resume) if tasks is None else tasks
    run_dir = Path(cfg.tracking.run_dir)
    # a checkpoint is a complete HF model directory (a sharded one gets an HF view): on --resume weights and
    # tokenizer both come from it, so a base directory rewritten since (runs/sft/model by another warm-up)
    # cannot pair them with another tokenizer
    start_dir = (resume_model_dir(run_dir / "checkpoints") if resume
                 else resolve_model_dir(cfg.model.name_or_path, cfg.model.cache_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_config(cfg))
    console.print(f"[bold]tasks[/]: {len(tasks)} from {', '.join(cfg.tasks.paths)}" + _mix_line(cfg, tasks))
    if cfg.runtime.backend == "ray":
        return await _train_ray(cfg, resume, run_dir, tasks, start_dir)
    engine_threads, trainer_threads = role_threads(cfg.runtime.threads_per_role, cfg.engine.num_threads)
    tokenizer = load_tokenizer(str(start_dir), cfg.model.cache_dir)
    trainer = Trainer(
        load_policy(str(start_dir)), tokenizer, cfg.training, cfg.rl, temperature=cfg.harness.sampling.temperature,
        device=default_device(),
    )
    cursor: dict[str, Any] | None = trainer.restore(run_dir / "checkpoints") if resume else None
    engine = make_engine(cfg.engine.model_copy(update={"num_threads": engine_threads}), str(start_dir))
    if cfg.engine.kind in ("sglang", "vllm"):  # a server: new weights reach it through a group or a directory
        from fireflash.runtime.local_server import connect_local_trainer

        engine = await connect_local_trainer(
            engine, trainer, cfg.engine.weight_sync, run_dir / "weights", cfg.engine.weight_sync_timeout_sec
        )
    elif trainer.weight_version:  # an in-process engine loaded start_dir; a resumed trainer is ahead of it
        await engine.update_weights(trainer.state_dict(), trainer.weight_version)
    backend = make_backend(cfg.sandbox)
    graders: dict[str, Any] = {}

    def grader_for(task: Any) -> Any:
        if task.id not in graders:
            graders[task.id] = make_grader(task.grader)
        return graders[task.id]

    writer = MetricsWriter(run_dir, cfg.tracking.tensorboard)
    runtime = LocalRuntime(
        tasks=tasks, backend=backend, engine=engine, tokenizer=tokenizer, trainer=trainer,
        grader_for=grader_for,
        harness=cfg.harness, objective=cfg.rl, run_dir=run_dir, steps=cfg.runtime.steps,
        group_size=cfg.runtime.group_size, groups_per_step=cfg.runtime.groups_per_step,
        max_inflight_attempts=cfg.runtime.max_inflight_attempts, max_attempt_retries=cfg.runtime.max_attempt_retries,
        discard_zero_signal_groups=cfg.runtime.discard_zero_signal_groups, seed=cfg.runtime.seed, mode=cfg.runtime.mode,
        hang_margin_sec=cfg.runtime.hang_margin_sec, max_wall_sec=cfg.runtime.max_wall_sec,
        checkpoint_every_steps=cfg.training.checkpoint_every_steps, cursor=cursor, writer=writer,
        save_trajectories=cfg.tracking.save_trajectories, max_queued_groups=cfg.runtime.max_queued_groups,
        trainer_threads=trainer_threads, curation=cfg.runtime.curation, probe_seed=probe_seed(cfg.tasks.pool_manifest),
        mix=mix_weights(cfg),
    )
    start = time.perf_counter()
    try:
        with _watch(runtime, cfg.runtime.steps):
            await runtime.run()
    finally:
        writer.close()
        await backend.close()
        close = getattr(engine, "close", None)
        if close is not None:
            await close()
    _summarize(cfg, runtime, run_dir, start)
    return run_dir


async def _train_ray(cfg: FireFlashConfig, resume: bool, run_dir: Path, tasks: list[Any], start_dir: Path) -> Path:
    """The Ray backend: actors build the engine, sandboxes and trainer themselves from flat arguments."""
    from functools import partial

    from fireflash.runtime.placement import plan_placement
    from fireflash.runtime.ray_actors import build_rollout_parts, build_trainer
    from fireflash.runtime.ray_backend import RayRuntime, RayUnavailable
    from fireflash.tracking import MetricsWriter

    rt = cfg.runtime
    placement = plan_placement(rt.ray, cfg.engine, rt.max_inflight_attempts)
    servers: dict[str, Any] = {}
    if not placement.engines_in_workers:  # engine servers: launched by their actors unless engine.url names one
        from fireflash.runtime.servers import connect_engine, launch_engine_server

        servers = dict(
            build_server=None if cfg.engine.url else partial(
                launch_engine_server, engine=cfg.engine, model_dir=str(start_dir), num_cpus=placement.cpus_per_engine,
                log_dir=str(run_dir.resolve() / "engines"), timeout_sec=rt.ray.engine_start_timeout_sec,
            ),
            engine_urls=[cfg.engine.url] if cfg.engine.url else [],
            connect_server=partial(connect_engine, cfg.engine, control=True),
            weight_sync=cfg.engine.weight_sync, weight_sync_timeout_sec=cfg.engine.weight_sync_timeout_sec,
            engine_start_timeout_sec=rt.ray.engine_start_timeout_sec,
        )
    try:
        import ray
    except ImportError:
        raise RayUnavailable("runtime.backend = 'ray' needs Ray: pip install 'fireflash[ray]'") from None
    started = not ray.is_initialized()
    if started:
        # workers start with this interpreter, so on one node they share its virtual environment
        ray.init(address=rt.ray.address, include_dashboard=False)
    writer = MetricsWriter(run_dir, cfg.tracking.tensorboard)
    runtime = RayRuntime(
        tasks=tasks,
        build_rollout=partial(build_rollout_parts, engine=cfg.engine, model_dir=str(start_dir), sandbox=cfg.sandbox,
                              cache_dir=cfg.model.cache_dir, num_cpus=placement.cpus_per_rollout_worker),
        build_trainer=partial(build_trainer, model_dir=str(start_dir), tokenizer_dir=str(start_dir),
                              training=cfg.training, objective=cfg.rl, temperature=cfg.harness.sampling.temperature,
                              cache_dir=cfg.model.cache_dir),
        placement=placement, harness=cfg.harness, objective=cfg.rl, run_dir=run_dir, steps=rt.steps,
        group_size=rt.group_size, groups_per_step=rt.groups_per_step, max_inflight_attempts=rt.max_inflight_attempts,
        max_attempt_retries=rt.max_attempt_retries, discard_zero_signal_groups=rt.discard_zero_signal_groups,
        seed=rt.seed, max_worker_restarts=rt.ray.max_worker_restarts,
        worker_start_timeout_sec=rt.ray.worker_start_timeout_sec,
        mode=rt.mode, hang_margin_sec=rt.hang_margin_sec, max_wall_sec=rt.max_wall_sec,
        checkpoint_every_steps=cfg.training.checkpoint_every_steps, resume=resume, writer=writer,
        save_trajectories=cfg.tracking.save_trajectories, max_queued_groups=rt.max_queued_groups,
        curation=rt.curation, probe_seed=probe_seed(cfg.tasks.pool_manifest), mix=mix_weights(cfg), **servers,
    )
    console.print("[bold]placement[/]:\n  " + "\n  ".join(placement.describe()))
    start = time.perf_counter()
    try:
        with _watch(runtime, rt.steps):
            await runtime.run()
    finally:
        writer.close()
        if started:
            ray.shutdown()
    _summarize(cfg, runtime, run_dir, start)
    return run_dir


def mix_weights(cfg: FireFlashConfig) -> dict[str, float] | None:
    """``[tasks.mix]``'s source → weight (the run loop normalises them), or None without a mix (issue 30)."""
    return {name: src.weight for name, src in cfg.tasks.mix.items()} or None


def _mix_shares(cfg: FireFlashConfig) -> dict[str, float]:
    """``[tasks.mix]``'s source → normalised weight (empty without a mix)."""
    total = sum(src.weight for src in cfg.tasks.mix.values())
    return {name: src.weight / total for name, src in cfg.tasks.mix.items()}


def _mix_line(cfg: FireFlashConfig, tasks: list[Task]) -> str:
    """Each source's task count and share, for the run's first line; empty without a mix."""
    parts = [f"{name} {sum(t.metadata.get('source') == name for t in tasks)} tasks, share {share:.2f}"
             for name, share in _mix_shares(cfg).items()]
    return f" (mix: {'; '.join(parts)})" if parts else ""


def probe_seed(pool_manifest: str | None) -> list[tuple[str, int, int, float]]:
    """``(task_id, passes, attempts, mean_reward)`` of every task in ``tasks.pool_manifest`` (none without one):
    the probe's results seed the online curation state (issue 29). Raises as ``tasks.probe.read_manifest``."""
    if pool_manifest is None:
        return []
    from fireflash.curation.probe import read_manifest

    return [(t.task_id, t.passes, t.attempts, t.mean_reward) for t in read_manifest(pool_manifest).tasks]


def _summarize(cfg: FireFlashConfig, runtime: Any, run_dir: Path, start: float) -> None:
    """The end of a run: steps, version, where the report is (or why no step happened)."""
    trainer = runtime.trainer
    if runtime.stopped_at_wall_limit:
        more = ": continue with --resume" if trainer.step else ""
        console.print(f"[yellow]stopped at runtime.max_wall_sec={cfg.runtime.max_wall_sec}[/]{more}")
    console.print(f"done: {trainer.step} steps, weight version {trainer.weight_version}, {time.perf_counter() - start:.0f} s")
    if runtime.history:
        from fireflash.evaluation.report import write_report

        console.print(f"report: {write_report(run_dir)}/report.md (plots beside it)")
    else:
        t = runtime.total
        console.print(
            f"[yellow]no optimizer step[/]: {t.groups_done} groups finished, {t.groups_zero_signal} had zero signal "
            f"(every attempt scored the same), {t.groups_lost} were lost; a policy that never solves a task gives "
            f"GRPO nothing to learn from — probe the pool (fireflash tasks probe) or warm the policy up first"
        )


def run_training(cfg: FireFlashConfig, resume: bool = False, tasks: list[Task] | None = None) -> Path:
    """Run ``fireflash train``; returns the run directory (checkpoints, metrics.jsonl, trajectories).

    ``tasks``: the pool ``check_training(cfg, resume)`` returned, when the caller ran it already; None runs it.
    """
    return asyncio.run(_train(cfg, resume, tasks))


def describe_plan(cfg: FireFlashConfig) -> str:
    """What ``fireflash train`` would do with ``cfg``, without loading models, starting sandboxes or Ray.

    Raises:
        fireflash.runtime.placement.PlacementError: a Ray placement that does not fit (names the fields).
    """
    rt = cfg.runtime
    attempts = rt.group_size * rt.groups_per_step
    lines = [
        f"backend: {rt.backend} ({rt.mode}); {rt.steps} steps × {rt.groups_per_step} groups × {rt.group_size} attempts "
        f"= {attempts} attempts per step, {rt.max_inflight_attempts} in flight",
        f"model: {cfg.model.name_or_path}; engine: {cfg.engine.kind}"
        + (f" at {cfg.engine.url}" if cfg.engine.url else "")
        + (f"; engine flags: {cfg.engine.args}" if cfg.engine.args else ""),
        f"trainer: AdamW lr {cfg.training.lr}, micro-batches of {cfg.training.micro_batch_tokens} tokens, dtype {cfg.training.dtype}",
        f"objective: R' solve {cfg.rl.solve_reward} / partial ×{cfg.rl.partial_reward_scale}, TIS [{cfg.rl.tis_clip_low}, "
        f"{cfg.rl.tis_clip_high}], SC top-{cfg.rl.score_centering_topk}, floor {cfg.rl.loss_floor_tokens} tokens, "
        f"staleness ≤ {cfg.rl.max_staleness}",
        f"sandbox: {cfg.sandbox.backend}; tasks: {', '.join(cfg.tasks.paths)}"
        + (f" filtered by {cfg.tasks.pool_manifest}" if cfg.tasks.pool_manifest else ""),
        *(["task mix (share of new groups, deficit-based draw): " + ", ".join(
            f"{name} {share:.2f} of {', '.join(cfg.tasks.mix[name].paths)}" for name, share in _mix_shares(cfg).items()
        )] if cfg.tasks.mix else []),
        f"task draw: {rt.curation.sampler}"
        + (f" (retire after {rt.curation.retire_after_groups} zero-signal groups of a kind, re-probe every "
           f"{rt.curation.readmit_every_groups} groups)" if rt.curation.sampler == "online" else ""),
        f"run dir: {cfg.tracking.run_dir}",
    ]
    if rt.backend == "local":
        engine_threads, trainer_threads = role_threads(rt.threads_per_role, cfg.engine.num_threads)
        lines.insert(1, f"placement: one process; torch threads: {engine_threads} for the engine thread, "
                        f"{trainer_threads} for the trainer thread")
    else:
        from fireflash.runtime.placement import plan_placement

        placement = plan_placement(rt.ray, cfg.engine, rt.max_inflight_attempts).describe()
        where = f"join the Ray cluster at {rt.ray.address}" if rt.ray.address else "start a local Ray instance"
        lines[1:1] = [f"placement (Ray; {where}):", *(f"  {line}" for line in placement)]
    return "\n".join(lines)
