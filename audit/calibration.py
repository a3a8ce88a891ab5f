"""Oracle calibration and the gate, per source (docs/method.md §Calibration gate).

Every audited number that rests on the primary oracle's verdict (an entry of audit.metric_table
with `oracle=True`: the on-policy valid rate, VA-Gap, verified success, on-policy FPR/FNR, Youden J,
on-policy IBE and AUROC, and their drifts) is only as good as that verdict. So before any of them
is reported, each verifier the audit uses is measured, separately, on two sources of answers whose
validity is known:

- `stress`: (a) the labelled stress answers of the audited environments (release labels; r(e)
  included, a verifier should accept it). Written by the data's authors, beside the certificates the
  `spec` verifier was written from: reported, never part of the decision;
- `labelled`: (b) the on-policy set, answers the audited policy really wrote, labelled by reading:
  `labelled_answers.jsonl` of the data (mini) and the labels `python -m audit.label` made for the run
  (`labels.jsonl`; one JSON object per line: task_id, text, label in valid | invalid |
  partially_valid, reason, clause, ...). Rows that name their checkpoint (`iteration`) are also
  calibrated per checkpoint.

Per source and verifier: agreement with the labels, accept-invalid rate P(accepts | invalid),
reject-valid rate P(rejects | valid), and the counts (partially_valid answers and undecided
verdicts are left out of the rates and counted). The two sources are never pooled.

The gate reads the on-policy set alone. It fails — and every oracle-dependent figure is written
`unverified` with the reasons, each naming the on-policy set — when the primary oracle accepts more
than `max_accept_invalid` of its labelled invalid answers, rejects more than `max_reject_valid` of
its valid ones, or has fewer than `min_per_class` labelled answers of either class (no on-policy set
at all is a failure too). The oracle's error moves with the policy, so a checkpoint whose own labels
hold `min_per_class` of each class is gated on them alone (`checkpoint_gates`); the others are gated
on the run's whole on-policy set. A figure that reads several iterations (a drift, a slope) is
withheld when any of their gates fails (`metric_gate`). A verifier that is undecided on more than
`max_undecided` of a source's answers is warned about (it does not fail the gate: undecided answers
are already left out and counted); the records each verifier could not decide are counted per record
(`undecided_by_record`: on a release, whose records carry no `checks`, `spec` decides none).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import metric_table as T
from . import metrics as M
from . import stats as S
from .records import ORACLE, AnswerRow, member

log = logging.getLogger("audit.calibration")
LABELLED_FILE = "labelled_answers.jsonl"
SETS = ("stress", "labelled")  # (a) the stress answers, (b) the on-policy set: never pooled
ON_POLICY = "labelled"
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


def read_labelled(path: Path) -> list[dict[str, Any]]:
    """The labelled on-policy answers; a malformed line is one error naming file and line, an
    unreadable file (not UTF-8, a directory, ...) one naming the file."""
    from selfplay.envs.load import unreadable

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LabelledError(f"{path}: {unreadable(path, e)}; fix or remove the file") from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
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


def _run_parts(path: str) -> tuple[str, ...]:
    """The `<reward>/seed<s>/iter_<t>` tail of a checkpoint or adapter path, with what precedes it."""
    parts = tuple(p for p in str(path).replace("\\", "/").split("/") if p and p != ".")
    if parts and parts[-1] == "adapter":
        parts = parts[:-1]
    return parts


def own_rows(rows: Sequence[Mapping[str, Any]], *, policy: str, reward: str, seed: int,
             experiment: str | None = None,
             cached_text: Callable[[Mapping[str, Any], int], str | None] | None = None) -> list[dict[str, Any]]:
    """The labelled rows of a file kept outside the run (the data's labelled_answers.jsonl, the fresh
    blind labels of experiments/labelled/) that the audited run's policy wrote, each with the
    `iteration` it belongs to. The rule:

    - base weights (no `adapter`, and no `checkpoint` or one at `iter_0`): the text counts when
      `policy` is exactly the run's policy name (a warm-start variant or a described recipe is
      another policy), as iteration 0: a run trains a fresh adapter whose LoRA B is 0 at iter_0, so
      its t = 0 is those weights, whichever run sampled the text.
    - an adapter's text (an `adapter`, or a `checkpoint` at t >= 1): it counts only when its
      `checkpoint` (or adapter path) ends in this run's `<reward>/seed<s>/iter_<t>` (and in the run's
      experiment, where the path names one) and this run's own audit cache holds that very text at
      the row's key (`cached_text(row, t)`: its `answers_file`, task and `index`). A path alone
      never proves authorship: the adapter there may have been retrained since (mini's rows of
      `outputs/demo/decisive/seed0/iter_1` were written by an older warm-start demo), and another
      run of the same reward and seed has other weights. Labels `python -m audit.label` wrote into
      the run are checked the same way when they are read (audit.labels.run_labels).
    A row's own `iteration`, when it has one, must agree with its checkpoint, else the row is left out.
    """
    out = []
    for r in rows:
        where = r.get("checkpoint") or r.get("adapter")
        parts = _run_parts(where) if where else ()
        base = not r.get("adapter") and (not parts or parts[-1] == "iter_0")
        if base:
            if r.get("policy") != policy:
                continue
            t = 0
        else:
            if len(parts) < 3 or parts[-3] != reward or parts[-2] != f"seed{seed}" or not parts[-1].startswith("iter_"):
                continue
            if experiment is not None and len(parts) >= 4 and parts[-4] != experiment:
                continue
            try:
                t = int(parts[-1][len("iter_"):])
            except ValueError:
                continue
            if cached_text is None or cached_text(r, t) != r.get("text"):
                continue
        try:
            if r.get("iteration") is not None and int(r["iteration"]) != t:
                continue
        except (TypeError, ValueError):
            continue
        out.append({**r, "iteration": t})
    return out


def labelled_path(data_path: Path) -> Path | None:
    """`labelled_answers.jsonl` of a data directory (mini), when it exists."""
    p = (data_path if data_path.is_dir() else data_path.parent) / LABELLED_FILE
    return p if p.is_file() else None


def accepts(row: AnswerRow, role: str) -> bool | None:
    """Whether verifier `role` accepts the answer (`row.accepts`; None when undecided or not run)."""
    return row.accepts.get(role)


def roles(rows: Sequence[AnswerRow], oracles: Mapping[str, Any]) -> list[str]:
    """Every verifier the audit used: its roles (`oracles`, primary first), each member of a combined
    primary oracle after the primary."""
    out = list(oracles)
    members = dict.fromkeys(k for r in rows for k in r.accepts if k.startswith(member("")))
    return out[:1] + list(members) + out[1:]


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

    def interval(cls: str, event: bool) -> list[float]:
        # answers of one environment are not independent: the interval is clustered by environment
        rows_ = [(r.task_id, a == event) for r, a in zip(rows, acc, strict=True) if a is not None and r.label == cls]
        ci = S.cluster_wilson([float(x) for _, x in rows_], [e for e, _ in rows_]) if rows_ else None
        return [float("nan"), float("nan")] if ci is None else [ci.low, ci.high]

    return {
        "accept_invalid_ci": interval(M.INVALID, True), "reject_valid_ci": interval(M.VALID, False),
        "environments": len({r.task_id for r in rows}),
        "agreement": share(n - acc_inv - rej_val, n),
        "accept_invalid": share(acc_inv, len(invalid)), "reject_valid": share(rej_val, len(valid)),
        "n_valid": len(valid), "n_invalid": len(invalid), "n_accept_invalid": acc_inv,
        "n_reject_valid": rej_val,
        "n_partial": sum(lab == M.PARTIAL for _, lab in decided),
        "n_undecided": n_undecided, "undecided": share(n_undecided, len(rows)), "n_answers": len(rows),
    }


def calibrate(stress: Sequence[AnswerRow], labelled: Sequence[AnswerRow] | None,
              roles: Iterable[str]) -> dict[str, dict[str, Any]]:
    """role -> source -> confusion: `stress` and `labelled` (the on-policy set; None when there is
    none), each on its own."""
    sets = {"stress": list(stress), ON_POLICY: None if labelled is None else list(labelled)}
    return {role: {name: None if rows is None else confusion(rows, role) for name, rows in sets.items()}
            for role in roles}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def gate(calib: Mapping[str, Mapping[str, Any]], cfg: GateConfig, primary: str = ORACLE,
         where: str = "the on-policy set") -> dict[str, Any]:
    """{"status": ok | unverified, "reasons": [...], "warnings": [...]} for the primary oracle on
    the on-policy set alone (`calib[primary]["labelled"]`); every reason names `where`, the set read.
    The stress answers are never read here."""
    c = calib[primary][ON_POLICY]
    reasons = []
    if c is None:
        reasons.append(f"{where}: none (no labelled answers of the audited policy; the gate reads only "
                       "those: label some with `python -m audit.label`)")
    else:
        for cls in ("valid", "invalid"):
            if c[f"n_{cls}"] < cfg.min_per_class:
                reasons.append(f"{where}: the primary oracle is measured on {c[f'n_{cls}']} labelled {cls} "
                               f"answers (< {cfg.min_per_class})")
        if c["n_invalid"] and c["accept_invalid"] > cfg.max_accept_invalid:
            reasons.append(f"{where}: the primary oracle accepts {_pct(c['accept_invalid'])} of labelled invalid "
                           f"answers ({c['n_accept_invalid']}/{c['n_invalid']}; > {_pct(cfg.max_accept_invalid)})")
        if c["n_valid"] and c["reject_valid"] > cfg.max_reject_valid:
            reasons.append(f"{where}: the primary oracle rejects {_pct(c['reject_valid'])} of labelled valid "
                           f"answers ({c['n_reject_valid']}/{c['n_valid']}; > {_pct(cfg.max_reject_valid)})")
    warnings = []
    for role, sets in calib.items():
        for name in SETS:
            u = sets.get(name)
            if u and u["n_answers"] and u["undecided"] > cfg.max_undecided:
                warnings.append(f"verifier `{role}` is undecided on {_pct(u['undecided'])} of its {name} "
                                f"calibration answers ({u['n_undecided']}/{u['n_answers']}; "
                                f"> {_pct(cfg.max_undecided)})")
    for w in warnings:
        log.warning("%s", w)
    return {"status": UNVERIFIED if reasons else "ok", "reasons": reasons, "warnings": warnings,
            "primary": primary, "set": ON_POLICY, "where": where}


def enough(c: Mapping[str, Any] | None, cfg: GateConfig) -> bool:
    """Whether a confusion holds `min_per_class` labelled answers of each class."""
    return c is not None and min(c["n_valid"], c["n_invalid"]) >= cfg.min_per_class


def checkpoint_gates(run_gate: Mapping[str, Any], own: Mapping[int, Mapping[str, Mapping[str, Any]]],
                     iterations: Iterable[int], cfg: GateConfig, where: str,
                     primary: str = ORACLE) -> dict[int, dict[str, Any]]:
    """iteration -> the gate its figures are read under: the gate on that checkpoint's own on-policy
    labels (`own[t]`: role -> confusion) where they hold `min_per_class` of each class, else the
    run's (`run_gate`, on its whole on-policy set), with a warning saying so when it has some."""
    out = {}
    for t in iterations:
        c = own.get(t)
        if c is not None and enough(c.get(primary), cfg):
            g = gate({role: {ON_POLICY: v} for role, v in c.items()}, cfg, primary, f"{where} at t = {t}")
            out[t] = g | {"set": f"{ON_POLICY}/t={t}"}
            continue
        out[t] = {**run_gate, "warnings": list(run_gate.get("warnings", []))}
        if c is not None:
            p = c[primary]
            out[t]["warnings"].append(
                f"{where} at t = {t} holds {p['n_valid']} valid and {p['n_invalid']} invalid labelled "
                f"answers (< {cfg.min_per_class} of a class): t = {t} is gated on the run's whole on-policy set")
    return out


