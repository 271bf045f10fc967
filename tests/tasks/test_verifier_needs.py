"""What a TB2-shaped tests/test.sh installs at test time (tasks/verifier_needs.py), read without running it."""

from pathlib import Path

import pytest

from fireflash.tasks.verifier_needs import DEFAULT_UV_VERSION, simple_commands, verifier_needs

OFFICIAL = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def _needs(tmp_path: Path, text: str, **files: str):
    (tmp_path / "test.sh").write_text(text)
    for name, body in files.items():
        (tmp_path / name.replace("_txt", ".txt")).write_text(body)
    return verifier_needs(tmp_path / "test.sh")


def test_the_official_shape(tmp_path):
    needs = _needs(tmp_path, OFFICIAL)
    assert needs.apt == ["curl"] and needs.uv_version == "0.9.5" and needs.pythons == ["3.13"]
    assert needs.requirements == [["pytest==8.4.1", "pytest-json-ctrf==0.3.5", "pytest"]]
    assert needs.unstaged == [] and needs.needs_staging
    assert [c.split(" (")[0] for c in needs.covered] == [
        "apt-get update", "apt-get install curl", "uv installer https://astral.sh/uv/0.9.5/install.sh", "uvx pytest"]


@pytest.mark.parametrize("text, apt, pythons, requirements", [
    # quiet variants, output thrown away, pipefail, continuation lines, env prefixes
    (("set -uo pipefail\nDEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl > /dev/null 2>&1\n"
     "uvx -p 3.11 \\\n  -w pytest==8.4.1 -w httpx==0.27.2 pytest /tests/x.py >/dev/null"),
     ["curl"], ["3.11"], [["pytest==8.4.1", "httpx==0.27.2", "pytest"]]),
    # uv venv + uv pip install + uv run
    ("uv venv .venv --python 3.13 && source .venv/bin/activate\nuv pip install pytest==8.4.1 requests\nuv run pytest",
     [], ["3.13"], [["pytest==8.4.1", "requests"]]),
    # plain pip, python -m pip, --with=, -p3.12, uvx pkg@version, sudo
    (("sudo -E pip install --no-cache-dir pytest==8.3.3\npython3 -m pip install -q numpy==2.1.0\n"
     "uvx --with=pytest-timeout==2.3.1 -p3.12 pytest@8.4.1 -q"),
     [], ["3.12"], [["pytest==8.3.3"], ["numpy==2.1.0"], ["pytest-timeout==2.3.1", "pytest==8.4.1"]]),
])
def test_variants(tmp_path, text, apt, pythons, requirements):
    needs = _needs(tmp_path, text)
    assert (needs.apt, needs.pythons, needs.requirements, needs.unstaged) == (apt, pythons, requirements, [])


def test_a_requirements_file_in_tests_is_read(tmp_path):
    needs = _needs(tmp_path, "pip install -r /tests/requirements.txt\n", requirements_txt="pytest==8.4.1  # pinned\n\n")
    assert needs.requirements == [["pytest==8.4.1"]]


def test_what_cannot_be_staged_is_named_with_its_line(tmp_path):
    needs = _needs(tmp_path, "apt-get install -y $PKG\ncurl -o data.bin https://example.com/data.bin\n"
                             "git clone https://github.com/x/y\nnpm install -g foo\npip install -e /app\n"
                             "pip install https://example.com/x.whl\nuv sync\nuvx -p pypy3.10 pytest\n")
    assert needs.unstaged == [
        "line 1: `apt-get install -y '$PKG'`: '$PKG' is not a Debian package name",
        "line 2: `curl -o data.bin https://example.com/data.bin`: downloads https://example.com/data.bin",
        "line 3: `git clone https://github.com/x/y`: git clone/fetch needs the network at test time",
        "line 4: `npm install -g foo`: npm needs the network at test time",
        "line 5: `pip install -e /app`: an editable install needs a local project",
        ("line 6: `pip install https://example.com/x.whl`: requirement 'https://example.com/x.whl' is a URL, path or "
        "variable, not a name==version"),
        "line 7: `uv sync`: `uv sync` resolves or fetches a project: not staged",
        "line 8: `uvx -p pypy3.10 pytest`: Python 'pypy3.10' is not a version FireFlash can stage (e.g. 3.13)",
    ]


def test_an_installer_without_version_gets_the_default_and_set_e_with_pipefail_is_reported(tmp_path):
    needs = _needs(tmp_path, "set -euo pipefail\ncurl -LsSf https://astral.sh/uv/install.sh | sh\n")
    assert needs.uv_version == DEFAULT_UV_VERSION and f"no version in the URL, uv {DEFAULT_UV_VERSION}" in needs.covered[0]
    assert "`set -e` with pipefail stops the script" in needs.unstaged[0]


def test_scripts_that_install_nothing_need_no_staging(tmp_path):
    assert not _needs(tmp_path, "#!/bin/bash\ncd /app && python3 -m pytest /tests -q # pip install x\n").needs_staging
    assert not verifier_needs(tmp_path / "missing.sh").needs_staging
    assert not _needs(tmp_path, "echo 'apt-get install -y curl' > /dev/null\ngit status\n").needs_staging


def test_simple_commands_split_on_operators_and_drop_redirections():
    assert simple_commands("A=1 apt-get update 2>&1 && (cd /x; uvx pytest) | tee log >/dev/null") == [
        ["apt-get", "update"], ["cd", "/x"], ["uvx", "pytest"], ["tee", "log"]]
    assert simple_commands("echo 'unbalanced") == []
