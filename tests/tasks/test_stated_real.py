"""Gate 2 on real-task shapes (issue 26 Deliver 6): inputs, computed outputs and values to find are notes;
paths, names and formats only the tests know still fail.

Each fixture is a Harbor task written into a temporary directory: the false positives real Terminal-Bench
tasks hit (a test that feeds inputs and compares computed outputs; "find the secret") and the true
positives gate 2 exists for (an output file, a module and function, a format token only the tests give).
"""

import asyncio
from pathlib import Path

import pytest

from fireflash.curation.gates import validate_task
from fireflash.tasks.loader import load_task
from fireflash.curation.requirements import check_stated

pytestmark = pytest.mark.unit

TOML = 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n'

COMPUTED_TESTS = '''
import subprocess
from pathlib import Path

CASES = Path("/tmp/cases.txt")
WORK = Path("/tmp/fireflash-calc")


def calc(expr):
    return subprocess.run(["python3", "/app/calc.py", expr], capture_output=True, text=True).stdout.strip()


def test_precedence():
    assert calc("2+3*4") == "14"


def test_division():
    assert calc("7/2") == "3.5"


def test_batch_file():
    WORK.mkdir(exist_ok=True)
    (WORK / "batch.txt").write_text("1+1\\n2*8\\n")
    CASES.write_text("9-4\\n")
    out = subprocess.run(["python3", "/app/calc.py", "--file", str(WORK / "batch.txt")], capture_output=True, text=True)
    assert out.stdout.split() == ["2", "16"]


def test_error_message():
    assert calc("1/0") == "error: division by zero"
'''
COMPUTED_INSTRUCTION = (
    "Write `/app/calc.py`: it evaluates the arithmetic expression given as its first argument (+, -, *, / with "
    "the usual precedence) and prints the result, or evaluates one expression per line of the file given "
    "with `--file`. Dividing by zero prints `error: division by zero`."
)

SECRET_TESTS = '''
from pathlib import Path


def test_password_recovered():
    assert Path("/app/answer.txt").read_text().strip() == "hunter2-Zebra"


def test_pin():
    assert Path("/app/pin.txt").read_text().strip() == "0491"
'''
SECRET_INSTRUCTION = (
    "A password and a PIN are hidden somewhere in the files under /app/vault. Recover them: write the "
    "password to `/app/answer.txt` and the PIN to `/app/pin.txt`."
)

UNSTATED_TESTS = '''
from pathlib import Path
from wordstats import top_words


def test_counts_file():
    assert Path("/app/counts.tsv").exists()


def test_top():
    assert top_words(Path("/app/text.txt").read_text(), 1) == [("the", 3)]


def test_summary_format():
    assert Path("/app/summary.txt").read_text().splitlines()[0] == "TOTAL WORDS: 9"
'''
UNSTATED_INSTRUCTION = "Count the words of /app/text.txt and write a summary to `/app/summary.txt`."


def task(tmp_path: Path, name: str, instruction: str, tests: str, env_files: dict[str, str] | None = None) -> Path:
    root = tmp_path / name
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text(instruction)
    (root / "task.toml").write_text(TOML)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\npytest /tests/test_outputs.py\n")
    (root / "tests" / "test_outputs.py").write_text(tests)
    for rel, text in (env_files or {}).items():
        (root / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "environment" / rel).write_text(text)
    return root


def gate2(root: Path):
    report = asyncio.run(validate_task(load_task(root), None, gates=[2]))
    return report.gates[0]


def test_inputs_and_computed_outputs_are_notes(tmp_path):
    root = task(tmp_path, "calc", COMPUTED_INSTRUCTION, COMPUTED_TESTS)
    result = gate2(root)
    assert result.status == "passed", result.detail
    stated = check_stated(root / "tests", COMPUTED_INSTRUCTION, "/app")
    notes = {r.value: why for r, why in stated.notes}
    assert "computed" in notes["14"] and "computed" in notes["3.5"] and "computed" in notes["16"]
    assert "test input" in notes["/tmp/cases.txt"]  # a path the tests write
    assert "notes, not requirements" in result.detail and "'14'" in result.detail


