"""The seams of FireFlash: the records that flow through the pipeline and the protocols between stages.

    tasks ──► sandbox ──► harness ◄──► engines ──► grading ──► Group ──► rl ──► training ──► weights

Everything a stage hands to the next is defined here, so the whole contract fits on one screen
(DESIGN.md "The data that flows"). Records that touch disk are pydantic models carrying a
``schema_version``; per-token arrays are plain lists so a trajectory round-trips through JSON exactly
(``Trajectory.model_dump_json`` / ``Trajectory.model_validate_json``) and can be saved, replayed and
inspected. Tensors are built from them only in ``training``.

Shape notation in docstrings: T tokens in a segment, K top-k candidates per position.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    import torch

SCHEMA_VERSION = 1


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where FireFlash caches what it builds (models, task environments, image rootfs): ``cache_dir``, else
    ``$FIREFLASH_CACHE``, else ``~/.cache/fireflash``. Here because every stage may cache and this module is
    the one they all may import."""
    return Path(cache_dir or os.environ.get("FIREFLASH_CACHE") or Path.home() / ".cache" / "fireflash")


class Record(BaseModel):
    """Base of every record: unknown fields are errors, so a typo never silently drops data."""

    model_config = ConfigDict(extra="forbid")


# ───────────────────────────────────────── tasks ─────────────────────────────────────────


VERIFIER_TOOLS_DIR = "/.fireflash-verifier"
"""Where ``TaskEnvironment.verifier_tools`` appears inside a sandbox: read-only, at the top level (no parent
directory the image or the agent could turn into a symlink)."""


class TaskLimits(Record):
    agent_timeout_sec: float = Field(900.0, gt=0, description="Wall-clock limit of one attempt, seconds.")
    verifier_timeout_sec: float = Field(180.0, gt=0, description="Wall-clock limit of grading, seconds.")
    max_turns: int | None = Field(None, ge=1, description="Turn budget; None uses the harness default.")


class TaskEnvironment(Record):
    workdir: str = Field("/app", description="Absolute path of the agent's working directory.")
    files_dir: Path | None = Field(None, description="Host directory copied to `workdir` in the parent sandbox.")
    dockerfile: Path | None = Field(None, description="Dockerfile materialised into the parent, if any.")
    setup_commands: list[str] = Field(default_factory=list, description="Shell run once in the parent, offline.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for every command.")
    cpus: float = Field(1.0, gt=0, description="CPU quota in cores.")
    memory_mb: int = Field(2048, gt=0, description="Memory limit, MiB.")
    storage_mb: int = Field(1024, gt=0, description="Disk cap of the writable layer, MiB.")
    pids_max: int = Field(512, gt=0, description="Process/thread limit.")
    allow_internet: bool = Field(False, description="Network access (always off in training).")
    image: str | None = Field(
        None,
        description="A local OCI image (reference or id) whose files are the sandbox's root, read-only under its "
        "writable overlay; None: the host's own userland (/usr, /etc) with the Dockerfile materialised.",
    )
    user: str | None = Field(
        None,
        description="Image user the agent's commands run as ('name', 'uid', 'name:group', 'uid:gid'); None: root "
        "(inside the sandbox's user namespace, never host root). Image-backed sandboxes only.",
    )
    verifier_user: str | None = Field(
        None, description="Image user the verifier runs as, in the same forms; None: as `user`. Image-backed only."
    )
    verifier_tools: Path | None = Field(
        None,
        description="Host directory of what the task's test.sh installs at test time (uv, a wheelhouse), staged at "
        "build time (tasks/verifier_staging.py); bound read-only at VERIFIER_TOOLS_DIR in every sandbox of the "
        "environment, where the verifier finds it offline. Image-backed only.",
    )


class GraderSpec(Record):
    kind: str = Field("tests", description="Built-in grader name ('tests', 'swe') or a dotted function path.")
    tests_dir: Path | None = Field(None, description="Host directory copied in only at grading time.")
    test_command: str = Field("bash /tests/test.sh", description="Command that runs the checks.")
    fail_to_pass: list[str] = Field(default_factory=list, description="Test ids the solution must fix (SWE).")
    pass_to_pass: list[str] = Field(default_factory=list, description="Test ids that must keep passing (SWE).")