def iterations_read(metric: str, t: int, audited: Iterable[int]) -> list[int]:
    """The iterations a metric at t rests on (its entry's `reads`): a drift t and 0, a slope every
    audited u <= t, others t."""
    reads = T.entry(metric).metric.reads
    audited = sorted(audited)
    if reads == T.SLOPE:
        return [u for u in audited if u <= t] or [t]
    if reads == T.DRIFT:
        return sorted({t, 0} & set(audited)) or [t]
    return [t]


def metric_gate(calib: Mapping[str, Any] | None, metric: str, t: int | None = None) -> tuple[str, list[str]]:
    """(status, reasons) a metric at iteration t is written under: `unverified` when its entry in
    audit.metric_table rests on the primary oracle (`oracle`) and the gate of any iteration it reads
    failed (`calib["gates"]`, else the run's `calib["gate"]`). An undeclared metric is a KeyError."""
    calib = calib or {}
    # a probe set's metric (`<metric>@<set>`, audit.probe_sets) is gated as its entry is
    if not T.entry(metric.split("@", 1)[0]).metric.oracle:
        return "ok", []
    gates = calib.get("gates") or {}
    if t is None or not gates:
        g = calib.get("gate") or {}
        return (UNVERIFIED, list(g["reasons"])) if g.get("status") == UNVERIFIED else ("ok", [])
    read = [gates.get(str(u)) or gates.get(u) or calib.get("gate") or {}
            for u in iterations_read(metric, t, (int(k) for k in gates))]
    reasons = list(dict.fromkeys(r for g in read if g.get("status") == UNVERIFIED for r in g["reasons"]))
    return (UNVERIFIED, reasons) if reasons else ("ok", [])


