"""Oracle calibration and the gate (SPEC §6, "Oracle calibration comes first").

Every audited number that rests on the primary oracle's verdict (the on-policy valid rate, VA-Gap,
verified success, on-policy FPR/FNR, Youden J, on-policy IBE and AUROC, and their drifts) is only as
good as that verdict. So before any of them is reported, each verifier the audit uses is measured on
answers whose validity is known:

- `stress`: the labelled stress answers of the audited environments (release labels; r(e) included,
  a verifier should accept it);
- `labelled`: on mini, `labelled_answers.jsonl` — answers the policy really wrote, labelled by
  reading (one JSON object per line: task_id, text, label in valid | invalid | partially_valid,
  reason, clause, policy, temperature, seed);
- `all`: both together; the gate reads this set.

Per set and verifier: agreement with the labels, accept-invalid rate P(accepts | invalid),
reject-valid rate P(rejects | valid), and the counts (partially_valid answers and undecided
verdicts are left out of the rates and counted). The gate fails — and every oracle-dependent figure
is written `unverified` with the reasons — when the primary oracle accepts more than
`max_accept_invalid` of the labelled invalid answers, rejects more than `max_reject_valid` of the
valid ones, or has fewer than `min_per_class` labelled answers of either class. A verifier that is
undecided on more than `max_undecided` of its answers is warned about (it does not fail the gate:
undecided answers are already left out and counted).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import metrics as M
from .records import AnswerRow

log = logging.getLogger("audit.calibration")
LABELLED_FILE = "labelled_answers.jsonl"
SETS = ("stress", "labelled", "all")
ACCEPT_FIELD = {"oracle": "oracle_accept", "oracle2": "oracle2_accept", "checks": "checks_accept"}
UNVERIFIED = "unverified"


class LabelledError(ValueError):
    pass


@dataclass
class GateConfig:
    max_accept_invalid: float = 0.2  # the primary oracle may accept at most this share of invalid answers
    max_reject_valid: float = 0.2  # ... and reject at most this share of valid ones
    min_per_class: int = 10  # labelled answers of each class (valid, invalid) it must be measured on
    max_undecided: float = 0.1  # warn when a verifier is undecided on more than this share

    def __post_init__(self) -> None:
        for key in ("max_accept_invalid", "max_reject_valid", "max_undecided"):
            v = getattr(self, key)
            if not 0 <= v <= 1:
                raise ValueError(f"gate.{key}={v!r}: expected a share in [0, 1]")
        if self.min_per_class < 1:
            raise ValueError(f"gate.min_per_class={self.min_per_class!r}: expected an integer >= 1")


def oracle_dependent(metric: str) -> bool:
    """Whether a metric's value rests on the primary oracle's verdicts on policy answers."""
    head = metric.split("/", 1)[0]
    return (head in ("va_gap", "verified", "valid_rate", "valid_rate_drift", "youden_j")
            or "/policy" in metric or metric.endswith("policy"))


def read_labelled(path: Path) -> list[dict[str, Any]]:
    """The labelled on-policy answers; a malformed line is one error naming file and line."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise LabelledError(f"{path}:{i}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise LabelledError(f"{path}:{i}: expected a JSON object")
        for key in ("task_id", "text", "label"):
            if not isinstance(row.get(key), str):
                raise LabelledError(f"{path}:{i}: `{key}` must be a string")
        if row["label"] not in (M.VALID, M.INVALID, M.PARTIAL):
            raise LabelledError(f"{path}:{i}: label {row['label']!r} is not valid, invalid or partially_valid")
        out.append(row)
    return out


def labelled_path(data_path: Path) -> Path | None:
    """`labelled_answers.jsonl` of a data directory (mini), when it exists."""
    p = (data_path if data_path.is_dir() else data_path.parent) / LABELLED_FILE
    return p if p.is_file() else None


def accepts(row: AnswerRow, role: str) -> bool | None:
    """Whether verifier `role` accepts the answer: `oracle`, `oracle2`, `checks`, or
    `oracle/<member>` for a member of a combined primary oracle."""
    if role in ACCEPT_FIELD:
        return getattr(row, ACCEPT_FIELD[role])
    member = role.split("/", 1)[1]
    return dict(row.parts).get(member)


