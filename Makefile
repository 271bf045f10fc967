# One-command set-up, idempotent: a second run skips everything already done.
# `make train` runs the main job, `make test` the test suite (README.md's first lines).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fireflash-setup
CONFIG ?= configs/local.toml
SFT_MODEL ?= runs/sft/model
ARGS ?=

.PHONY: setup train test doctor bench clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/setup_bases.sh
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

# the local recipe: a one-time supervised warm-up (skipped once runs/sft/model exists), then async GRPO from it
train: setup $(SFT_MODEL)
	$(VENV)/bin/fireflash train --config $(CONFIG) $(ARGS)

$(SFT_MODEL): | setup
	$(VENV)/bin/fireflash sft --config $(CONFIG) $$([ -e $(dir $(SFT_MODEL))checkpoints/latest ] && echo --resume)

test: setup
	$(VENV)/bin/pytest $(ARGS)

doctor: setup
	$(VENV)/bin/fireflash doctor

clean-venv:
	rm -rf $(VENV)
