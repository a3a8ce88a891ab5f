"""Judges (rewards) and the oracle: see `base.py` for the interface, `designs.py` for the LLM designs."""

from .base import Judge, JudgeItem, Verdict, certificate_text, judge_item
from .designs import JUDGES, JudgeParams, build_judge

__all__ = ["JUDGES", "Judge", "JudgeItem", "JudgeParams", "Verdict", "build_judge", "certificate_text", "judge_item"]