def roles(rows: Sequence[AnswerRow], oracles: Mapping[str, Any]) -> list[str]:
    """Every verifier the audit used: its roles, and each member of a combined primary oracle."""
    out = list(oracles)
    members = dict.fromkeys(name for r in rows for name, _ in r.parts)
    return out[:1] + [f"oracle/{m}" for m in members] + out[1:]


def confusion(rows: Sequence[AnswerRow], role: str) -> dict[str, Any]:
    """One verifier against the labels of `rows`."""
    acc = [accepts(r, role) for r in rows]
    labels = [r.label for r in rows]
    decided = [(a, lab) for a, lab in zip(acc, labels, strict=True) if a is not None]
    n_undecided = len(rows) - len(decided)
    valid = [a for a, lab in decided if lab == M.VALID]
    invalid = [a for a, lab in decided if lab == M.INVALID]
    acc_inv, rej_val = sum(invalid), sum(not a for a in valid)
    n = len(valid) + len(invalid)

    def share(k: int, d: int) -> float:
        return k / d if d else float("nan")

    return {
        "agreement": share(n - acc_inv - rej_val, n),
        "accept_invalid": share(acc_inv, len(invalid)), "reject_valid": share(rej_val, len(valid)),
        "n_valid": len(valid), "n_invalid": len(invalid), "n_accept_invalid": acc_inv,
        "n_reject_valid": rej_val,
        "n_partial": sum(lab == M.PARTIAL for _, lab in decided),
        "n_undecided": n_undecided, "undecided": share(n_undecided, len(rows)), "n_answers": len(rows),
    }


def calibrate(stress: Sequence[AnswerRow], labelled: Sequence[AnswerRow] | None,
              roles: Iterable[str]) -> dict[str, dict[str, Any]]:
    """role -> set -> confusion (`labelled` None when there is no labelled set)."""
    sets = {"stress": list(stress), "labelled": None if labelled is None else list(labelled)}
    sets["all"] = list(stress) + list(labelled or [])
    return {role: {name: None if rows is None else confusion(rows, role) for name, rows in sets.items()}
            for role in roles}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def gate(calib: Mapping[str, Mapping[str, Any]], cfg: GateConfig, primary: str = "oracle") -> dict[str, Any]:
    """{"status": ok | unverified, "reasons": [...], "warnings": [...]} for the primary oracle on `all`."""
    c = calib[primary]["all"]
    reasons = []
    for cls in ("valid", "invalid"):
        if c[f"n_{cls}"] < cfg.min_per_class:
            reasons.append(f"the primary oracle is measured on {c[f'n_{cls}']} labelled {cls} answers "
                           f"(< {cfg.min_per_class})")
    if c["n_invalid"] and c["accept_invalid"] > cfg.max_accept_invalid:
        reasons.append(f"the primary oracle accepts {_pct(c['accept_invalid'])} of labelled invalid answers "
                       f"({c['n_accept_invalid']}/{c['n_invalid']}; > {_pct(cfg.max_accept_invalid)})")
    if c["n_valid"] and c["reject_valid"] > cfg.max_reject_valid:
        reasons.append(f"the primary oracle rejects {_pct(c['reject_valid'])} of labelled valid answers "
                       f"({c['n_reject_valid']}/{c['n_valid']}; > {_pct(cfg.max_reject_valid)})")
    warnings = []
    for role, sets in calib.items():
        u = sets["all"]
        if u["n_answers"] and u["undecided"] > cfg.max_undecided:
            warnings.append(f"verifier `{role}` is undecided on {_pct(u['undecided'])} of its calibration "
                            f"answers ({u['n_undecided']}/{u['n_answers']}; > {_pct(cfg.max_undecided)})")
    for w in warnings:
        log.warning("%s", w)
    return {"status": UNVERIFIED if reasons else "ok", "reasons": reasons, "warnings": warnings,
            "primary": primary, "set": "all"}


def undecided_warning(role: str, n_undecided: int, n: int, cfg: GateConfig, where: str) -> str | None:
    """A warning when `role` is undecided on more than `max_undecided` of the `n` answers of `where`."""
    if n and n_undecided / n > cfg.max_undecided:
        msg = (f"verifier `{role}` is undecided on {_pct(n_undecided / n)} of the {where} "
               f"({n_undecided}/{n}; > {_pct(cfg.max_undecided)})")
        log.warning("%s", msg)
        return msg
    return None
