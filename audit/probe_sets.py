"""A second held-out probe set: the preference probe on the labelled stress answers of another
environment set (docs/method.md §Second probe set).

    python -m audit.gap ckpt=outputs/selfplay probe_data=../shared/impossible_rubrics probe_data_name=release

`probe_data=DIR` is a release-shaped directory (`data/`, `data_control/`, as the ImpossibleRubrics
release) or a mini-shaped one (the same layout with `splits/train.json` and `splits/audit.json`, as
`data/mini`); every record is read, whatever its own split. Its metrics are the probe's entries of
`audit.metric_table` (`pref_margin`, `pref_accuracy`, `pref_margin_sum`, `likelihood_auroc`) with
`@<name>` appended (`pref_margin/impossible@release`; the name is the directory's unless
`probe_data_name` says otherwise). They are computed from these answers alone, never pooled with the
audit split's, and flow through `audit.json`, `audit.csv`, the seeds' intervals, the paired
contrasts between rewards and the report like any other metric.

Which environments are read, and why:
- an environment the audited run trained on (its train split, by task id) is left out and counted
  (`probe/trained_on@<name>`): a probe on training environments measures what was fitted, not
  what generalised;
- an environment whose policy prompt plus its longest stress answer (end-of-turn included) does not
  fit the policy's `max_context` is left out and counted (`probe/too_long@<name>`), with one warning
  line naming how many: the probe scores whole answers and never truncates one;
- a set with no environment left is refused in one line before anything is computed.
`max_envs` caps the audit split only.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from selfplay.config import resolve_data_path
from selfplay.envs import EnvLoadError, load_envs
from selfplay.envs.types import Environment

from . import metric_table as T
from .collect import answers_of, build_rows, probe_terms
from .plan import AuditError, Plan
from .records import AnswerRow, IterationAudit, StatsSettings
from .summary import iteration_metrics

log = logging.getLogger("audit.gap")
SUFFIX = "@"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
PROBE_ROWS = "probe/stress"  # the answers the set's metrics read: its stress answers


class ProbeSetError(AuditError):
    """A probe set that cannot be read: one line naming the directory and the way out."""


@dataclass(frozen=True)
class ProbeSet:
    name: str  # the metric suffix
    path: str  # as given
    envs: tuple[Environment, ...]  # the environments read
    trained_on: int = 0  # left out: the audited run trained on them
    too_long: tuple[str, ...] = ()  # left out: prompt + longest stress answer over max_context
    prompts: Any = None  # the policy's prompts of `envs`, rendered once (selfplay.runs.Prompts)


def base_metric(name: str) -> str:
    """`pref_margin/impossible@release` -> `pref_margin/impossible` (its audit.metric_table entry)."""
    return name.split(SUFFIX, 1)[0]


def suffixed(name: str, set_name: str) -> str:
    return f"{name}{SUFFIX}{set_name}"


def set_name(path: str, name: str | None) -> str:
    """The metric suffix: `name`, else the directory's own name; letters, digits, `_ . -` only, so
    that it can never be read as part of a metric's path."""
    chosen = name if name is not None else Path(str(path).rstrip("/")).name
    if not NAME.fullmatch(chosen or ""):
        key = "probe_data_name" if name is not None else "probe_data"
        raise ProbeSetError(f"{key}: {chosen!r} is no usable set name (letters, digits, _ . - only); "
                            "name the set with probe_data_name=NAME")
    return chosen


def load_set(path: str) -> list[Environment]:
    """Every record of the directory, validated as training validates its data; one line on error."""
    where = resolve_data_path(str(path))
    if not where.exists():
        raise ProbeSetError(f"probe_data={path}: no such directory; point it at a release directory "
                            "(data/, data_control/) such as the ImpossibleRubrics release")
    try:
        return load_envs(where)
    except EnvLoadError as e:
        first = e.errors[0] if e.errors else e
        more = f" (and {len(e.errors) - 1} more; `python -m selfplay.envs {path}` lists every one)" \
            if len(e.errors) > 1 else ""
        raise ProbeSetError(f"probe_data={path}: {first}{more}") from None
    except (OSError, ValueError) as e:
        raise ProbeSetError(f"probe_data={path}: cannot read it: {e}") from None


def too_long(tokenizer: Any, envs: Sequence[Environment], prompts: Sequence[str], eot: str,
             max_context: int) -> list[str]:
    """Task ids whose prompt plus their longest stress answer (as the policy's own turn) exceed
    `max_context` tokens."""
    if not envs:
        return []
    plen = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    out = []
    for e, n in zip(envs, plen, strict=True):
        turns = [s.text + eot for s in e.stress_answers]
        longest = max((len(ids) for ids in tokenizer(turns, add_special_tokens=False)["input_ids"]), default=0)
        if n + longest > max_context:
            out.append(e.task_id)
    return out


