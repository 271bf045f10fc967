# One-command set-up, idempotent: a second run skips everything already done.
# `make train` runs the main job, `make test` the test suite (README.md's first lines).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fireflash-setup
CONFIG ?= configs/local.toml
ARGS ?=

.PHONY: setup train test doctor bench clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

train: setup
	$(VENV)/bin/fireflash train --config $(CONFIG) $(ARGS)

test: setup
	$(VENV)/bin/pytest $(ARGS)

doctor: setup
	$(VENV)/bin/fireflash doctor

clean-venv:
	rm -rf $(VENV)
