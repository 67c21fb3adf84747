"""Builds twice-kit's platform wheel: the kit's Python code with the `twice` and
`twice-executor` binaries as the wheel's scripts, so that `pip install twice-kit` gives the
`twice` command, the pytest plugin, and a plugin that finds the binary it came with.

Usage:
    python build_wheel.py --twice PATH --executor PATH --out DIR [--os linux|macos] [--arch x86_64|aarch64]

The binaries are release builds for the platform the wheel is for (`--os`, `--arch`: this
machine's unless given). Without `--platform`, the tag is worked out from them: on Linux `manylinux_2_N_ARCH`,
where 2.N is the newest glibc symbol version the binaries ask for (what `auditwheel` checks,
as their only shared libraries are glibc's own and libgcc_s); on macOS
`macosx_11_0_arm64` or `macosx_10_12_x86_64`. Only the standard library is used, and the
wheel's bytes depend only on its inputs (entries sorted, timestamps fixed), so two builds of
the same binaries are the same file. `cargo xtask package` runs this (docs/release.md).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import platform
import re
import sys
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The zip timestamp of every entry: the earliest a zip can say (reproducible wheels).
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
#: The binaries, by their name on the PATH.
BINARIES = ("twice", "twice-executor")
#: glibc symbol versions, as the dynamic section of an ELF binary names them.
GLIBC_VERSION = re.compile(rb"GLIBC_2\.([0-9]+)")


class BuildError(Exception):
    """A wheel could not be built; the message says why and what to do."""


def project() -> dict:
    with open(HERE / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def platform_tag(binaries: list[Path], os_name: str | None = None, arch: str | None = None) -> str:
    """The wheel's platform tag for `binaries`, built for `os_name` (`linux` or `macos`) and
    `arch` (`x86_64` or `aarch64`); each defaults to this machine's."""
    machine = platform.machine().lower()
    arch = arch or {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    os_name = os_name or ("macos" if sys.platform == "darwin" else "linux" if sys.platform.startswith("linux") else sys.platform)
    if os_name == "macos":
        return "macosx_11_0_arm64" if arch == "aarch64" else "macosx_10_12_x86_64"
    if os_name == "linux":
        minor = max((glibc_minor(b) for b in binaries), default=17)
        # manylinux2014 (glibc 2.17) is the oldest tag pip and PyPI still take.
        return f"manylinux_2_{max(minor, 17)}_{arch}"
    raise BuildError(f"no wheel tag for {os_name}: pass --platform")


def glibc_minor(binary: Path) -> int:
    """The newest glibc 2.N that `binary` asks for (0 when it names none)."""
    found = [int(m.group(1)) for m in GLIBC_VERSION.finditer(binary.read_bytes())]
    return max(found, default=0)


def metadata(meta: dict, readme: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {meta['name']}",
        f"Version: {meta['version']}",
        f"Summary: {meta['description']}",
        f"License: {meta['license']}",
        f"Requires-Python: {meta['requires-python']}",
    ]
    lines += [f"Classifier: {c}" for c in meta.get("classifiers", [])]
    for extra, requirements in sorted(meta.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    lines += [f"Requires-Dist: {r}" for r in meta.get("dependencies", [])]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def entry_points(meta: dict) -> str:
    out = []
    for group, entries in sorted(meta.get("entry-points", {}).items()):
        out.append(f"[{group}]")
        out += [f"{name} = {target}" for name, target in sorted(entries.items())]
        out.append("")
    return "\n".join(out)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(
    twice: Path, executor: Path, out: Path, tag: str | None, os_name: str | None = None, arch: str | None = None
) -> Path:
    for binary in (twice, executor):
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise BuildError(f"{binary} is not an executable file: build it first (cargo build --release --bins)")
    meta = project()
    tag = tag or platform_tag([twice, executor], os_name, arch)
    dist = meta["name"].replace("-", "_")
    version = meta["version"]
    info = f"{dist}-{version}.dist-info"
    scripts = f"{dist}-{version}.data/scripts"
    # (name in the wheel, bytes, unix mode)
    files: list[tuple[str, bytes, int]] = []
    package = HERE / "src" / "twice"
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
            files.append((f"twice/{path.relative_to(package).as_posix()}", path.read_bytes(), 0o644))
    files.append((f"{scripts}/twice", twice.read_bytes(), 0o755))
    files.append((f"{scripts}/twice-executor", executor.read_bytes(), 0o755))
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    files.append((f"{info}/METADATA", metadata(meta, readme).encode(), 0o644))
    wheel = f"Wheel-Version: 1.0\nGenerator: twice-kit build_wheel.py\nRoot-Is-Purelib: false\nTag: py3-none-{tag}\n"
    files.append((f"{info}/WHEEL", wheel.encode(), 0o644))
    files.append((f"{info}/entry_points.txt", entry_points(meta).encode(), 0o644))
    for licence in ("LICENSE-APACHE", "LICENSE-MIT"):
        path = HERE.parent.parent / licence
        if path.is_file():
            files.append((f"{info}/licenses/{licence}", path.read_bytes(), 0o644))
    record = "\n".join([record_line(n, d) for n, d, _ in files] + [f"{info}/RECORD,,", ""])
    files.append((f"{info}/RECORD", record.encode(), 0o644))

    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{dist}-{version}-py3-none-{tag}.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in files:
            entry = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    # Written whole under another name, then renamed: a reader never sees half a wheel.
    partial = target.with_suffix(".partial")
    partial.write_bytes(buffer.getvalue())
    partial.replace(target)
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--twice", required=True, type=Path, help="the twice binary (release build)")
    parser.add_argument("--executor", required=True, type=Path, help="the twice-executor binary")
    parser.add_argument("--out", required=True, type=Path, help="where the wheel goes")
    parser.add_argument("--platform", help="the wheel's platform tag (default: worked out from --os and --arch)")
    parser.add_argument("--os", choices=["linux", "macos"], help="what the binaries were built for (default: this machine)")
    parser.add_argument("--arch", choices=["x86_64", "aarch64"], help="the binaries' architecture (default: this machine's)")
    args = parser.parse_args(argv)
    try:
        print(build(args.twice, args.executor, args.out, args.platform, args.os, args.arch))
    except BuildError as e:
        print(f"build_wheel.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
