"""`fireflash train` on a task mix (issue 30 done-when: a mix of bundled and generated SWE tasks), end to end.

The local backend, the tiny random model, real bubblewrap sandboxes and graders, two steps. The "generated"
source is a directory of task directories, as `fireflash tasks generate swe --out DIR` writes, holding bundled
SWE tasks that run on the host's userland (real generated tasks need their podman images: the lead's run).
The random model solves nothing, so zero-signal groups are kept for training (the mix is what is tested).
"""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from fireflash.cli import app
from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.tasks.loader import DATA_DIR
from fireflash.tracking import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]


def test_train_on_a_mix_of_bundled_and_generated_swe_tasks_reports_both_sources(tmp_path):
    base, run_dir, generated = tmp_path / "base", tmp_path / "run", tmp_path / "swe-generated"
    tok = build_tiny_tokenizer()
    build_tiny_model(len(tok)).save_pretrained(base)
    tok.save_pretrained(base)
    for name in ("swe-slugify", "swe-word-wrap"):
        shutil.copytree(DATA_DIR / "train" / name, generated / name)
    bundled = DATA_DIR / "train" / "text-count-lines"
    config = tmp_path / "mix.toml"
    config.write_text(f"""
[model]
name_or_path = "{base}"
[tasks.mix]
agentic = {{ paths = ["{bundled}"], weight = 0.52 }}
swe = {{ paths = ["{generated}"], weight = 0.48 }}
[engine]
num_threads = 1
max_batch_size = 4
[harness]
max_turns = 1
context_window_tokens = 4096
max_total_tokens = 8192
[harness.sampling]
max_new_tokens_per_turn = 8
n_top_logprobs = 4
[rl]
score_centering = false
[training]
micro_batch_tokens = 4096
[runtime]
steps = 2
group_size = 2
groups_per_step = 2
max_inflight_attempts = 2
threads_per_role = 1
discard_zero_signal_groups = false
[tracking]
run_dir = "{run_dir}"
tensorboard = false
save_trajectories = false
""")
    result = CliRunner().invoke(app, ["train", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "mix: agentic 1 tasks, share 0.52; swe 2 tasks, share 0.48" in " ".join(result.output.split())
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert (row["mix/agentic/weight"], row["mix/swe/weight"]) == (0.52, 0.48)
        assert row["mix/agentic/trained"] + row["mix/swe/trained"] == 2  # this step's batch, by source
    # the deficit draw alternates the sources at 52/48; groups reach the trainer in the order they finish
    assert sum(r["mix/agentic/trained"] for r in rows) >= 1 and sum(r["mix/swe/trained"] for r in rows) >= 1
    drawn = {s: sum(r[f"mix/{s}/drawn"] for r in rows) for s in ("agentic", "swe")}
    assert abs(drawn["swe"] - 0.48 * sum(drawn.values())) < 1
    report = (run_dir / "report" / "report.md").read_text()
    assert "| source | weight | groups drawn | share drawn | groups trained | share trained |" in report
    assert "| swe | 0.480 |" in report and (run_dir / "report" / "mix.png").is_file()
