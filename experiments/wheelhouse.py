"""`make wheelhouse`: the pure-Python wheels a CUDA machine without network needs for `make gpu-check`.

    python experiments/wheelhouse.py DIR [--limit-mib 64]

Which packages: the runtime requirements of this project (pyproject's `dependencies`, no extras) and
everything they require in turn, read from the metadata of this environment's installs, less what a
machine that already imports torch, transformers, peft and numpy has (those four and their own
requirements), and less the requirements of compiled packages (the device has those with them).
Of the rest, packages installed here from a pure-Python wheel (`Root-Is-Purelib`,
tag `*-none-any`) travel: `pip wheel --no-deps` at the exact version `constraints/cpu.txt` pins (an
sdist is built into a wheel). Compiled ones cannot travel to a machine of unknown Python and
platform; `manifest.json` lists them under `needs_on_device`, and `experiments/gpu_check.py` names
whichever of them the device lacks when it imports the project there.

Writes DIR/requirements.txt (name==version of every travelling wheel, for `pip install --no-index
--find-links DIR --no-deps -r`) and DIR/manifest.json; fails in one line when DIR, files already in
it included (the tokenizer `make wheelhouse` saves there), is over the limit.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PROJECT = "selfplay-judges"
DEVICE_HAS = ("torch", "transformers", "peft", "numpy")
LIMIT_MIB = 64
PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # requires-python >= 3.10
SPECIFIC_PY = re.compile(r"-py3\d+-none-any\.whl$")


class WheelhouseError(RuntimeError):
    pass


def canonical(name: str) -> str:
    """PEP 503 name: PyYAML, pyyaml and py_yaml are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_names(requirements: Iterable[str]) -> list[str]:
    """The packages that `requirements` (Requires-Dist lines) need outside any extra, on this Python."""
    out = []
    for line in requirements:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(canonical(req.name))
    return out


def closure(roots: Iterable[str], requires: Callable[[str], list[str]],
            expand: Callable[[str], bool] = lambda name: True) -> set[str]:
    """`roots` and everything they require, transitively (`requires(name)`: its runtime names),
    following the requirements of the names `expand` accepts only."""
    seen: set[str] = set()
    todo = [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            if expand(name):
                todo += requires(name)
    return seen


@dataclass(frozen=True)
class Selection:
    travel: list[str]  # pure-Python: into the wheelhouse
    needs_on_device: list[str]  # compiled: the device must have them already


def select(roots: Iterable[str], device_has: Iterable[str], requires: Callable[[str], list[str]],
           is_pure: Callable[[str], bool]) -> Selection:
    # a compiled package must be on the device already, and with it what it requires: not followed
    need = closure(roots, requires, expand=is_pure) - closure(device_has, requires)
    return Selection(travel=sorted(n for n in need if is_pure(n)),
                     needs_on_device=sorted(n for n in need if not is_pure(n)))


def installed_requires(name: str) -> list[str]:
    try:
        return runtime_names(metadata.requires(name) or [])
    except metadata.PackageNotFoundError:
        return []  # not needed on this Python (a marker), or provided under another name


def installed_is_pure(name: str) -> bool:
    """Whether the install here came from a wheel that runs on any Python 3 platform."""
    try:
        wheel = metadata.distribution(name).read_text("WHEEL") or ""
    except metadata.PackageNotFoundError:
        return False
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    return "Root-Is-Purelib: true" in wheel and bool(tags) and all(t.endswith("-none-any") for t in tags)


def read_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.strip()
    return pins


def pinned(names: Iterable[str], pins: dict[str, str], source: Path) -> list[str]:
    missing = [n for n in names if n not in pins]
    if missing:
        raise WheelhouseError(f"{source}: no pin for {', '.join(missing)}; run `make lock`")
    return [f"{n}=={pins[n]}" for n in names]


def check_size(directory: Path, limit_bytes: int) -> int:
    """Total bytes of the files under `directory`; WheelhouseError naming the largest when over."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    if total > limit_bytes:
        largest = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:3]
        names = ", ".join(f"{p.name} ({p.stat().st_size / 2**20:.1f} MiB)" for p in largest)
        raise WheelhouseError(f"{directory}: {total} bytes ({total / 2**20:.1f} MiB) > the {limit_bytes} bytes "
                              f"({limit_bytes / 2**20:.0f} MiB) that can travel; largest: {names}")
    return total


def _pip_ok(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise WheelhouseError(f"{what} failed: {tail}")


def build(directory: Path, limit_mib: float, constraints: Path) -> dict:
    roots = installed_requires(PROJECT)
    if not roots:
        raise WheelhouseError(f"{PROJECT} is not installed in this environment (make install)")
    sel = select(roots, DEVICE_HAS, installed_requires, installed_is_pure)
    specs = pinned(sel.travel, read_pins(constraints), constraints)
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(directory), *specs],
                          capture_output=True, text=True)
    _pip_ok(proc, "pip wheel")
    # a pure wheel tagged for one Python (multiprocess: py311-none-any) also for the others the
    # device may run, so that pip there finds one it can install
    for spec in specs:
        name = spec.split("==")[0].replace("-", "_")
        if any(SPECIFIC_PY.search(p.name) for p in directory.glob(f"{name}-*.whl")):
            for version in PYTHONS:
                _pip_ok(subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                                        "--python-version", version, "-d", str(directory), spec],
                                       capture_output=True, text=True), f"pip download {spec} for Python {version}")
    (directory / "requirements.txt").write_text("".join(s + "\n" for s in specs))
    manifest = {"travel": specs, "needs_on_device": sel.needs_on_device, "device_has": list(DEVICE_HAS),
                "built_on_python": ".".join(map(str, sys.version_info[:3]))}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    manifest["bytes"] = check_size(directory, int(limit_mib * 2**20))
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    ap.add_argument("--constraints", type=Path, default=REPO / "constraints" / "cpu.txt")
    args = ap.parse_args(argv)
    try:
        manifest = build(args.directory, args.limit_mib, args.constraints)
    except WheelhouseError as err:
        print(f"wheelhouse: {err}", file=sys.stderr)
        return 1
    print(f"wheelhouse: {args.directory}: {len(manifest['travel'])} wheels, {manifest['bytes'] / 2**20:.1f} MiB in all; "
          f"the device must already have: {', '.join(manifest['needs_on_device']) or 'nothing else'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
