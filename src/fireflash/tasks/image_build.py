"""One image build: the Dockerfile copy that is built, the host's package-index settings passed in, the log.

A build must reach package indexes the way the host does (MEASURED.md "Containers and images": inside a
build, ``pip install`` fails certificate checks on this kind of host until these are passed in):

- the host's CA bundle, bound read-only at ``/dev/fireflash-ca.crt`` in every RUN step;
- the host's pip configuration, its ``cert`` pointing at that bundle, at ``/dev/fireflash-pip.conf``;
- ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``PIP_CERT``, ``GIT_SSL_CAINFO`` and
  ``PIP_CONFIG_FILE`` pointing at them, plus the host's own ``PIP_INDEX_URL``-style settings, as build ARGs
  declared in every stage (ARGs reach RUN steps as environment variables but are not kept in the image).

They sit under ``/dev`` because the builder mounts a fresh ``/dev`` for each RUN step: a bind-mount target
anywhere else (``/etc``, ``/run``) is left in the image as an empty file; under ``/dev`` nothing is (measured
with podman 4.3). Proxy variables pass through by the builder's own default. Docker's builder cannot bind
files into RUN steps, so with docker none of this is passed, and the build record says so.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fireflash.protocols import cache_root
from fireflash.sandbox.containers import ContainerTool, LoggedRun, run_logged
from fireflash.tasks.image_refs import rewrite

CA_INSIDE = "/dev/fireflash-ca.crt"
PIP_CONF_INSIDE = "/dev/fireflash-pip.conf"
CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO")
# package-index settings of the host that a build should share (its proxies pass through on their own)
INDEX_VARS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT",
              "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX")
_CA_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def images_cache() -> Path:
    """FireFlash's image files: ``logs/`` (one per build), ``build/`` (Dockerfile copies), ``rootfs/``, ``bases/``."""
    return cache_root() / "images"


@dataclass
class BuildNetwork:
    """What a build gets from the host: read-only binds (host path, path inside), build ARGs, and notes."""

    volumes: list[tuple[str, str]] = field(default_factory=list)
    build_args: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def host_ca_bundle(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The CA bundle the host's own tools use: ``SSL_CERT_FILE`` (or its kin) when set, else the distro's."""
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"):
        if environ.get(name) and Path(environ[name]).is_file():
            return Path(environ[name])
    return next((Path(p) for p in _CA_CANDIDATES if Path(p).is_file()), None)


def pip_config_text(environ: Mapping[str, str] = os.environ, home: Path | None = None, cert: str = CA_INSIDE) -> str:
    """The host's pip configuration (files in pip's own order, later ones winning), minus options that name
    host files (``find-links = /opt/wheels``, ``constraint = /etc/...``: they mean nothing inside a build),
    with ``[global] cert`` set to ``cert``."""
    home = home or Path.home()
    files = [Path(d) / "pip" / "pip.conf" for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")]
    files += [Path("/etc/pip.conf"), home / ".pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"]
    files += [Path(environ["PIP_CONFIG_FILE"])] if environ.get("PIP_CONFIG_FILE") else []
    config = configparser.ConfigParser(interpolation=None)
    for path in files:
        try:
            config.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue  # pip itself would complain about it on the host; the build goes on without it
    for section in config.sections():
        for key, value in config.items(section):
            if any(word.startswith(("/", "~", "file:")) for word in value.split()):
                config.remove_option(section, key)
    if not config.has_section("global"):
        config.add_section("global")
    config.set("global", "cert", cert)
    lines = []
    for section in config.sections():
        lines.append(f"[{section}]")
        lines += [f"{key} = {value}" for key, value in config.items(section)]
    return "\n".join(lines) + "\n"


def build_network(kind: str, workdir: Path, environ: Mapping[str, str] = os.environ) -> BuildNetwork:
    """The binds and ARGs a ``kind`` builder's RUN steps get; writes the pip configuration into ``workdir``."""
    net = BuildNetwork()
    net.build_args.update({name: environ[name] for name in INDEX_VARS if environ.get(name)})
    if kind == "docker":
        net.notes.append("docker's builder cannot bind the host's CA bundle into RUN steps: downloads behind a "
                         "TLS-intercepting proxy may fail certificate checks")
        return net
    ca = host_ca_bundle(environ)
    if ca is None:
        net.notes.append("the host has no CA bundle to pass into the build")
        return net
    pip_conf = workdir / "pip.conf"
    pip_conf.write_text(pip_config_text(environ))
    net.volumes += [(str(ca.resolve()), CA_INSIDE), (str(pip_conf), PIP_CONF_INSIDE)]
    net.build_args.update({name: CA_INSIDE for name in CA_VARS}, PIP_CONFIG_FILE=PIP_CONF_INSIDE)
    return net


def run_build(
    tool: ContainerTool,
    dockerfile_text: str,
    replacements: dict[int, str],
    context: Path,
    tag: str,
    workdir: Path,
    log_path: Path,
    labels: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    timeout_sec: float = 1800.0,
) -> tuple[LoggedRun, list[str]]:
    """Build ``dockerfile_text`` over ``context`` as ``tag``, with ``replacements`` (FROM line → image) applied.

    The Dockerfile copy and pip configuration are written to ``workdir``; the context is used as it is.

    Returns:
        (the run: exit status, seconds, output tail; notes on what the build did not get from the host).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    net = build_network(tool.kind, workdir)
    dockerfile = workdir / "Dockerfile"
    dockerfile.write_text(rewrite(dockerfile_text, replacements, list(net.build_args)))
    argv = tool.build_args(dockerfile, context, tag, net.build_args, net.volumes, labels or {})
    return run_logged(argv, log_path, on_line, timeout_sec), net.notes
