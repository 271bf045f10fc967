"""What a build gets from the host (tasks/image_build.py) and how bases are made (tasks/bases.py), no tools run."""

from pathlib import Path

from fireflash.tasks.bases import host_apt_proxies, host_mirrors, mmdebstrap_argv
from fireflash.tasks.image_build import (
    CA_INSIDE,
    PIP_CONF_INSIDE,
    build_network,
    host_ca_bundle,
    pip_config_text,
)


def _ca(tmp_path: Path) -> Path:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    return ca


def test_ca_bundle_from_the_environment_first(tmp_path):
    ca = _ca(tmp_path)
    assert host_ca_bundle({"SSL_CERT_FILE": str(ca)}) == ca
    assert host_ca_bundle({"SSL_CERT_FILE": str(tmp_path / "missing"), "PIP_CERT": str(ca)}) == ca


def test_pip_config_keeps_the_index_and_points_cert_inside(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\nfind-links = /opt/wheels\n"
                    "cert = /etc/host-ca.pem\nconstraint = /etc/xdg/pip/constraints.txt\n"
                    "[install]\ntrusted-host = mirror.example\n")
    text = pip_config_text({"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "none")}, tmp_path)
    assert "index-url = https://mirror.example/simple" in text
    assert "trusted-host = mirror.example" in text
    assert f"cert = {CA_INSIDE}" in text
    assert "/opt/wheels" not in text and "/etc/host-ca.pem" not in text  # host paths mean nothing inside
    assert "constraint" not in text


def test_podman_builds_get_the_ca_bundle_pip_config_and_index(tmp_path):
    ca = _ca(tmp_path)
    net = build_network("podman", tmp_path, {"SSL_CERT_FILE": str(ca), "PIP_INDEX_URL": "https://m/simple"})
    assert (str(ca), CA_INSIDE) in net.volumes
    assert (str(tmp_path / "pip.conf"), PIP_CONF_INSIDE) in net.volumes
    assert net.build_args["SSL_CERT_FILE"] == net.build_args["PIP_CERT"] == CA_INSIDE
    assert net.build_args["PIP_CONFIG_FILE"] == PIP_CONF_INSIDE
    assert net.build_args["PIP_INDEX_URL"] == "https://m/simple"
    assert net.notes == []


def test_docker_builds_get_no_binds_and_say_so(tmp_path):
    net = build_network("docker", tmp_path, {"SSL_CERT_FILE": str(_ca(tmp_path)), "PIP_INDEX_URL": "https://m"})
    assert net.volumes == [] and "SSL_CERT_FILE" not in net.build_args
    assert net.build_args == {"PIP_INDEX_URL": "https://m"}
    assert "cannot bind the host's CA bundle" in net.notes[0]


def test_host_mirrors_from_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n")
    assert host_mirrors(tmp_path, "bookworm") == ("http://mirror.example/debian", "http://mirror.example/debian-security")
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("# old style\ndeb [arch=amd64] http://old.example/debian bookworm main\n")
    assert host_mirrors(tmp_path, "bookworm") == ("http://old.example/debian", "http://deb.debian.org/debian-security")
    assert host_mirrors(tmp_path / "none", "bookworm") == ("http://deb.debian.org/debian",
                                                           "http://deb.debian.org/debian-security")


def test_apt_proxies_and_the_mmdebstrap_command(tmp_path):
    dump = 'Acquire::http::Proxy "http://proxy:3128";\nAcquire::Check-Valid-Until "false";\n'
    proxies = host_apt_proxies(dump)
    assert proxies == ['Acquire::http::Proxy "http://proxy:3128"']
    argv = mmdebstrap_argv("trixie", tmp_path / "t.tar", "http://m/debian", "http://m/sec", proxies)
    assert argv[:3] == ["mmdebstrap", "--variant=minbase", '--aptopt=Acquire::http::Proxy "http://proxy:3128"']
    assert argv[3:5] == ["trixie", str(tmp_path / "t.tar")]
    assert argv[5:] == ["deb http://m/debian trixie main", "deb http://m/debian trixie-updates main",
                        "deb http://m/sec trixie-security main"]