class Task(Record):
    """One task: a Harbor / Terminal-Bench directory loaded into memory (RECIPE.md §3, §6)."""

    schema_version: int = SCHEMA_VERSION
    id: str
    instruction: str
    path: Path | None = Field(None, description="The task directory it was loaded from.")
    environment: TaskEnvironment = Field(default_factory=TaskEnvironment)
    grader: GraderSpec = Field(default_factory=GraderSpec)
    solution_path: Path | None = Field(None, description="Reference solution script (solve.sh).")
    limits: TaskLimits = Field(default_factory=TaskLimits)
    metadata: dict[str, Any] = Field(default_factory=dict, description="category, language, difficulty, split, ...")


# ───────────────────────────────────────── rollouts ─────────────────────────────────────────


class Status(str, enum.Enum):
    """How an attempt ended."""

    COMPLETED = "completed"  # the model finished (answered without a tool call or called stop)
    TRUNCATED = "truncated"  # a limit was hit: turns, tokens, context or wall clock
    ABORTED = "aborted"  # stopped from outside (shutdown, weight-sync abort)
    FAILED = "failed"  # infrastructure failure: sandbox, engine or harness error; not the model's fault


class Segment(Record):
    """One token sequence the policy saw; a new segment starts at each compaction (RECIPE.md §4).

    All per-token lists have the same length T. Positions with ``loss_mask == 0`` (system prompt, user
    turns, tool results, assistant-prefix tokens) carry ``rollout_logprobs == 0.0``, empty top-k rows and
    ``weight_version == -1``.
    """

    token_ids: list[int] = Field(description="[T] exactly the ids the engine consumed and sampled.")
    loss_mask: list[int] = Field(description="[T] 1 on tokens the policy sampled, 0 elsewhere.")
    rollout_logprobs: list[float] = Field(
        description="[T] log q(token) of each sampled token under the engine's sampling distribution "
        "(after temperature, before top-p), natural log."
    )
    topk_ids: list[list[int]] = Field(description="[T][K] the sampler's top-K candidate ids; [] where mask is 0.")
    topk_logprobs: list[list[float]] = Field(description="[T][K] their log q; [] where mask is 0.")
    weight_version: list[int] = Field(description="[T] weight version that sampled each token; -1 where mask is 0.")

    @model_validator(mode="after")
    def _same_length(self) -> Segment:
        n = len(self.token_ids)
        for name in ("loss_mask", "rollout_logprobs", "topk_ids", "topk_logprobs", "weight_version"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Segment.{name} has {len(getattr(self, name))} entries, token_ids has {n}")
        return self

    @property
    def n_sampled_tokens(self) -> int:
        return sum(self.loss_mask)


class ToolCall(Record):
    id: str
    name: str = Field(description="Bash, Read, Write or Edit.")
    arguments: dict[str, Any]


class Message(Record):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    reasoning: str | None = Field(None, description="Reasoning text kept in the history (RECIPE.md §4).")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class TokenCounts(Record):
    n_input_tokens: int = Field(0, description="Prompt tokens sent to the engine, summed over turns.")
    n_cached_input_tokens: int = Field(0, description="Of those, served from the engine's prefix cache.")
    n_output_tokens: int = Field(0, description="Tokens sampled by the policy.")


class ErrorInfo(Record):
    """A failure as structured data (Harbor's exception info)."""

    type: str
    message: str
    traceback: str = ""


class Trajectory(Record):
    """One attempt at one task: what the policy saw and did, token-exact (DESIGN.md, STYLE.md 7)."""

    schema_version: int = SCHEMA_VERSION
    task_id: str
    attempt_id: str
    segments: list[Segment] = Field(default_factory=list, description="Token sequences; >1 after compaction.")
    messages: list[Message] = Field(default_factory=list, description="The readable conversation.")
    status: Status = Status.COMPLETED
    finish_reason: str = Field("", description="Why it ended: 'stop', 'max_turns', 'context', 'timeout', ...")
    n_turns: int = 0
    token_counts: TokenCounts = Field(default_factory=TokenCounts)
    timings_sec: dict[str, float] = Field(default_factory=dict, description="Seconds per phase: 'engine', 'tools', ...")
    error: ErrorInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict, description="Harness settings recorded with the attempt.")

    @model_validator(mode="after")
    def _known_schema(self) -> Trajectory:
        if self.schema_version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this FireFlash ({SCHEMA_VERSION})")
        return self

    @property
    def n_sampled_tokens(self) -> int:
        """Policy-sampled tokens over all segments (the loss-floor numerator, RECIPE.md §5)."""
        return sum(s.n_sampled_tokens for s in self.segments)

    @property
    def sampled_logprob_sum(self) -> float:
        """Σ log q (nats) over the policy-sampled tokens of all segments.

        ``-sampled_logprob_sum / n_sampled_tokens`` is the Monte-Carlo estimate of the sampler's entropy per
        token on the attempt's own states: E_{y~q}[-log q(y)] = H(q). At temperature 1 that is the policy's.
        """
        return sum(lp for s in self.segments for lp, m in zip(s.rollout_logprobs, s.loss_mask) if m)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json())

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        return cls.model_validate_json(Path(path).read_text())


