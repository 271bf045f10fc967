"""Harness configuration (RECIPE.md §4). Identical for training, probing and evaluation."""

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature; the trainer's logprobs use the same.")
    top_p: float = Field(
        1.0, gt=0.0, le=1.0, description="Nucleus sampling mass. Training and probing refuse < 1 (engines report log q "
        "before truncation, so importance ratios would be wrong; config.check_trainable_sampling); eval may truncate."
    )
    max_new_tokens_per_turn: int = Field(512, ge=1, description="Per-turn cap; clamped to the room left in context.")
    n_top_logprobs: int = Field(32, ge=0, description="K top log-probabilities per token for score centering (RECIPE.md §5).")


class HarnessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    max_turns: int = Field(30, ge=1, description="Turn budget per attempt.")
    max_total_tokens: int = Field(32768, ge=1, description="Sampled + prompt tokens budget over the whole attempt.")
    context_window_tokens: int = Field(8192, ge=256, description="Model context window, tokens.")
    compact_at: float = Field(0.85, gt=0.0, le=1.0, description="Compact when context use reaches this share (RECIPE.md §4).")
    bash_timeout_sec: float = Field(120.0, gt=0, description="Default foreground timeout; past it the command moves to the background.")
    bash_max_timeout_sec: float = Field(600.0, gt=0, description="Largest timeout the model may ask for.")
    preview_chars: int = Field(2000, gt=0, description="Characters of command output shown inline (head+tail).")
    read_default_lines: int = Field(2000, gt=0, description="Read tool's default line limit.")
    read_max_line_chars: int = Field(2000, gt=0, description="Longer lines are cut in Read output.")
    read_max_chars: int = Field(
        24000, gt=0, description="A Read whose numbered output exceeds this many characters is refused with a hint."
    )
    few_shot: bool = Field(False, description="Prepend worked tool-call exchanges (recorded in the trajectory).")
    assistant_prefix: str = Field("", description="Text every assistant turn starts with (prompt tokens, loss mask 0).")
    system_prompt_path: str | None = Field(None, description="Template file; None uses the built-in efficient-workflow prompt.")
    summary_max_new_tokens: int = Field(1024, ge=16, description="Token cap of the compaction summary turn.")
    min_turn_room_tokens: int = Field(
        32, ge=1, description="A turn needs at least this much room left in the context window, tokens; else it ends."
    )
    check_retokenization: bool = Field(
        True, description="Each turn, re-tokenize the sampled text and record where it differs from the sampled ids."
    )

    @model_validator(mode="after")
    def _timeouts(self) -> "HarnessConfig":
        if self.bash_timeout_sec > self.bash_max_timeout_sec:
            raise ValueError(
                f"bash_timeout_sec ({self.bash_timeout_sec}) > bash_max_timeout_sec ({self.bash_max_timeout_sec})"
            )
        return self