def plan_probe_sets(cfg: Any, p: Plan) -> dict[tuple[str, int], ProbeSet]:
    """The probe set of each reward × seed (empty without `probe_data`), checked before anything is
    computed: the records load, and each run keeps at least one environment."""
    if getattr(cfg, "probe_data", None) is None:
        return {}
    if not cfg.probe:
        raise ProbeSetError("probe_data is read by the preference probe, which probe=false turns off; "
                            "drop probe_data or set probe=true")
    from selfplay.models.chat import end_of_turn
    from selfplay.models.loading import load_tokenizer

    name = set_name(cfg.probe_data, getattr(cfg, "probe_data_name", None))
    envs = load_set(cfg.probe_data)
    out: dict[tuple[str, int], ProbeSet] = {}
    memo: dict[str, ProbeSet] = {}
    for c in p.discovery.checkpoints:
        key = (c.reward, c.seed)
        if key in out:
            continue
        run = p.runs[c.path]
        try:
            trained = {e.task_id for e in run.envs("train")}
        except (EnvLoadError, OSError, ValueError) as e:
            raise AuditError(f"{c.path}: cannot load the run's train split: {e}") from None
        policy = run.policy
        memo_key = json.dumps([OmegaConf.to_container(run.settings.policy), sorted(trained)], default=str)
        if memo_key not in memo:
            kept = [e for e in envs if e.task_id not in trained]
            tok = load_tokenizer(policy)
            over = too_long(tok, kept, run.rendered(tok, kept), end_of_turn(tok), policy.max_context)
            if over:
                log.warning("audit.gap: warning: probe_data=%s: %d environment(s) left out of the probe set "
                            "`%s`: prompt + longest stress answer > max_context %d of policy %s (first: %s)",
                            cfg.probe_data, len(over), name, policy.max_context, policy.name, over[0])
            read = tuple(e for e in kept if e.task_id not in set(over))
            if not read:
                raise ProbeSetError(
                    f"probe_data={cfg.probe_data}: no environment left to probe ({len(envs) - len(kept)} trained "
                    f"on by run {run.dir}, {len(over)} longer than max_context {policy.max_context}); "
                    "nothing was written; point probe_data at environments the run never trained on")
            memo[memo_key] = ProbeSet(name, str(cfg.probe_data), read, len(envs) - len(kept), tuple(over),
                                      run.prompts(tok, read))
        out[key] = memo[memo_key]
    return out


def probe_set_rows(probe: ProbeSet, policy: Any, *, show_progress: bool = False) -> list[AnswerRow]:
    """One checkpoint's probe rows on the set: Δℓ of every stress answer, adapter on and off."""
    answers = [a for e in probe.envs for a in answers_of(e)]
    on = probe_terms(policy, probe.prompts, answers, adapter=True, show_progress=show_progress)
    off = probe_terms(policy, probe.prompts, answers, adapter=False, show_progress=show_progress)
    return build_rows(answers, probe=on, probe0=off)


def _probe_metric(name: str) -> bool:
    d = T.declared().get(name)
    return d is not None and d.metric.rows == PROBE_ROWS


def with_probe_set(audits: Mapping[int, IterationAudit], rows_by_t: Mapping[int, Sequence[AnswerRow]],
                   probe: ProbeSet, *, run_seed: int, settings: StatsSettings) -> dict[int, IterationAudit]:
    """The seed's iteration audits with the set's probe metrics, counts and per-environment values
    added under `@<name>`; each computed from the set's rows alone."""
    out = {}
    for t, a in audits.items():
        if t not in rows_by_t:
            out[t] = a
            continue
        own = iteration_metrics(rows_by_t[t], run_seed=run_seed, t=t, settings=settings, history=rows_by_t)
        metrics = {suffixed(k, probe.name): v for k, v in own.metrics.items() if _probe_metric(k)}
        counts = {suffixed(k, probe.name): v for k, v in own.counts.items()
                  if k.startswith("probe/") and "/labelled/" not in k}
        counts[suffixed("probe/trained_on", probe.name)] = probe.trained_on
        counts[suffixed("probe/too_long", probe.name)] = len(probe.too_long)
        per_env = {suffixed(k, probe.name): v for k, v in own.per_env.items() if _probe_metric(k)}
        out[t] = replace(a, metrics={**a.metrics, **metrics}, counts={**a.counts, **counts},
                         per_env={**a.per_env, **per_env})
    return out


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}"


def _cell(m: Mapping[str, Any] | None) -> str:
    if not m or m.get("value") is None:
        return "—"
    return f"{_num(m['value'])} [{_num(m.get('ci_low'))}, {_num(m.get('ci_high'))}]"


def report_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report's lines on each probe set: `pref_margin/impossible@<name>` per reward, seed and t."""
    names = sorted({m.split(SUFFIX, 1)[1] for e in doc["rewards"].values() for s in e["seeds"].values()
                    for it in s["iterations"].values() for m in it["metrics"] if SUFFIX in m})
    lines = []
    for name in names:
        rows = []
        for reward, entry in sorted(doc["rewards"].items()):
            for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
                for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                    m, c = it["metrics"], it.get("counts", {})
                    got = [m.get(suffixed(f"{h}/{k}", name)) for h, k in (
                        ("pref_margin", "impossible"), ("pref_accuracy", "impossible"), ("pref_margin", "control"))]
                    if not any(got):
                        continue
                    cells = " | ".join(_cell(g) for g in got)
                    envs = c.get(suffixed("probe/environments/impossible", name), "—")
                    rows.append(f"| {reward} | {seed} | {t} | {cells} | {envs} |")
        if rows:
            settings = doc.get("settings") if isinstance(doc.get("settings"), Mapping) else {}
            lines += [f"## Preference probe on the held-out set `{name}`", "",
                      f"The same probe on the labelled stress answers of `{settings.get('probe_data', name)}` "
                      "(`probe_data`), computed from those answers alone and never pooled with the audit "
                      "split; environments the run trained on, or whose prompt and longest answer exceed "
                      f"the policy's context, are left out and counted (`probe/trained_on@{name}`, "
                      f"`probe/too_long@{name}`). 95% t intervals over environments.", "",
                      "| reward | seed | t | pref_margin impossible | pref_accuracy impossible | "
                      "pref_margin control | impossible environments |", "|---|---|---|---|---|---|---|",
                      *rows, ""]
    return lines