class Score(Record):
    """The grader's verdict on one attempt (RECIPE.md §3)."""

    schema_version: int = SCHEMA_VERSION
    reward: float = Field(ge=0.0, le=1.0, description="Terminal reward R in [0, 1].")
    solved: bool = Field(description="Every check passed.")
    checks_passed: int = Field(0, ge=0)
    checks_total: int = Field(0, ge=0)
    reason: str = Field("", description="'', 'timeout', 'grader_error', 'no_report', ...")
    log: str = Field("", description="Tail of the grader's output.")
    duration_sec: float = 0.0


class Group(Record):
    """The attempts at one task, scored; advantages are filled by ``rl`` (RECIPE.md §5)."""

    task_id: str
    trajectories: list[Trajectory]
    scores: list[Score]
    advantages: list[float] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Group:
        if len(self.trajectories) != len(self.scores):
            raise ValueError(f"group {self.task_id}: {len(self.trajectories)} trajectories, {len(self.scores)} scores")
        if self.advantages is not None and len(self.advantages) != len(self.scores):
            raise ValueError(f"group {self.task_id}: {len(self.advantages)} advantages, {len(self.scores)} scores")
        return self


# ───────────────────────────────────────── sandbox ─────────────────────────────────────────


class ExecResult(Record):
    """The outcome of one shell command. Full output lives in a file inside the sandbox."""

    exit_code: int | None = Field(description="None when the command did not finish (killed or backgrounded).")
    output_path: str = Field(description="Path, inside the sandbox, of the file holding stdout+stderr.")
    output_size_bytes: int
    preview: str = Field(description="Head + tail of the output, decoded with replacement characters.")
    preview_truncated: bool = False
    duration_sec: float
    timed_out: bool = False
    job_id: str | None = Field(None, description="Set when the command runs (or was moved) in the background.")
    output_kept: bool = Field(
        True,
        description="False when the output file was deleted at once because it alone exceeds the sandbox's output "
        "budget: ``output_path`` then names no file and only ``preview`` remains.",
    )


class Job(Record):
    """A background command."""

    job_id: str
    command: str
    output_path: str
    running: bool
    exit_code: int | None = None
    output_size_bytes: int = 0
    kill_report: str | None = Field(
        None, description="Set by kill_job: what it killed, and any process of the job it could not kill."
    )