def test_values_the_agent_must_find_are_notes(tmp_path):
    root = task(tmp_path, "vault", SECRET_INSTRUCTION, SECRET_TESTS, {"vault/readme.txt": "nothing here\n"})
    result = gate2(root)
    assert result.status == "passed", result.detail
    notes = {r.value: why for r, why in check_stated(root / "tests", SECRET_INSTRUCTION, "/app").notes}
    assert notes["hunter2-Zebra"] == notes["0491"] == "the instruction asks to find it (a value the task hides)"


def test_paths_names_and_formats_only_the_tests_know_fail(tmp_path):
    root = task(tmp_path, "wordstats", UNSTATED_INSTRUCTION, UNSTATED_TESTS, {"app/text.txt": "the cat the dog the end\n"})
    result = gate2(root)
    assert result.status == "failed"
    missing = {(r.kind, r.value) for r in check_stated(root / "tests", UNSTATED_INSTRUCTION, "/app",
                                                      [root / "environment"]).missing}
    assert missing == {
        ("path", "/app/counts.tsv"),  # an output file only the tests name
        ("name", "wordstats"),  # a module and a function only the tests name
        ("name", "top_words"),
        ("literal", "TOTAL WORDS: 9"),  # a format token ("TOTAL WORDS") the instruction never gives
    }
    # the same task stating them passes; the input file the environment ships is no requirement
    stated = UNSTATED_INSTRUCTION + (
        " Also write `/app/counts.tsv`, and provide `top_words(text, n)` in `/app/wordstats.py`. The summary's "
        "first line is `TOTAL WORDS: <n>`."
    )
    (root / "instruction.md").write_text(stated)
    assert gate2(root).status == "passed"


def test_a_secret_the_environment_leaks_into_a_format_is_still_caught_without_find_words(tmp_path):
    # without "find"/"recover" wording a bare unknown word is a format the agent was never given
    root = task(tmp_path, "plain", "Write the password to /app/answer.txt.", SECRET_TESTS.split("\n\n\ndef test_pin")[0])
    assert gate2(root).status == "failed"


@pytest.mark.parametrize(
    "instruction,finds",
    [
        (SECRET_INSTRUCTION, True),
        ("Crack the PIN that protects /app/vault.zip and write it to /app/pin.txt.", True),
        ("Find the missing commit's message and write it to /app/msg.txt.", True),
        ("Extract the second column of /app/data.csv and determine its mean.", False),
        ("Find all lines of /app/log.txt containing ERROR and count them.", False),
    ],
)
def test_find_tasks_are_those_that_hide_a_value(instruction, finds):
    from fireflash.curation.requirements import FIND_WORDS

    assert bool(FIND_WORDS.search(instruction)) == finds


FED_TESTS = '''
from pathlib import Path

UNUSED = Path("/app/never_checked.json")


def test_terminal_writes_a_file(terminal):
    terminal.send_keystrokes("echo 'Hello, world!' > /app/hello_from_test.txt")
    assert Path("/app/hello_from_test.txt").read_text() == "Hello, world!\\n"


if __name__ == "__main__":
    test_terminal_writes_a_file(None)
'''
SHELL_TESTS = """#!/bin/bash
mkdir -p ~/.ssh /srv/fixture-keys
ssh-keygen -t ed25519 -f /srv/fixture-keys/id_test -N '' -q
cp /srv/fixture-keys/id_test /srv/copied/id_copy
echo ready > /srv/state/flag
cp /app/agent_output.txt /tmp/scratch.txt
chmod +x /app/agent_script.sh
"""


def test_fed_commands_unused_constants_main_guards_and_shell_made_paths_are_no_requirements(tmp_path):
    root = task(tmp_path, "terminal", "Build a headless terminal in /app.", FED_TESTS)
    (root / "tests" / "verify.sh").write_text(SHELL_TESTS)
    stated = check_stated(root / "tests", "Build a headless terminal in /app.", "/app")
    notes = {r.value: why for r, why in stated.notes}
    for made in ("/app/hello_from_test.txt", "/app/never_checked.json", "/srv/fixture-keys/id_test",
                 "/srv/copied/id_copy", "/srv/state/flag"):
        assert notes.get(made) == "a test input (the tests create it)", (made, notes)
    # what the agent must produce still counts: a copy's source, a script the tests make executable
    assert {r.value for r in stated.missing} == {"/app/agent_output.txt", "/app/agent_script.sh"}
    assert "__main__" not in {r.value for r in stated.missing} | set(notes)
