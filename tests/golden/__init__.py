"""Golden scheduled TIR of each schedule rule (TVMScript), compared structurally by
tests/test_golden.py. After an intended schedule change, regenerate them with
``python -m tests.golden.regen`` and review the diff."""

from __future__ import annotations

from pathlib import Path

from psa_tvm.config import OpConfig

GOLDEN_DIR = Path(__file__).parent
#: A small configuration: every loop of the schedules stays visible, files stay short.
GOLDEN_CONFIG = OpConfig(8, 1, "float32")
#: (rule, pass, vec[, vec_kd]): the full-width variant of each rule, tiled's scalar fallback,
#: tiled's N-tail variant (scalar along N, full width along kd), and the CPU rule.
CASES = (("rowwise", "forward", 1), ("rowwise", "backward", 1), ("tiled", "forward", 4),
         ("tiled", "backward", 4), ("tiled", "forward", 1), ("tiled", "backward", 1),
         ("tiled", "forward", 1, 4), ("tiled", "backward", 1, 4), ("cpu", "forward", 1),
         ("cpu", "forward", 8), ("cpu", "backward", 1))


def case_id(case: tuple) -> str:
    rule, pass_, vec, *vec_kd = case
    return f"{rule}-{pass_}-v{vec}" + (f"k{vec_kd[0]}" if vec_kd else "")


def golden_path(rule: str, pass_: str, vec: int, vec_kd: int | None = None) -> Path:
    widths = f"v{vec}" if vec_kd in (None, vec) else f"v{vec}k{vec_kd}"
    return GOLDEN_DIR / f"{rule}_{pass_}_{widths}.tvmscript"


def scheduled(rule_name: str, pass_: str, vec: int, vec_kd: int | None = None):
    """The rule's default schedule of one pass, as the build applies it."""
    from psa_tvm.compiler.compute import merge_backward, merge_forward
    from psa_tvm.compiler.rules import get_rule

    compute = merge_forward if pass_ == "forward" else merge_backward
    name = golden_path(rule_name, pass_, vec, vec_kd).stem
    if rule_name == "cpu":  # the CPU build: int64 indexing, element-aligned data
        from psa_tvm.compiler.cpu import RULE

        func = compute(GOLDEN_CONFIG, vec=vec, index_dtype="int64", name=name,
                       align=GOLDEN_CONFIG.itemsize)
        return RULE.apply(func, pass_, GOLDEN_CONFIG, RULE.default_params(GOLDEN_CONFIG), vec)
    rule = get_rule(rule_name)
    func = compute(GOLDEN_CONFIG, vec=vec, name=name)
    return rule.apply(func, pass_, GOLDEN_CONFIG, rule.default_params(GOLDEN_CONFIG), vec,
                      vec_kd)
