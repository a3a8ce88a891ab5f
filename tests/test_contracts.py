"""The protocols other code relies on, checked against what implements them.

- Every backend fake defined in tests/ (a class with `sample`, `greedy` or `next_token_logprobs`)
  satisfies `selfplay.models.backend.Backend`: each member is present (runtime_checkable only looks
  at names) and each method accepts the call the protocol describes, so a test that passes on a fake
  passes on the interface the real backends implement.
- Every judge `build_judge` can make satisfies `judges.base.Judge`, `prepare` included.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from judges import JUDGES, Judge, JudgeItem, build_judge
from selfplay.envs.types import Document, PublicView
from selfplay.models.backend import Backend

TESTS = Path(__file__).resolve().parent
GENERATION = {"sample", "greedy", "next_token_logprobs"}
# constructor arguments of the fakes that take any (a fake not listed is built with none)
ARGS = {
    "ScriptedBackend": (lambda prompt: {},),  # script: prompt -> {label: probability}
    "FakeOracleBackend": (lambda prompt: {},),  # probs: prompt -> {label: probability}
    "FakeBackend": (0.5,),  # p_yes
}


def backend_fakes() -> list[tuple[str, str]]:
    """(module, class) of every class in tests/ that defines a generation or log-prob method."""
    out = []
    for path in sorted(TESTS.glob("test_*.py")):
        if path.name == Path(__file__).name:  # this file's deliberately wrong example
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                if methods & GENERATION:
                    out.append((path.stem, node.name))
    return out


def protocol_members(protocol: type) -> set[str]:
    """The attributes and methods a protocol's own body declares (what isinstance looks for)."""
    methods = {n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")}
    return set(getattr(protocol, "__annotations__", {})) | methods


def protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(Backend, name)) for name in sorted(protocol_members(Backend))
            if inspect.isfunction(getattr(Backend, name, None))}


def accepts(method, protocol: inspect.Signature) -> list[str]:
    """The protocol calls `method` cannot take: positional parameters by position, keyword-only ones by
    name, once with every optional argument given and once with none."""
    params = [p for p in protocol.parameters.values() if p.name != "self"]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p for p in params if p.kind == p.KEYWORD_ONLY]
    problems = []
    for with_optional in (True, False):
        args = [object() for p in positional if with_optional or p.default is p.empty]
        kwargs = {p.name: object() for p in keyword if with_optional or p.default is p.empty}
        try:
            inspect.signature(method).bind(*args, **kwargs)
        except TypeError as e:
            problems.append(f"({len(args)} positional, {sorted(kwargs)}): {e}")
    return problems


def test_the_fakes_are_found():
    """The scan sees the fakes it is meant to check (an empty scan would pass every check below)."""
    found = {name for _, name in backend_fakes()}
    assert {"ScriptedBackend", "RecordingBackend", "FakeOracleBackend", "FakeBackend"} <= found


@pytest.mark.parametrize("module, name", backend_fakes(), ids=lambda x: x)
def test_backend_fake_satisfies_the_protocol(module, name):
    cls = getattr(importlib.import_module(module), name)
    fake = cls(*ARGS.get(name, ()))
    missing = sorted(m for m in protocol_members(Backend) if not hasattr(fake, m))
    assert missing == [], f"{module}.{name} lacks {missing}"
    assert isinstance(fake, Backend)
    for method, signature in protocol_methods().items():
        assert accepts(getattr(fake, method), signature) == [], f"{module}.{name}.{method}"


def test_the_signature_check_catches_a_wrong_keyword():
    """A fake whose `greedy` names its budget differently is refused, though isinstance accepts it."""

    class Wrong:
        def greedy(self, prompts, *, max_tokens, adapter=True):
            return []

    assert accepts(Wrong().greedy, protocol_methods()["greedy"]) != []
    assert accepts(lambda prompts, *, max_new_tokens, adapter=True: [], protocol_methods()["greedy"]) == []


PUB = PublicView("t1", "Does X cause Y?", (Document("D1", "X was tested."),))


@pytest.mark.parametrize("name", sorted(JUDGES))
def test_every_judge_satisfies_the_protocol(name):
    """Built on a scripted backend; `prepare` runs stage 1 for the designs that have one (one greedy
    call for two environments) and is a no-op for the others, then scoring finds nothing to do."""
    from test_judges_designs import ScriptedBackend

    backend = ScriptedBackend(lambda prompt: {"A": 0.5, "B": 0.5, "3": 1.0}, stage1=lambda prompt: "stage one")
    judge = build_judge(name, backend)
    assert isinstance(judge, Judge) and isinstance(judge.reads_certificate, bool)
    assert protocol_members(Judge) == {"name", "reads_certificate", "prepare", "score", "artifacts"}
    other = PublicView("t2", "How large is Z?", (Document("D2", "Z is unknown."),))
    judge.prepare([PUB, other])
    stage1 = len(backend.greedy_prompts)
    assert stage1 in (0, 2) and set(judge.artifacts()) == ({"t1", "t2"} if stage1 else set())
    cert = "Must state:\n- X\n\nMust not state:\n- Y" if judge.reads_certificate else None
    [v] = judge.score([JudgeItem(PUB, "An answer [D1].", "A reference [D1].", cert)])
    assert len(backend.greedy_prompts) == stage1  # prepared: no second stage-1 call
    assert v.score is not None and (v.prompts == () or len(v.prompts) == len(v.order_scores))
