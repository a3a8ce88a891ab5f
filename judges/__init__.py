"""Judges (rewards) and the oracle: see `base.py` for the interface, `designs.py` for the five designs."""

from .base import Judge, JudgeItem, Verdict
from .designs import JUDGES, JudgeParams, build_judge

__all__ = ["JUDGES", "Judge", "JudgeItem", "JudgeParams", "Verdict", "build_judge"]
