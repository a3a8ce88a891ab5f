"""The judge's prompts of a run, measured before anything is sampled: on each environment, the
scoring prompt with the longest answer the run can put before the judge, and the stage-1 prompt
with the artifact budget after it, against the judge model's `max_context`.

Training and the audit call `judge_too_long` at setup, beside the policy's own check
(`selfplay.runs.first_too_long`): a record whose judge prompt cannot fit is named there, not by the
backend after every answer was sampled. The prompts are the design's own (`TemplateJudge` over a
backend that only renders), so they cannot drift from what the judge will send. A sampled answer is
stood in for by `answer_tokens` tokens of one repeated word, the stage-1 artifact by
`reward.max_new_tokens` of them; authored stress answers are measured as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from selfplay.envs.types import Environment

from .base import judge_item
from .designs import TemplateDesign
from .registry import design

SCORING, STAGE1 = "judge scoring", "judge stage-1"


@dataclass(frozen=True)
class TooLong:
    """The first judge prompt of a run that does not fit its judge model's context."""

    env: Environment
    prompt: str  # SCORING or STAGE1
    tokens: int  # the rendered prompt's token count
    budget: int  # tokens read or generated after it: 1 verdict token, or reward.max_new_tokens
    limit: int  # max_context of the judge model
    reward: str  # the design
    model: str  # the judge model's policy config name
    answer: str  # the answer it holds, in words ("" for stage 1)
    stress: bool  # that answer is an authored stress answer
    stage1: bool  # the design writes a stage-1 artifact (a knob of its own)

    def line(self, where: str = "") -> str:
        """One line: record, task, which prompt, its size and the limit, and what to change."""
        e = self.env
        if self.prompt == STAGE1:
            size = f"{self.tokens} tokens + reward.max_new_tokens={self.budget}"
            lower = "reward.max_new_tokens"
        else:
            size = f"{self.tokens} tokens + 1 verdict token"
            lower = "max_new_tokens" + (" or reward.max_new_tokens" if self.stage1 else "")
        holding = f" with {self.answer}" if self.answer else ""
        shorten = "the record's evidence" + (" or that stress answer" if self.stress else "")
        return (f"{e.source}: task {e.task_id}: its {self.prompt} prompt (reward={self.reward}){holding} is "
                f"{size} > max_context {self.limit} of judge model {self.model}{where}; nothing was written; "
                f"shorten {shorten}, lower {lower}, or pick a judge model with a longer context (judge.model)")


class _Renderer:
    """A backend that only renders, enough for a TemplateJudge to build its prompts."""

    def __init__(self, cfg: Any, tokenizer: Any):
        self.name, self.cfg, self.tokenizer = cfg.name, cfg, tokenizer

    def render(self, messages, *, add_generation_prompt: bool = True) -> str:
        from selfplay.models.chat import render

        return render(self.tokenizer, self.cfg, messages, add_generation_prompt)


def stand_in(n: int) -> str:
    """A text of about `n` tokens: one word repeated, which BPE tokenizers keep one token a word."""
    return " ".join(["x"] * n)


def _count(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]] if texts else []


def judge_too_long(reward: Mapping[str, Any], model: Any, tokenizer: Any, envs: Sequence[Environment], *,
                   answer_tokens: int | None, stress: bool) -> TooLong | None:
    """The first prompt of the judge `reward` (a run's reward group) on judge model `model` (a
    PolicyConfig, with its `tokenizer`) that does not fit its context, or None (also for a design that
    reads no model). The candidates: an answer of `answer_tokens` tokens (None: no sampled answers)
    and, with `stress`, each environment's longest stress answer; pairwise designs add their opponent
    (r(e), or a stage-1 artifact of reward.max_new_tokens tokens)."""
    params = dict(reward)
    d = design(str(params["name"]))
    if not isinstance(d, TemplateDesign):
        return None
    judge = d.build(_Renderer(model, tokenizer), params=d.params(params))
    artifact_tokens = judge.params.max_new_tokens
    artifact = stand_in(artifact_tokens) if d.stage1 is not None else None
    filler = stand_in(answer_tokens) if answer_tokens else None
    longest = {}
    if stress:
        texts = [(e.task_id, s) for e in envs for s in e.stress_answers]
        for (tid, s), n in zip(texts, _count(tokenizer, [s.text for _, s in texts]), strict=True):
            if n > longest.get(tid, (None, -1))[1]:
                longest[tid] = (s, n)

    todo: list[tuple[Environment, str, str, bool, str, int]] = []  # env, prompt, answer, stress, text, budget
    for e in envs:
        if artifact is not None:
            todo.append((e, STAGE1, "", False, judge.stage1_prompt(e.public), artifact_tokens))
        answers = [(f"an answer of max_new_tokens={answer_tokens} tokens", False, filler)] if filler else []
        if e.task_id in longest:
            s, n = longest[e.task_id]
            answers.append((f"its longest stress answer {s.answer_id} ({n} tokens)", True, s.text))
        for what, authored, text in answers:
            for p in judge.prompts_for(judge_item(judge, e, text), artifact):
                todo.append((e, SCORING, what, authored, p, 1))
    for (e, prompt, what, authored, _, budget), n in zip(todo, _count(tokenizer, [t[4] for t in todo]), strict=True):
        if n + budget > model.max_context:
            return TooLong(e, prompt, n, budget, model.max_context, d.name, model.name, what, authored,
                           d.stage1 is not None)
    return None
