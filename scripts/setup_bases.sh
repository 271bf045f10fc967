#!/usr/bin/env bash
# Local Debian bases for task images (issue 26), run by setup.sh; idempotent, never fails the set-up.
# Usage: scripts/setup_bases.sh [VENV_DIR]
#
# Builds bookworm and trixie from Debian's archive with `fireflash images bases` (mmdebstrap, ~2 min each on a
# quiet machine), which the default sandbox.base_images substitutes for the ubuntu, debian and python images no
# registry serves here (the python:3.x bases build on them on first use). Existing bases are kept (a few
# seconds). FIREFLASH_SETUP_BASES=0 skips. Without podman or mmdebstrap, or when the build fails, it only
# warns: the bundled tasks run on the host's userland and need no image.
set -uo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

if [ "${FIREFLASH_SETUP_BASES:-1}" = 0 ]; then
  echo "setup: skipped the local Debian bases (FIREFLASH_SETUP_BASES=0)"
elif ! command -v podman >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "setup: warning: podman or mmdebstrap missing, so no local Debian bases; tasks whose images need them" \
       "will not build until both are installed and you run: $venv/bin/fireflash images bases" >&2
else
  echo "setup: local Debian bases (built once, ~2 min each; kept when they exist)"
  if ! "$venv/bin/fireflash" images bases; then
    echo "setup: warning: the local Debian bases did not build (above); retry: $venv/bin/fireflash images bases" >&2
  fi
fi
exit 0
