"""Cutting a solution script into the Bash tool calls an agent would send."""

import pytest

from fireflash.curation.replay import split_commands

pytestmark = pytest.mark.unit

SCRIPT = r"""#!/bin/bash
set -euo pipefail
# a comment
cd /app
cat > x.py <<'PY'
print(1)

if x:
PY
for f in *.txt; do
  echo "$f"
done
echo a \
  b
sort a |
  uniq > b
"""


def test_split_keeps_compound_commands_whole():
    assert split_commands(SCRIPT) == [
        "cd /app",
        "cat > x.py <<'PY'\nprint(1)\n\nif x:\nPY",
        'for f in *.txt; do\n  echo "$f"\ndone',
        "echo a \\\n  b",
        "sort a |\n  uniq > b",
    ]


def test_unfinished_script_is_an_error():
    with pytest.raises(ValueError, match="does not parse"):
        split_commands("if true; then\n  echo x\n")
