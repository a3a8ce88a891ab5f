"""Judges (rewards) and the oracle: see `base.py` for the interface, `registry.py` for the design and
verifier registries, `designs.py` for the LLM designs."""

from .base import Judge, JudgeItem, Verdict, certificate_text, judge_item, judge_row
from .designs import JudgeParams
from .registry import JUDGES, build_judge, check_reward, load_all

load_all()  # every module registers its designs and verifiers

__all__ = ["JUDGES", "Judge", "JudgeItem", "JudgeParams", "Verdict", "build_judge", "certificate_text",
           "check_reward", "judge_item", "judge_row"]
