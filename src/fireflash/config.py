"""One typed config tree, loaded from TOML with ``a.b=value`` overrides (STYLE.md 14).

Every number of RECIPE.md is a field here (in the component config that owns it) with the reference
value as its default. Each component's ``FooConfig`` lives beside ``Foo`` in its package; this module only
composes them and turns a bad file into one readable error:

    ConfigError: invalid config configs/local.toml:
      runtime.group_size = 1: Input should be greater than or equal to 2
      training.lr = inf: must be a finite number (inf and nan are not allowed)

Usage::

    cfg = load_config("configs/local.toml", ["runtime.steps=3", "rl.max_staleness=4"])
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fireflash.engines.config import EngineConfig
from fireflash.evaluation.config import EvalConfig
from fireflash.harness.config import HarnessConfig
from fireflash.models import ModelConfig
from fireflash.rl.config import ObjectiveConfig
from fireflash.runtime.config import RuntimeConfig
from fireflash.sandbox.config import SandboxConfig
from fireflash.sft.config import SFTConfig
from fireflash.tasks.config import TasksConfig
from fireflash.training.config import TrainerConfig


class TrackingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_dir: str = Field("runs/local", description="Directory for checkpoints, metrics, trajectories and reports.")
    tensorboard: bool = Field(True, description="Write TensorBoard event files beside metrics.jsonl.")
    save_trajectories: bool = Field(True, description="Save every attempt's trajectory JSON.")


class FireFlashConfig(BaseModel):
    """The whole run. Sections mirror the packages of DESIGN.md."""

    model_config = ConfigDict(extra="forbid")

    model: ModelConfig = Field(default_factory=ModelConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    rl: ObjectiveConfig = Field(default_factory=ObjectiveConfig)
    training: TrainerConfig = Field(default_factory=TrainerConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    evaluation: EvalConfig = Field(default_factory=EvalConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _consistent(self) -> FireFlashConfig:
        window = self.harness.context_window_tokens
        if self.training.micro_batch_tokens < window:
            # a segment can be as long as the window; it must fit one micro-batch or it never trains
            raise ValueError(
                f"training.micro_batch_tokens ({self.training.micro_batch_tokens}) < harness.context_window_tokens "
                f"({window}): a full-context segment would fit no micro-batch; raise micro_batch_tokens"
            )
        if self.rl.score_centering and self.harness.sampling.n_top_logprobs < self.rl.score_centering_topk:
            raise ValueError(
                f"harness.sampling.n_top_logprobs ({self.harness.sampling.n_top_logprobs}) < rl.score_centering_topk "
                f"({self.rl.score_centering_topk}): the engine must return at least the top-k that centering uses"
            )
        return self


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the source, the field path and the fix."""


ROLLOUT_LOGPROBS = {
    "local": "the local engine reports log q of softmax(logits / temperature) before top-p truncation "
    "(engines/sampling.py)",
    "scripted": "the scripted engine reports log q of softmax(logits / temperature) before top-p truncation",
    "sglang": "SGLang, and FireFlash's SGLang-compatible server, report log q of softmax(logits / temperature) "
    "before top-p truncation",
    "vllm": "the vLLM client refuses top_p < 1 (a vLLM server's --logprobs-mode decides whether its log-probs "
    "include truncation, and a server at engine.url may run with either)",
}
"""engine.kind → which distribution its reported log q belongs to (``check_trainable_sampling``)."""


