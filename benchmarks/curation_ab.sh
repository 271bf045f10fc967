#!/usr/bin/env bash
# Issue 29's real A/B on the local recipe: online vs uniform task sampling, same pool, seed and warm policy.
#
#   bash benchmarks/curation_ab.sh [OUT=runs/ab29] [STEPS=30]      # ~90 min on 2 cores; needs runs/sft/model
#
# 1. probe configs/local.toml's 40 tasks with the warm policy (4 attempts each; kept: pass rate in 15-85 %);
# 2. `fireflash train` on the kept pool with runtime.curation.sampler = online, then = uniform (group size 4,
#    2 groups per step, 6 queued, STEPS steps or 40 min);
# 3. re-probe each run's final checkpoint on the same 40 tasks, so learning is read on the same tasks whatever
#    each sampler drew (the pass rate of drawn attempts is not comparable: online draws the undecided tasks);
# 4. print zero-signal groups after step 10, actual and predicted, and the pass rates.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/ab29}; STEPS=${2:-30}
FF=.venv/bin/fireflash
test -e runs/sft/model/config.json || { echo "no runs/sft/model: run 'make train' (or fireflash sft -c configs/local.toml) first" >&2; exit 1; }
$FF tasks probe -c configs/local.toml --out "$OUT/pool_manifest.json" tracking.run_dir="$OUT/probe"
for s in online uniform; do
  $FF train -c configs/local.toml tasks.pool_manifest="$OUT/pool_manifest.json" \
    runtime.groups_per_step=2 runtime.max_queued_groups=6 runtime.steps="$STEPS" runtime.max_wall_sec=2400 \
    runtime.seed=0 runtime.curation.sampler=$s tracking.run_dir="$OUT-$s"
  ckpt="$OUT-$s/checkpoints/$(cat "$OUT-$s/checkpoints/latest")"
  $FF tasks probe -c configs/local.toml model.name_or_path="$ckpt" --out "$OUT/reprobe-$s.json" \
    tracking.run_dir="$OUT/reprobe-$s"
done
.venv/bin/python benchmarks/curation.py --runs "$OUT-uniform" "$OUT-online"
.venv/bin/python benchmarks/curation.py --manifests "$OUT/pool_manifest.json" "$OUT/reprobe-uniform.json" "$OUT/reprobe-online.json"