def summary_gate(gates: Mapping[int, Mapping[str, Any]], run_gate: Mapping[str, Any]) -> dict[str, Any]:
    """The seed's gate in one: ok only when every iteration's gate passes; reasons and warnings of
    all of them, each once."""
    every = [run_gate] if not gates else list(gates.values())
    reasons = list(dict.fromkeys(r for g in every if g["status"] == UNVERIFIED for r in g["reasons"]))
    warnings = list(dict.fromkeys(w for g in [run_gate, *every] for w in g.get("warnings", [])))
    return {**run_gate, "status": UNVERIFIED if reasons else "ok", "reasons": reasons, "warnings": warnings}


def undecided_by_record(rows: Sequence[AnswerRow], roles: Iterable[str]) -> dict[str, dict[str, dict[str, int]]]:
    """role -> task_id -> {"n_undecided", "n_answers"}: the records each verifier could not decide
    on some answer of `rows` (only records with an undecided verdict are listed)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for role in roles:
        per: dict[str, dict[str, int]] = {}
        for r in rows:
            c = per.setdefault(r.task_id, {"n_undecided": 0, "n_answers": 0})
            c["n_answers"] += 1
            c["n_undecided"] += accepts(r, role) is None
        out[role] = {tid: c for tid, c in sorted(per.items()) if c["n_undecided"]}
    return out


def run_calibration(stress: Sequence[AnswerRow], on_policy: Sequence[AnswerRow] | None,
                    on_policy_iterations: Sequence[int | None], policy_by_t: Mapping[int, Sequence[AnswerRow]],
                    roles: Sequence[str], cfg: GateConfig, where: str) -> dict[str, Any]:
    """One reward × seed's calibration (pure): every verifier on each source (`verifiers`), on each
    checkpoint's own on-policy labels (`checkpoints`: t -> role -> confusion, for the iterations whose
    labels name them: `on_policy_iterations`, aligned with `on_policy`, None for a row of no
    checkpoint), the gate of each iteration (`gates`), the seed's gate in one (`gate`), and the
    records each verifier could not decide among the stress, on-policy and policy answers
    (`undecided`)."""
    calib = calibrate(stress, on_policy, roles)
    run_gate = gate(calib, cfg, where=where)
    own: dict[int, list[AnswerRow]] = {}
    for row, t in zip(on_policy or [], on_policy_iterations, strict=True):
        if t is not None:
            own.setdefault(int(t), []).append(row)
    per_t = {t: {role: confusion(rows, role) for role in roles} for t, rows in sorted(own.items())}
    gates = checkpoint_gates(run_gate, per_t, sorted(policy_by_t), cfg, where)
    for t, pol in sorted(policy_by_t.items()):
        for role in roles:
            w = undecided_warning(role, sum(accepts(r, role) is None for r in pol), len(pol), cfg,
                                  f"policy answers at t = {t}")
            if w:
                gates[t]["warnings"].append(w)
    answered = list(stress) + list(on_policy or []) + [r for rows in policy_by_t.values() for r in rows]
    return {"verifiers": calib, "checkpoints": {str(t): c for t, c in per_t.items()},
            "gates": {str(t): g for t, g in sorted(gates.items())}, "gate": summary_gate(gates, run_gate),
            "undecided": undecided_by_record(answered, roles)}


def undecided_warning(role: str, n_undecided: int, n: int, cfg: GateConfig, where: str) -> str | None:
    """A warning when `role` is undecided on more than `max_undecided` of the `n` answers of `where`."""
    if n and n_undecided / n > cfg.max_undecided:
        msg = (f"verifier `{role}` is undecided on {_pct(n_undecided / n)} of the {where} "
               f"({n_undecided}/{n}; > {_pct(cfg.max_undecided)})")
        log.warning("%s", msg)
        return msg
    return None
