"""The images a Dockerfile names (``FROM``, ``COPY --from``) and the rewrite FireFlash builds instead.

The builder (podman, buildah, docker) gives a Dockerfile its full meaning; this module only reads
enough of it to find the external images it needs, so that each is checked, pulled or substituted
before the build (tasks/images.py), and writes the copy that is built:

    refs = external_images(text)                      # [ImageUse('ubuntu:24.04', line=1, ...)]
    text = rewrite(text, {1: "localhost/fireflash/debian:trixie"}, build_args=["SSL_CERT_FILE"])

Stage names (``FROM x AS build`` ... ``COPY --from=build``), ``scratch`` and numbered stages are not
images. ``ARG`` defaults declared before the first ``FROM`` are expanded in image names, as the builder does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*[\"']?(\w+)[\"']?")  # BuildKit heredocs, not bash's <<<


@dataclass(frozen=True)
class ImageUse:
    """One external image a Dockerfile needs."""

    ref: str  # as written, ARGs expanded
    line: int  # 1-based line of the instruction
    instruction: str  # 'FROM' or 'COPY --from'


@dataclass(frozen=True)
class _Instruction:
    first: int  # 0-based index of its first physical line
    last: int  # 0-based index of its last physical line (continuations and heredoc bodies included)
    text: str  # the logical instruction, continuations joined


def normalize(ref: str) -> str:
    """The name a registry would resolve ``ref`` to, as base-image map keys are written: no
    ``docker.io/`` or ``library/`` prefix, ``:latest`` when no tag is given, no ``@sha256:`` pin."""
    ref = ref.split("@", 1)[0]
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        ref = ref.removeprefix(prefix)
    ref = ref.removeprefix("library/")
    if ":" not in ref.rsplit("/", 1)[-1]:
        ref += ":latest"
    return ref


def qualify(ref: str) -> str:
    """``ref`` with the registry docker would pull it from: ``ubuntu:24.04`` → ``docker.io/library/ubuntu:24.04``,
    ``team/env`` → ``docker.io/team/env``; a name with a registry (``ghcr.io/...``, ``localhost/...``) is kept.
    Podman resolves short names only through its own configuration, which may name no registry at all."""
    first, slash, _ = ref.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if slash else f"docker.io/library/{ref}"


def _instructions(text: str) -> list[_Instruction]:
    lines = text.splitlines()
    escape = "\\"
    for line in lines[:5]:  # parser directives come first: `# escape=``
        m = re.match(r"#\s*escape\s*=\s*(\S)", line.strip(), re.IGNORECASE)
        if m:
            escape = m[1]
    out: list[_Instruction] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        first, parts = i, []
        while True:
            line = lines[i].rstrip()
            if line.endswith(escape):
                parts.append(line[:-1])
                i += 1
                # comment lines inside a continued instruction are dropped by the builder
                while i < len(lines) and lines[i].strip().startswith("#"):
                    i += 1
                if i < len(lines):
                    continue
            else:
                parts.append(line)
            break
        logical = " ".join(p.strip() for p in parts)
        for word in _HEREDOC.findall(logical) if logical.split()[0].upper() in ("RUN", "COPY", "ADD") else []:
            i += 1
            while i < len(lines) and lines[i].strip() != word:
                i += 1
        out.append(_Instruction(first, min(i, len(lines) - 1), logical))
        i += 1
    return out


def _expand(word: str, args: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m[1] or m[3]
        value = args.get(name, "")
        return value if value or m[2] is None else m[2]

    return _VAR.sub(sub, word)


def _from_parts(text: str) -> tuple[int, str | None]:
    """Index of the image word in a FROM instruction's words, and its stage name."""
    words = text.split()
    k = 1
    while k < len(words) and words[k].startswith("--"):
        k += 1
    name = words[k + 2].lower() if len(words) > k + 2 and words[k + 1].lower() == "as" else None
    return k, name


def _global_args(instructions: list[_Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for ins in instructions:
        words = ins.text.split()
        if words[0].upper() == "FROM":
            break
        if words[0].upper() == "ARG":
            for decl in words[1:]:
                key, _, value = decl.partition("=")
                args[key] = _expand(value.strip("\"'"), args)
    return args


def external_images(text: str) -> list[ImageUse]:
    """Every image the Dockerfile ``text`` pulls in: ``FROM`` images and ``COPY --from=IMAGE``, in order."""
    instructions = _instructions(text)
    args = _global_args(instructions)
    stages: set[str] = set()
    uses: list[ImageUse] = []
    for ins in instructions:
        words = ins.text.split()
        keyword = words[0].upper()
        if keyword == "FROM" and len(words) > 1:
            k, name = _from_parts(ins.text)
            ref = _expand(words[k], args) if k < len(words) else ""
            if ref and ref.lower() not in stages and ref != "scratch":
                uses.append(ImageUse(ref, ins.first + 1, "FROM"))
            if name:
                stages.add(name)
        elif keyword in ("COPY", "ADD"):
            for word in words[1:]:
                if not word.startswith("--"):
                    break
                if word.startswith("--from="):
                    ref = _expand(word.removeprefix("--from="), args)
                    if ref.lower() not in stages and not ref.isdigit():
                        uses.append(ImageUse(ref, ins.first + 1, "COPY --from"))
    return uses


def rewrite(text: str, replacements: dict[int, str], build_args: list[str] = ()) -> str:
    """The Dockerfile that is built: ``FROM`` images replaced, and ``ARG NAME`` declared after each ``FROM``.

    Args:
        replacements: 1-based line of a FROM instruction (``ImageUse.line``) → the image to use there.
        build_args: names declared as ``ARG`` in every stage, so values passed with ``--build-arg`` reach
            each RUN step as environment variables without entering the image (ARGs are not kept in it).

    Raises:
        ValueError: a replacement's line is not a FROM instruction.
    """
    lines = text.splitlines()
    instructions = _instructions(text)
    froms = {ins.first + 1: ins for ins in instructions if ins.text.split()[0].upper() == "FROM"}
    for line in replacements:
        if line not in froms:
            raise ValueError(f"line {line} is not a FROM instruction")
    out: list[str] = []
    next_line = 0
    for first in sorted(froms):
        ins = froms[first]
        out += lines[next_line:ins.first]
        if first in replacements:
            words = ins.text.split()
            k, _ = _from_parts(ins.text)
            words[k] = replacements[first]
            out.append(" ".join(words))
        else:
            out += lines[ins.first:ins.last + 1]
        out += [f"ARG {name}" for name in build_args]
        next_line = ins.last + 1
    out += lines[next_line:]
    return "\n".join(out) + "\n"
