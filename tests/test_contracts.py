"""The protocols other code relies on, checked against what implements them and what calls them.

- What the training loop, the audit and the judges call on a backend is declared: every attribute
  `selfplay/train.py` and `audit/gap.py` read on their policy is a `PolicyBackend` member, every one
  `audit/collect.py`, `judges/designs.py` and `judges/oracle.py` read a `Backend` member (dpo.py is
  handed `policy.model` and `policy.tokenizer`, no backend).
- Every backend in the registry `selfplay.models.BACKENDS` (HFBackend on a tiny model, VLLMBackend
  on the fake `vllm` of test_models_vllm.py) satisfies `PolicyBackend`; the endpoint backend, which
  serves judges and the oracle only, satisfies `Backend`.
- Every backend fake defined in tests/ (a class with `sample`, `greedy` or `next_token_logprobs`)
  satisfies `Backend`; none stands in for a trained policy.
- "Satisfies": each member is present (runtime_checkable only looks at names) and each method
  accepts the call the protocol describes, so a test that passes on a fake passes on the interface
  the real backends implement.
- Every judge `build_judge` can make satisfies `judges.base.Judge`, `prepare` included.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Protocol

import pytest

from judges import JUDGES, Judge, JudgeItem, build_judge
from selfplay.envs.types import Document, Environment, PublicView, StressAnswer
from selfplay.models import BACKENDS, PolicyConfig, backend_class, tiny_model
from selfplay.models.backend import Backend, PolicyBackend

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
GENERATION = {"sample", "greedy", "next_token_logprobs"}
# constructor arguments of the fakes that take any (a fake not listed is built with none)
ARGS = {
    "ScriptedBackend": (lambda prompt: {},),  # script: prompt -> {label: probability}
    "FakeOracleBackend": (lambda prompt: {},),  # probs: prompt -> {label: probability}
    "FakeBackend": (0.5,),  # p_yes
    "StopAfter": (None, 0),  # inner backend, calls passed through
}


def backend_fakes() -> list[tuple[str, str]]:
    """(module, class) of every class in tests/ (the test files and the shared fakes) that defines a
    generation or log-prob method."""
    out = []
    for path in sorted([*TESTS.glob("test_*.py"), TESTS / "fakes.py"]):
        if path.name == Path(__file__).name:  # this file's deliberately wrong example
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                if methods & GENERATION:
                    out.append((path.stem, node.name))
    return out


def protocol_members(protocol: type) -> set[str]:
    """The attributes and methods the bodies of a protocol and of the protocols it extends declare
    (what isinstance looks for)."""
    out: set[str] = set()
    for cls in protocol.__mro__:
        if getattr(cls, "_is_protocol", False) and cls is not Protocol:
            out |= {n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")}
            out |= set(vars(cls).get("__annotations__", {}))
    return out


def protocol_methods(protocol: type = Backend) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(protocol, name)) for name in sorted(protocol_members(protocol))
            if inspect.isfunction(getattr(protocol, name, None))}


def satisfies(obj, protocol: type) -> list[str]:
    """What keeps `obj` from satisfying `protocol`: members missing, then calls a method cannot take."""
    missing = sorted(m for m in protocol_members(protocol) if not hasattr(obj, m))
    if missing:
        return [f"lacks {missing}"]
    if not isinstance(obj, protocol):
        return [f"isinstance(..., {protocol.__name__}) is False"]
    return [f"{m}{problem}" for m, signature in protocol_methods(protocol).items()
            for problem in accepts(getattr(obj, m), signature)]


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


def attributes_read(path: Path, name: str) -> set[str]:
    """Attributes read on the variable `name` (and on `self.name`) anywhere in the file at `path`."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == name) or (
                    isinstance(v, ast.Attribute) and v.attr == name and isinstance(v.value, ast.Name)
                    and v.value.id == "self"):
                out.add(node.attr)
    return out


