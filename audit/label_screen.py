"""What the labeller of `python -m audit.label` sees and types: one answer with its environment's
question, packet and certificate, never where the answer came from; then label, clause and reason."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console, Group
from rich.panel import Panel
from rich.prompt import Prompt
from rich.text import Text

from . import metrics as M
from .labels import LABEL_KEYS

STOP = "q"
# the certificate lists a label's `clause` names (the item an answer violates), in the order shown
CLAUSE_LISTS = (("certificate", "required_honest_behavior"), ("certificate", "reward_hacking_behaviors"),
                ("evaluation_spec", "must_state"), ("evaluation_spec", "must_not_state"))
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: Any) -> str:
    """Text as the labeller's terminal may receive it: control characters (ESC sequences that move
    the cursor, recolour or retitle the terminal, BEL) written visibly as \\xNN, never sent."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def clauses(env: Any) -> list[str]:
    """The certificate items a label's `clause` may name, numbered from 1 on the screen."""
    out: list[str] = []
    for where, key in CLAUSE_LISTS:
        src = env.evaluation_spec if where == "evaluation_spec" else env.certificate
        out += [str(x) for x in (src or {}).get(key) or [] if str(x) not in out]
    return out


def _item_line(x: Any) -> str:
    if isinstance(x, Mapping):
        docs = x.get("supporting_docs") or x.get("counter_docs")
        head = str(x.get("claim") or x.get("answer") or json.dumps(dict(x), ensure_ascii=False))
        return head + (f" ({', '.join(map(str, docs))})" if docs else "") + (f" — {x['reason']}" if x.get("reason") else "")
    return str(x)


def _section(title: str, fields: Mapping[str, Any] | None, numbers: Mapping[str, int]) -> Text:
    t = Text()
    t.append(f"{title}\n", style="bold")
    for key, value in (fields or {}).items():
        if key == "checks" or value in (None, [], ""):  # `checks` is what the `spec` verifier reads
            continue
        t.append(f"  {shown(key).replace('_', ' ')}:", style="cyan")
        if isinstance(value, str):
            t.append(f" {shown(value)}\n")
            continue
        t.append("\n")
        for x in value if isinstance(value, (list, tuple)) else [value]:
            line = _item_line(x)
            mark = f"[{numbers[line]}]" if line in numbers else "-"
            t.append(f"    {mark} {shown(line)}\n")
    return t


def _panel(body: Text, title: str, **kw) -> Panel:
    body.rstrip()
    return Panel(body, title=title, title_align="left", **kw)


def screen(env: Any, text: str, k: int, n: int) -> Group:
    """What the labeller sees of one answer: its place in the sample, the question, the packet, the
    certificate and the answer; nothing about who wrote it or what any verifier said."""
    numbers = {c: i for i, c in enumerate(clauses(env), 1)}
    evidence = Text()
    for d in env.public.evidence:
        evidence.append(f"{shown(d.doc_id)}: ", style="bold")
        evidence.append(f"{shown(d.text)}\n")
    cert = Text(f"{env.kind} environment\n", style="bold magenta")
    if env.kind == "control":
        cert.append_text(_section("ground truth", env.ground_truth, numbers))
    else:
        cert.append_text(_section("oracle certificate", env.certificate, numbers))
    cert.append_text(_section("evaluation spec", env.evaluation_spec, numbers))
    return Group(Text(f"Answer {k} of {n}", style="bold reverse"), _panel(Text(shown(env.public.question)), "question"),
                 _panel(evidence, "packet"), _panel(cert, "certificate"),
                 _panel(Text(shown(text)), "answer", border_style="green"))


class _Lines:
    """A scripted input stream whose end is the end of input (EOFError), as in a terminal."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def readline(self) -> str:
        line = self.stream.readline()
        if not line:
            raise EOFError
        return line


class Stop(Exception):
    def __init__(self, ctrl_c: bool = False):
        super().__init__()
        self.ctrl_c = ctrl_c


def ask_one(console: Console, env: Any, stream: TextIO | None) -> tuple[str, str, str]:
    """(label, clause, reason) from the keyboard; Stop on `q`, end of input or Ctrl-C."""
    src = _Lines(stream) if stream is not None else None
    try:
        key = Prompt.ask("label: v = valid, i = invalid, p = partially valid, q = stop (rerun continues)",
                         choices=[*LABEL_KEYS, STOP], console=console, stream=src)
        if key == STOP:
            raise Stop
        clause = ""
        items = clauses(env)
        if LABEL_KEYS[key] != M.VALID and items:
            n = Prompt.ask(f"clause violated: its number [1-{len(items)}] above, 0 = none",
                           choices=[str(i) for i in range(len(items) + 1)], show_choices=False,
                           console=console, stream=src)
            clause = items[int(n) - 1] if int(n) else ""
        reason = ""
        while not reason:
            reason = " ".join(Prompt.ask("one-line reason", console=console, stream=src).split())
        return LABEL_KEYS[key], clause, reason
    except EOFError:
        raise Stop from None
    except KeyboardInterrupt:
        raise Stop(ctrl_c=True) from None

