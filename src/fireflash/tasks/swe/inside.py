"""Runs inside a package's image (offline, stdlib + pytest only): the recorded suite, then each mutation.

    python3 /work/inside.py /work/plan.json      # writes /work/results.jsonl, one JSON object a line

Not imported by FireFlash: ``suite.py`` copies this file into the container's work folder. The plan names
the package's source root (``/app``), the pytest arguments, the time limits and the mutations to try
(each: id, file, mutated text). Per mutation it writes the file, runs the tests (stopping after
``max_fail + 1`` failures), runs them again when 1..max_fail failed, restores the file and records:

    {"id": ..., "status": "kept" | "dropped", "reason": ..., "failed": [nodeid...], "details": {nodeid: text}}

Drop reasons: ``no_failure`` (no recorded test notices), ``too_many_failures``, ``timeout``,
``collection_error`` (an import or collection failure: the package or a test module no longer imports),
``nondeterministic`` (the second run failed differently), ``passing_test_broke`` is never produced here
because any failing recorded test counts as a failure (every other recorded test must pass).
"""

import json
import os
import subprocess
import sys
import time

# The same flags and empty configuration as the generated tasks' tests/test.sh (writer.py): the package's own
# pytest configuration is not used, so a pytest.ini or conftest.py the agent adds in /app cannot change it.
PYTEST_FLAGS = ["-p", "no:cacheprovider", "-q", "--tb=short"]
INI = "[pytest]\n"
PLUGIN = '''
import json, os
_OUT = os.environ["SWE_RECORD"]
def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        text = str(report.longrepr)[:6000] if report.failed else ""
        with open(_OUT, "a") as f:
            f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                                "text": text}) + "\\n")
def pytest_collectreport(report):
    if report.failed:
        with open(_OUT, "a") as f:
            f.write(json.dumps({"nodeid": report.nodeid, "when": "collect", "outcome": "failed",
                                "text": str(report.longrepr)[:3000]}) + "\\n")
'''


def run_tests(plan, work, maxfail=None):
    """One pytest run: (outcomes {nodeid: 'passed'|'failed'|'skipped'}, failure texts, collection errors, timed out)."""
    record = os.path.join(work, "record.jsonl")
    if os.path.exists(record):
        os.remove(record)
    env = dict(os.environ, SWE_RECORD=record, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([work, plan["pythonpath"]]), PYTHONHASHSEED="0")
    ini = os.path.join(work, "pytest.ini")
    with open(ini, "w") as f:
        f.write(INI)
    argv = [sys.executable, "-m", "pytest", "-p", "swe_record", *PYTEST_FLAGS, "-c", ini, "--rootdir", plan["root"],
            *plan["pytest_args"]]
    if maxfail:
        argv.append(f"--maxfail={maxfail}")
    try:
        subprocess.run(argv, cwd=plan["root"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=plan["timeout_sec"], check=False)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    outcomes, texts, errors = {}, {}, []
    lines = []
    if os.path.exists(record):
        with open(record) as f:
            lines = f.read().splitlines()
    for line in lines:
        r = json.loads(line)
        if r["when"] == "collect":
            errors.append(r["nodeid"])
            continue
        if r["outcome"] == "failed" or r["nodeid"] not in outcomes:
            outcomes[r["nodeid"]] = r["outcome"]
        if r["text"]:
            texts[r["nodeid"]] = r["text"]
    return outcomes, texts, errors, timed_out


def main():
    plan_path = sys.argv[1]
    with open(plan_path) as f:
        plan = json.load(f)
    work = os.path.dirname(plan_path)
    with open(os.path.join(work, "swe_record.py"), "w") as f:
        f.write(PLUGIN)
    results = os.path.join(work, "results.jsonl")

    def emit(obj):
        with open(results, "a") as out:
            out.write(json.dumps(obj) + "\n")

    if plan.get("baseline"):
        runs = []
        for _ in range(2):
            start = time.monotonic()
            runs.append(run_tests(plan, work) + (time.monotonic() - start,))
        (a, _, err_a, to_a, sec), (b, _, err_b, to_b, _) = runs
        passing = sorted(n for n in a if a[n] == "passed" and b.get(n) == "passed")
        emit({"id": "baseline", "passing": passing, "seconds": sec, "errors": err_a + err_b,
              "timed_out": to_a or to_b, "unstable": sorted(n for n in a if a[n] != b.get(n))})
        return
    recorded = set(plan["recorded"])
    kept, deadline = 0, time.monotonic() + plan["deadline_sec"]
    for m in plan["mutations"]:
        if kept >= plan["max_keep"] or time.monotonic() > deadline:
            break
        path = os.path.join(plan["root"], m["file"])
        with open(path, encoding="utf-8") as f:
            original = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(m["mutated"])
        try:
            result = judge(plan, work, recorded)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        kept += result["status"] == "kept"
        emit({"id": m["id"], **result})


def judge(plan, work, recorded):
    max_fail = plan["max_fail"]
    first = None
    for attempt in range(2):
        outcomes, texts, errors, timed_out = run_tests(plan, work, maxfail=max_fail + 1)
        if timed_out:
            return {"status": "dropped", "reason": "timeout"}
        if errors:
            return {"status": "dropped", "reason": "collection_error", "failed": errors[:5]}
        failed = sorted(n for n in recorded if outcomes.get(n, "missing") != "passed")
        if attempt == 0:
            if not failed:
                return {"status": "dropped", "reason": "no_failure"}
            if len(failed) > max_fail:
                return {"status": "dropped", "reason": "too_many_failures"}
            first = (failed, {n: texts.get(n, "") for n in failed})
        elif failed != first[0]:
            return {"status": "dropped", "reason": "nondeterministic", "failed": first[0]}
    return {"status": "kept", "failed": first[0], "details": first[1]}


if __name__ == "__main__":
    main()
