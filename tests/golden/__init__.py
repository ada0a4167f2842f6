"""Golden scheduled TIR of each schedule rule (TVMScript), compared structurally by
tests/test_golden.py. After an intended schedule change, regenerate them with
``python -m tests.golden.regen`` and review the diff."""

from __future__ import annotations

from pathlib import Path

from psa_tvm.config import OpConfig

GOLDEN_DIR = Path(__file__).parent
#: A small configuration: every loop of the schedules stays visible, files stay short.
GOLDEN_CONFIG = OpConfig(8, 1, "float32")
#: (rule, pass, vec): the full-width variant of each rule, and tiled's scalar fallback.
CASES = (("rowwise", "forward", 1), ("rowwise", "backward", 1), ("tiled", "forward", 4),
         ("tiled", "backward", 4), ("tiled", "forward", 1), ("tiled", "backward", 1))


def golden_path(rule: str, pass_: str, vec: int) -> Path:
    return GOLDEN_DIR / f"{rule}_{pass_}_v{vec}.tvmscript"


def scheduled(rule_name: str, pass_: str, vec: int):
    """The rule's default schedule of one pass, as the build applies it."""
    from psa_tvm.compiler.compute import merge_backward, merge_forward
    from psa_tvm.compiler.rules import get_rule

    rule = get_rule(rule_name)
    compute = merge_forward if pass_ == "forward" else merge_backward
    func = compute(GOLDEN_CONFIG, vec=vec, name=f"{rule_name}_{pass_}_v{vec}")
    return rule.apply(func, pass_, GOLDEN_CONFIG, rule.default_params(GOLDEN_CONFIG), vec)
