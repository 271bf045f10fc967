"""`fireflash sft`: the supervised warm-up on oracle trajectories (issue #10), top to bottom.

    fireflash sft [-c configs/local.toml] [a.b=v ...] [--resume]

tasks (``sft.tasks``, never held-out) → oracle trajectories replayed and graded in real sandboxes
(``RUN_DIR/oracle/``, reused on rerun) → shuffled examples → AdamW steps → checkpoints in the RL format
(``RUN_DIR/checkpoints/step-N``; ``RUN_DIR/model`` links the last one) → metrics.jsonl + TensorBoard.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from fireflash.config import FireFlashConfig
from fireflash.progress import Progress
from fireflash.protocols import Task
from fireflash.sandbox.config import SandboxConfig
from fireflash.sft.config import SFTConfig
from fireflash.tasks.heldout import HeldoutLeak, check_not_heldout

console = Console()


def sft_tasks(s: SFTConfig, run_dir: Path, field: str = "sft.tasks",
              sandbox: SandboxConfig | None = None) -> tuple[list[Task], list[Task]]:
    """The tasks of ``s.tasks`` (held-out ones refused) and their ``s.augment_copies`` renamed copies.

    Copies are written once to ``run_dir/augmented/`` and reused on rerun, like the oracle set. Generated
    tasks (``generated:N``) are not copied: their names are drawn at random already. A task that does not
    load is skipped with its error printed (the error names the task and, for one that needs its image
    under ``sandbox.task_images = 'never'``, that field).

    Args:
        sandbox: ``sandbox.task_images`` places each task and copy on the host's userland or in its image
            (built now if needed), as ``fireflash train`` and ``eval`` do (issue 26); None: host userland only.

    Raises:
        HeldoutLeak: a task belongs to the held-out split.
    """
    from fireflash.sft.augment import augment_tasks
    from fireflash.tasks.families.catalogue import ID_PREFIX as GENERATED_PREFIX
    from fireflash.tasks.loader import load_tasks

    tasks, errors = load_tasks(s.tasks, sandbox, _say)
    for e in errors:
        console.print(f"[yellow]skipped[/] {escape(e)}")
    check_not_heldout(tasks, field)
    hand_written = [t for t in tasks if not t.id.startswith(GENERATED_PREFIX)]
    return tasks, augment_tasks(hand_written, s.augment_copies, run_dir / "augmented", sandbox, _say)


def _say(text: str) -> None:
    """One plain line (an image built, a base substituted): build output holds brackets, never markup."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


async def build_oracle(cfg: FireFlashConfig, tasks: list[Task], out: Path) -> None:
    """Replay and grade every oracle plan into ``out`` (skipped when ``out/dropped.json`` exists)."""
    from fireflash.grading.graders import make_grader
    from fireflash.models import load_tokenizer
    from fireflash.sandbox import make_backend
    from fireflash.sft.collect import collect_oracle, save_oracle
    from fireflash.sft.oracle import plans_for

    if (out / "dropped.json").exists():
        return
    tokenizer = load_tokenizer(cfg.sft.init_from, cfg.model.cache_dir)
    backend = make_backend(cfg.sandbox)
    graders: dict = {}
    try:
        with Progress("oracle replays", console, total=len(plans_for(tasks, cfg.sft.variants))) as bar:
            solved = 0

            def tick(_task, _index, outcome) -> None:
                nonlocal solved
                solved += bool(outcome.score and outcome.score.solved)
                bar.advance(info=f"{solved} solved")

            result = await collect_oracle(
                tasks, cfg.sft.variants, backend=backend, tokenizer=tokenizer, harness=cfg.harness,
                grader_for=lambda t: graders.setdefault(t.id, make_grader(t.grader)),
                max_concurrent=cfg.sft.max_concurrent, max_retries=cfg.runtime.max_attempt_retries, on_outcome=tick,
            )
    finally:
        await backend.close()
    save_oracle(result, out)
    console.print(f"oracle: {len(result.trajectories)} of {result.n_plans} plans solved their task "
                  f"({len(result.dropped)} dropped, reasons in {out / 'dropped.json'})")