def check_trainable_sampling(cfg: FireFlashConfig, probing: bool = False) -> None:
    """Refuse rollout sampling whose log q the trainer cannot correct for (RECIPE.md §5).

    TIS and score centering weigh each token by p_trainer / q with q the engine's reported probability.
    The trainer's p is the full softmax(logits / temperature); a token drawn after top-p truncation has
    probability q / Z, so with the untruncated q every ratio would be off by Z. No engine reports log-probs
    of the truncated distribution (``ROLLOUT_LOGPROBS``), so top_p < 1 is refused on all of them, and so is
    greedy decoding (its tokens are not draws from the q it reports). Neither ``top_k`` nor ``min_p``
    sampling exists in the config, and no engine client sends them (SGLang's /generate then samples the
    whole vocabulary). Evaluation may truncate; probing runs under the training conditions (RECIPE.md §2),
    so ``probing=True`` refuses the same settings.

    Raises:
        ConfigError: one line naming the field, why, and the fix.
    """
    s = cfg.harness.sampling
    why = "training rollouts must be drawn from the full softmax(logits / temperature)"
    if probing:
        why = f"probing runs under the training conditions (RECIPE.md §2), and {why}"
    if s.temperature == 0:
        raise ConfigError(
            f"harness.sampling.temperature = 0: {why}, and greedy tokens are not draws from the q the engine reports, "
            "so importance ratios (RECIPE.md §5) would be wrong; set harness.sampling.temperature = 1.0"
        )
    if s.top_p < 1.0:
        raise ConfigError(
            f"harness.sampling.top_p = {s.top_p}: {why}; {ROLLOUT_LOGPROBS[cfg.engine.kind]}, so the trainer's "
            "importance ratios (TIS, score centering; RECIPE.md §5) would use the wrong q; set "
            "harness.sampling.top_p = 1.0 (only evaluation may truncate)"
        )


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` → (["a", "b"], value). Values are TOML literals; anything else is a plain string.

    Raises:
        ConfigError: no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. runtime.steps=3")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.split("."), value


def _set_path(tree: dict[str, Any], path: list[str], value: Any, source: str) -> None:
    node = tree
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {'.'.join(path[: i + 1])} is a value, not a section; cannot set {'.'.join(path)}")
        node = child
    node[path[-1]] = value


def _allowed(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """The field names allowed at ``loc`` (for unknown-key errors)."""
    parts = list(loc[:-1])
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        annotation = getattr(field, "annotation", None)
        if get_origin(annotation) is dict and parts:  # a table of sections (tasks.mix): skip its key
            annotation = get_args(annotation)[1]
            parts.pop(0)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    return ", ".join(sorted(model.model_fields))


_NOT_FINITE = "must be a finite number (inf and nan are not allowed)"
_NOT_BOOL = "expected a number, not a boolean"
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _format(error: ValidationError, source: str, data: dict[str, Any]) -> str:
    lines = [f"invalid config {source}:"]
    for e in error.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc) or "(root)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {path}: unknown key; allowed here: {_allowed(FireFlashConfig, loc)}")
            continue
        msg = e["msg"].removeprefix("Value error, ")
        value: Any = data
        for part in loc:
            value = value.get(part, "<missing>") if isinstance(value, dict) else value
        if isinstance(value, float) and not math.isfinite(value):  # nan fails every bound with a confusing message
            msg = _NOT_FINITE
        elif isinstance(value, bool) and e["type"] in _BOUNDS:  # false became 0, then failed its bound
            msg = _NOT_BOOL
        if e["type"] == "missing":
            lines.append(f"  {path}: required field missing")
        elif not loc:  # a check across sections: the message names its fields
            lines.append(f"  {msg}")
        elif isinstance(value, dict):  # a cross-field check on a whole section: the message names the fields
            lines.append(f"  {path}: {msg}")
        else:
            lines.append(f"  {path} = {str(value).lower() if isinstance(value, bool) else repr(value)}: {msg}")
    return "\n".join(lines)


def _odd_numbers(value: Any, raw: Any, path: str) -> dict[str, str]:
    """Field path → error line for numbers pydantic lets through: inf / nan anywhere in the validated tree, and
    a TOML boolean turned into a number (``runtime.steps = true`` would run 1 step). ``raw``: the input at ``path``."""
    if isinstance(value, BaseModel | dict):
        items = value.items() if isinstance(value, dict) else ((k, getattr(value, k)) for k in type(value).model_fields)
        raw = raw if isinstance(raw, dict) else {}
        return {p: line for k, v in items for p, line in _odd_numbers(v, raw.get(k), f"{path}.{k}" if path else k).items()}
    if isinstance(value, list | tuple):
        raws = list(raw) if isinstance(raw, list | tuple) and len(raw) == len(value) else [None] * len(value)
        return {p: line for i, (v, r) in enumerate(zip(value, raws)) for p, line in _odd_numbers(v, r, f"{path}.{i}").items()}
    if isinstance(value, float) and not math.isfinite(value):
        return {path: f"  {path} = {value!r}: {_NOT_FINITE}"}
    if isinstance(raw, bool) and isinstance(value, int | float) and not isinstance(value, bool):
        return {path: f"  {path} = {str(raw).lower()}: {_NOT_BOOL}"}
    return {}


def build_config(data: dict[str, Any], source: str = "<config>") -> FireFlashConfig:
    """Validate a plain dict as a ``FireFlashConfig``; inf / nan and booleans given for numbers are refused too.

    Raises:
        ConfigError: one message listing every bad field with its path, value and what is allowed.
    """
    try:
        cfg = FireFlashConfig.model_validate(data)
    except ValidationError as e:  # inf / nan written in the file are named even when other fields fail first
        reported = {".".join(str(p) for p in err["loc"]) for err in e.errors()}
        odd = [line for p, line in _odd_numbers(data, data, "").items() if p not in reported]
        raise ConfigError("\n".join([_format(e, source, data), *odd])) from None
    odd = list(_odd_numbers(cfg, data, "").values())
    if odd:
        raise ConfigError("\n".join([f"invalid config {source}:", *odd]))
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> FireFlashConfig:
    """Load TOML at ``path`` (None: all defaults), apply ``a.b=value`` overrides, validate.

    Raises:
        ConfigError: missing or unparsable file, malformed override, or invalid values (named by path).
    """
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found (pass an existing TOML file, e.g. configs/local.toml)")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 (byte {e.start} is 0x{e.object[e.start]:02x}); save the file as UTF-8, "
                              "as TOML requires") from None
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the config file ({e.strerror})") from None
    for text in overrides or []:
        keys, value = parse_override(text)
        _set_path(data, keys, value, f"override {text!r}")
    if overrides:
        source += f" (with overrides {', '.join(overrides)})"
    return build_config(data, source)


def dump_config(cfg: FireFlashConfig) -> str:
    """The resolved config as TOML (saved into every run directory)."""
    import tomli_w

    return tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True))