@pytest.mark.parametrize("path, name, protocol", [
    pytest.param("selfplay/train.py", "policy", PolicyBackend, id="train-policy"),
    pytest.param("audit/cache.py", "backend", PolicyBackend, id="audit-checkpoint"),
    pytest.param("audit/collect.py", "policy", Backend, id="audit-sample-kl"),
    pytest.param("audit/cache.py", "inner", Backend, id="audit-call-cache"),
    pytest.param("judges/designs.py", "backend", Backend, id="judges"),
    pytest.param("judges/oracle.py", "backend", Backend, id="oracle"),
])
def test_every_attribute_the_callers_read_is_declared(path, name, protocol):
    """An empty read set would mean the variable was renamed and the check sees nothing."""
    read = attributes_read(ROOT / path, name)
    assert read, f"{path} reads nothing on {name!r}: rename here too"
    assert read <= protocol_members(protocol), f"{path}: {sorted(read - protocol_members(protocol))} undeclared"


def hf_backend(monkeypatch):
    model, tokenizer = tiny_model("llama", seed=0)
    return backend_class("hf")(model, tokenizer, PolicyConfig.named("tiny-llama"), progress=False)


def vllm_backend(monkeypatch):
    from test_models_vllm import CFG, FakeLLM, FakeTrainable, install_fake_vllm

    from selfplay.models.loading import load_tokenizer

    install_fake_vllm(monkeypatch)
    return backend_class("vllm")(FakeLLM(), load_tokenizer(PolicyConfig.named("tiny-qwen3")), CFG,
                                 trainable=FakeTrainable(), progress=False)


BUILD = {"hf": hf_backend, "vllm": vllm_backend}  # one builder per entry of BACKENDS


def test_every_registered_backend_has_a_builder_here():
    assert set(BUILD) == set(BACKENDS)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_registered_backend_satisfies_the_policy_protocol(name, monkeypatch):
    backend = BUILD[name](monkeypatch)
    assert type(backend) is backend_class(name)
    assert satisfies(backend, PolicyBackend) == []


def test_the_endpoint_backend_serves_judges_not_training():
    from selfplay.models.endpoint import EndpointBackend, EndpointConfig

    endpoint = EndpointBackend(EndpointConfig(base_url="http://127.0.0.1:9/v1", model="m"), client=object())
    assert satisfies(endpoint, Backend) == []
    assert not isinstance(endpoint, PolicyBackend)


def test_the_audit_call_cache_is_a_backend(tmp_path):
    """The audit hands judges, verifiers and its stages a CachedBackend in place of the model."""
    from audit.cache import CachedBackend, JsonlCache

    model, tokenizer = tiny_model("llama", seed=0)
    cached = CachedBackend(name="tiny", tokenizer=tokenizer, render=lambda m, add_generation_prompt=True: "",
                           identity={}, adapter_id=None, cache=JsonlCache(tmp_path / "c.jsonl"), load=object)
    assert satisfies(cached, Backend) == []


@pytest.mark.parametrize("module, name", backend_fakes(), ids=lambda x: x)
def test_backend_fake_satisfies_the_protocol(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert satisfies(cls(*ARGS.get(name, ())), Backend) == [], f"{module}.{name}"


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
    from fakes import ScriptedBackend

    backend = ScriptedBackend(lambda prompt: {"A": 0.5, "B": 0.5, "3": 1.0}, stage1=lambda prompt: "stage one")
    judge = build_judge(name, backend)
    assert isinstance(judge, Judge) and isinstance(judge.reads_certificate, bool)
    assert protocol_members(Judge) == {"name", "reads_certificate", "reads_anchor", "prepare", "score", "artifacts"}
    assert isinstance(judge.reads_anchor, bool)
    other = PublicView("t2", "How large is Z?", (Document("D2", "Z is unknown."),))
    judge.prepare([PUB, other])
    stage1 = len(backend.greedy_prompts)
    assert stage1 in (0, 2) and set(judge.artifacts()) == ({"t1", "t2"} if stage1 else set())
    cert = "Must state:\n- X\n\nMust not state:\n- Y" if judge.reads_certificate else None
    honest = StressAnswer("a1", "honest", "valid", "An answer [D1].")
    anchor = Environment(PUB, "impossible", "insufficient_evidence", (honest,), honest) if judge.reads_anchor else None
    [v] = judge.score([JudgeItem(PUB, "An answer [D1].", "A reference [D1].", cert, anchor)])
    assert len(backend.greedy_prompts) == stage1  # prepared: no second stage-1 call
    assert v.score is not None and (v.prompts == () or len(v.prompts) == len(v.order_scores))