def schedule(n_examples: int, batch_size: int, epochs: float, seed: int) -> list[list[int]]:
    """Example indices of every optimizer step: each epoch a fresh shuffle cut into batches (last partial kept)."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(math.ceil(epochs)):
        epoch = list(range(n_examples))
        rng.shuffle(epoch)
        order += epoch
    order = order[: max(1, round(n_examples * epochs))]
    return [order[i: i + batch_size] for i in range(0, len(order), batch_size)]


def run_sft(cfg: FireFlashConfig, resume: bool) -> Path:
    """Run the warm-up's passes (``[sft]``, then each of ``sft.passes`` from the one before); returns
    ``RUN_DIR/model``, a link to the last pass's final checkpoint, made only once every pass has finished.

    Raises:
        RunDirInUse: without ``resume``, ``sft.run_dir`` already holds checkpoints or metrics (before any work).
        CheckpointError: with ``resume``, it holds no checkpoint (before any work).
    """
    from fireflash.tasks.loader import load_tasks
    from fireflash.tracking import refuse_existing_run
    from fireflash.training.checkpoint import latest_checkpoint

    s = cfg.sft
    run_dir = Path(s.run_dir)
    if resume:
        latest_checkpoint(run_dir / "checkpoints")  # before the oracle replays, not after them
    else:  # its oracle set is reused; its checkpoints and metrics would be overwritten
        refuse_existing_run(run_dir, "sft.run_dir")
    for i, p in enumerate(s.passes):  # a later pass's held-out task is refused now, not after the first pass
        check_not_heldout(load_tasks(p.tasks)[0], f"sft.passes[{i}].tasks")
    final = _run_pass(cfg, run_dir, resume)
    for k, p in enumerate(s.passes, start=2):
        pass_dir = run_dir / f"pass-{k}"
        update = {"tasks": p.tasks, "epochs": p.epochs, "lr": p.lr, "augment_copies": p.augment_copies,
                  "init_from": str(final), "run_dir": str(pass_dir), "passes": []}
        pass_cfg = cfg.model_copy(update={"sft": s.model_copy(update=update)})
        # a pass a killed run checkpointed continues; one it never checkpointed starts afresh, without the
        # metrics rows of its lost steps
        go_on = resume and (pass_dir / "checkpoints" / "latest").is_file()
        if not go_on:
            (pass_dir / "metrics.jsonl").unlink(missing_ok=True)
        final = _run_pass(pass_cfg, pass_dir, go_on, f"sft.passes[{k - 2}].tasks")
    link = run_dir / "model"
    tmp = run_dir / ".model.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(final.relative_to(run_dir))
    os.replace(tmp, link)
    return link


def _run_pass(cfg: FireFlashConfig, run_dir: Path, resume: bool, field: str = "sft.tasks") -> Path:
    """One pass of ``cfg.sft`` in ``run_dir``: oracle set, steps, checkpoints; returns its final checkpoint."""
    import torch

    from fireflash.models import load_policy, load_tokenizer
    from fireflash.sft.collect import load_oracle
    from fireflash.sft.data import examples_from
    from fireflash.sft.trainer import SFTTrainer
    from fireflash.tracking import MetricsWriter
    from fireflash.training.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint

    s = cfg.sft
    ckpt_root = run_dir / "checkpoints"
    run_dir.mkdir(parents=True, exist_ok=True)
    tasks, copies = sft_tasks(cfg.sft, run_dir, field, cfg.sandbox)
    asyncio.run(build_oracle(cfg, tasks + copies, run_dir / "oracle"))
    trajectories = load_oracle(run_dir / "oracle")
    if copies:
        kept = {t.metadata["oracle"]["task_id"] for t in trajectories} & {c.id for c in copies}
        console.print(f"augmented: {len(kept)} of {len(copies)} renamed copies kept at least one trajectory "
                      f"({run_dir / 'augmented'})")
    examples = examples_from(trajectories)
    if not examples:
        raise ValueError(f"{run_dir / 'oracle'}: no oracle trajectory solved its task; nothing to learn from")
    steps = schedule(len(examples), s.batch_size, s.epochs, s.seed)
    torch.manual_seed(s.seed)
    torch.set_num_threads(os.cpu_count() or 1)
    start_step = 0
    source = s.init_from
    if resume:
        source = str(latest_checkpoint(ckpt_root))
    tokenizer = load_tokenizer(source, cfg.model.cache_dir)
    model = load_policy(source, cfg.model.cache_dir)
    if resume:
        start_step = json.loads((Path(source) / "fireflash.json").read_text())["step"]
    trainer = SFTTrainer(model, tokenizer, s, total_steps=len(steps), start_step=start_step)
    if resume:
        load_checkpoint_state(Path(source), trainer.optimizer)
    (run_dir / "sft_config.json").write_text(cfg.model_dump_json(indent=1))
    writer = MetricsWriter(run_dir, tensorboard=cfg.tracking.tensorboard)
    if resume:  # rows a killed run wrote past its checkpoint are run again; a torn last line would glue to the next
        writer.drop_after(start_step)
    console.print(f"SFT: {len(examples)} examples, {len(steps)} steps of {s.batch_size}, "
                  f"{s.epochs} epochs, lr {s.lr}, from {source}")
    path = None
    try:
        with Progress("sft steps", console, total=len(steps), completed=start_step) as bar:
            for i in range(start_step, len(steps)):
                metrics = trainer.step([examples[j] for j in steps[i]])
                writer.write(i + 1, metrics | {"epoch": (i + 1) * s.batch_size / len(examples)})
                bar.advance(info=f"loss {metrics['loss']:.3f} acc {metrics['accuracy']:.2f}")
                last = i + 1 == len(steps)
                if last or (i + 1) % max(1, len(steps) // 4) == 0:
                    path = save_checkpoint(ckpt_root, i + 1, model, tokenizer, trainer.optimizer, 0,
                                           {"sft_step": i + 1}, keep=2)
    finally:
        writer.close()
    path = path or latest_checkpoint(ckpt_root)
    (run_dir / "summary.json").write_text(json.dumps({"examples": len(examples), "steps": len(steps), "checkpoint": str(path)}))
    return path


ConfigOpt = typer.Option(None, "--config", "-c", help="TOML config file (default: built-in defaults).")
OverridesArg = typer.Argument(None, help="Overrides as KEY.PATH=VALUE, e.g. sft.epochs=1.", show_default=False)


def sft_command(
    config: Path | None = ConfigOpt,
    overrides: list[str] | None = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue from RUN_DIR/checkpoints' latest checkpoint."),
) -> None:
    """Supervised warm-up on oracle trajectories of the training tasks (cold start before RL)."""
    from fireflash.cli.main import resolve_config
    from fireflash.models import ModelNotFound
    from fireflash.sandbox import SandboxUnavailable
    from fireflash.sft.oracle import OracleError
    from fireflash.tasks import TaskLoadError
    from fireflash.tracking import RunDirInUse
    from fireflash.training.checkpoint import CheckpointError

    cfg = resolve_config(config, overrides)
    try:
        link = run_sft(cfg, resume)
    except (HeldoutLeak, OracleError, TaskLoadError, SandboxUnavailable, ModelNotFound, CheckpointError, RunDirInUse,
            ValueError) as e:
        typer.echo(f"{type(e).__name__}: {e}", err=True)
        raise typer.Exit(2) from None
    console.print(f"SFT model: {link}  (use it as model.name_or_path for probe, train and eval)")