@runtime_checkable
class Sandbox(Protocol):
    """An isolated, forkable environment with a persistent shell (RECIPE.md §1, STYLE.md 10).

    Backends state in their module docstring what isolation they do and do not guarantee.
    Raises ``fireflash.sandbox.SandboxError`` (and subclasses) on infrastructure failure.
    """

    async def exec(
        self,
        command: str,
        timeout_sec: float | None = None,
        background: bool = False,
        on_timeout: Literal["kill", "background"] = "kill",
    ) -> ExecResult:
        """Run ``command`` in the persistent shell (cwd and exports persist between calls)."""
        ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    async def fork(self, user: str | None = None, offline: bool = False) -> Sandbox:
        """A copy-on-write child with this sandbox's current files (not its processes).

        ``user``: the child's user (``TaskEnvironment.user`` forms; the verifier's); None: this sandbox's.
        ``offline``: the child has no network even when this sandbox has it (the verifier's fork).
        """
        ...

    async def jobs(self) -> list[Job]: ...

    async def kill_job(self, job_id: str) -> None:
        """Kill a background job, its whole process tree and the processes that left it (setsid, double fork).

        What was killed (and anything that could not be) is the job's ``Job.kill_report`` in ``jobs()``.
        """
        ...

    async def diff(self) -> list[str]:
        """Paths the sandbox changed relative to its parent environment."""
        ...

    async def close(self) -> None:
        """Leave nothing behind: no process, mount, cgroup or directory."""
        ...


@runtime_checkable
class SandboxBackend(Protocol):
    """Builds per-task parent environments; attempts are ``fork()``s of a parent (RECIPE.md §1)."""

    async def prepare(self, env: TaskEnvironment, name: str) -> Sandbox:
        """Build (or reuse) the parent for ``name``: files at ``env.workdir``, setup run once, offline."""
        ...

    async def close(self) -> None:
        """Close every parent and sandbox this backend made."""
        ...


# ───────────────────────────────────────── engines ─────────────────────────────────────────


class SamplingParams(Record):
    temperature: float = Field(1.0, ge=0.0, description="0 means greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, ge=1)
    stop_token_ids: list[int] = Field(default_factory=list)
    n_top_logprobs: int = Field(32, ge=0, description="K: candidates returned per position (RECIPE.md §5).")
    seed: int | None = None


class GenerateRequest(Record):
    request_id: str
    prompt_ids: list[int] = Field(description="[P] the full prompt, token ids.")
    params: SamplingParams = Field(default_factory=SamplingParams)


class GenerateResult(Record):
    """What the engine sampled for one request.

    ``logprobs`` / ``topk_logprobs`` are natural-log probabilities under the temperature-scaled
    distribution softmax(logits / temperature) before top-p truncation — the distribution the trainer
    must reproduce for importance ratios (RECIPE.md §5). With temperature 0 they are of softmax(logits).
    """

    request_id: str
    token_ids: list[int] = Field(description="[N] sampled ids, including a sampled stop token.")
    logprobs: list[float] = Field(description="[N] log q of each sampled id.")
    topk_ids: list[list[int]] = Field(description="[N][K] top-K ids per position, by descending q.")
    topk_logprobs: list[list[float]] = Field(description="[N][K] their log q.")
    finish_reason: Literal["stop", "length", "abort"]
    weight_version: int = Field(description="The version of the weights that sampled every token here.")
    n_cached_prompt_tokens: int = Field(0, description="Prompt tokens served from the prefix cache.")
    timings_sec: dict[str, float] = Field(default_factory=dict, description="'queue', 'prefill', 'decode'.")


@runtime_checkable
class Engine(Protocol):
    """Token ids in → sampled ids, logprobs, top-k and weight version out (RECIPE.md §1, §5).

    Engines know nothing of tasks or rewards. A request that started on version v finishes on v;
    requests admitted after ``update_weights`` use the new version.
    """

    @property
    def weight_version(self) -> int: ...

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]: ...

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | Path, version: int) -> None:
        """Install new weights (a state dict, or an HF model directory) tagged ``version``."""
        ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...


# ───────────────────────────────────────── grading ─────────────────────────────────────────


@runtime_checkable
class Grader(Protocol):
    """Scores an attempt's final state. Grades a *fork* of ``sandbox`` so the agent never sees tests."""

    async def grade(self, task: Task, sandbox: Sandbox) -> Score: ...
