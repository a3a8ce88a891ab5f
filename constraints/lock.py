"""Write a pip constraints file (exact `==` pins) from `pip install --dry-run --report` JSON reports.

    python constraints/lock.py constraints/cpu.txt cpu.json smollm2.json

`make lock` runs it (see the Makefile for the requirements each file resolves); nothing else does.
Every package a report would install is pinned, except the project itself. A local version label
(`2.13.0+cpu`) is dropped: `torch==2.13.0` matches the CPU build on the index this machine uses and
the CUDA build on PyPI alike. The header names what was resolved and on which interpreter and
platform: pins behind an environment marker (a backport for another Python, say) are missing for any
other, and pip resolves those freely.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PROJECT = "selfplay-judges"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(reports: list[dict]) -> dict[str, str]:
    """canonical name -> `Name==version` of every package the reports install, the project left out."""
    out: dict[str, str] = {}
    for report in reports:
        for item in report["install"]:
            meta = item["metadata"]
            key = canonical(meta["name"])
            if key == PROJECT:
                continue
            line = f"{meta['name']}=={meta['version'].split('+')[0]}"
            if out.setdefault(key, line) != line:
                raise SystemExit(f"the reports disagree on {meta['name']}: {out[key]} vs {line}")
    return out


def requested(reports: list[dict]) -> list[str]:
    """What each report was asked for (the project as `.[extras]`)."""
    asked = []
    for report in reports:
        for item in report["install"]:
            if not item.get("requested"):
                continue
            meta = item["metadata"]
            extras = item.get("requested_extras") or []
            name = "." if canonical(meta["name"]) == PROJECT else meta["name"]
            asked.append(name + (f"[{','.join(sorted(extras))}]" if extras else ""))
    return asked


def main(out: str, *report_paths: str) -> None:
    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in report_paths]
    env = reports[0]["environment"]
    header = [
        f"# Written by `make lock` (constraints/lock.py): pip's resolution of {' + '.join(requested(reports))}",
        f"# on CPython {env['python_full_version']}, {env['sys_platform']} {env['platform_machine']}. Do not edit.",
    ]
    lines = sorted(pins(reports).items())
    Path(out).write_text("\n".join(header + [line for _, line in lines]) + "\n", encoding="utf-8")
    print(f"{out}: {len(lines)} pins")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
