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


#: Schedules with non-default params, by file stem: (op, config, pass, vec, params). Several
#: slices per CTA on the merge (its 2 streams) and, ``heads_inner``, on a family op's heads.
PARAM_CASES = {
    "tiled_k2_forward_v4": ("merge", GOLDEN_CONFIG, "forward", 4,
                            {"tile_n": 32, "threads": 64, "row_threads": 2, "slices_per_cta": 2}),
    "tiled_k2_backward_v4": ("merge", GOLDEN_CONFIG, "backward", 4,
                             {"tile_n": 32, "threads": 64, "row_threads": 2,
                              "slices_per_cta": 2}),
    "tiled_qkv_k2h_forward_v4": ("qkv", OpConfig(8, 2, "float32"), "forward", 4,
                                 {"tile_n": 32, "threads": 64, "row_threads": 2,
                                  "slices_per_cta": 2, "heads_inner": True}),
    # a skew per group of vec_kd tile rows: the shared tile is [.., kd/vec_kd, vec_kd, tile_n]
    "tiled_gpad_backward_v4": ("merge", GOLDEN_CONFIG, "backward", 4,
                               {"tile_n": 32, "threads": 32, "row_threads": 2,
                                "group_pad_bytes": 16}),
    # the forward's register stage: a thread's loads into a local block, then its tile stores
    "tiled_qkv_k2_staged_forward_v4": ("qkv", OpConfig(8, 2, "float32"), "forward", 4,
                                       {"tile_n": 32, "threads": 32, "row_threads": 2,
                                        "slices_per_cta": 2, "stage_loads": True}),
    # the stage in the unstaged load order: a warp reads consecutive positions' pieces
    "tiled_coalesced_staged_forward_v4": ("merge", OpConfig(8, 2, "float32"), "forward", 4,
                                          {"tile_n": 32, "threads": 32, "row_threads": 2,
                                           "stage_loads": True, "stage_coalesced": True}),
}


def golden_param_path(stem: str) -> Path:
    return GOLDEN_DIR / f"{stem}.tvmscript"


def scheduled_with(stem: str):
    """The tiled rule's schedule of one :data:`PARAM_CASES` entry."""
    from psa_tvm.compiler.compute import merge_backward, merge_forward, stream_pass
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.layouts import stream_op

    op, config, pass_, vec, values = PARAM_CASES[stem]
    if op == "merge":
        func = (merge_forward if pass_ == "forward" else merge_backward)(config, vec=vec,
                                                                          name=stem)
    else:
        func = stream_pass(config, stream_op(op), pass_, vec=vec, name=stem)
    rule = get_rule("tiled")
    return rule.apply(func, pass_, config, rule.params_from_dict(values), vec)


#: The shifted N-side kernels (psa_tvm/compiler/shifted.py), hand-written TIR rather than a
#: schedule, at their default params: a key_dim of 16 is the smallest they build for in float32.
SHIFTED_CONFIG = OpConfig(16, 1, "float32")
SHIFTED_PASSES = ("forward", "backward")


def golden_shifted_path(pass_: str) -> Path:
    return GOLDEN_DIR / f"shifted_{pass_}.tvmscript"


def shifted_kernel(pass_: str):
    from psa_tvm.compiler import shifted

    return shifted.shifted_pass(SHIFTED_CONFIG, pass_, shifted.default_params(SHIFTED_CONFIG),
                                golden_shifted_path(pass_).stem)


#: The band kernels (psa_tvm/compiler/band.py), hand-written TIR like the shifted kernels, at
#: default params (key_dim 32: the only one they build for): the 16-bit 40x23 forward, the
#: 32-row float32 20x15 one, the 8-row 16-bit one of 37x29 (one kd-side vector a position),
#: and the 16-bit backwards of 40x23 and of 37x29 (32 rows: a tile in dynamic shared memory).
#: Name -> (config, the BandParams fields that pick one of band.default_params: by what the
#: kernel is, so that adding a kernel to the defaults moves no golden case).
BAND_CONFIGS = {"float16": (OpConfig(32, 4, "float16"), {"pass_": "forward", "min_n": 897}),
                "float32": (OpConfig(32, 4, "float32"), {"rows": 32, "min_n": 297}),
                "float16_rows8": (OpConfig(32, 4, "float16"), {"rows": 8, "min_n": 1072}),
                # A forward tile past 48 KB, in dynamic shared memory (v28's probes; none built).
                "float16_rows32": (OpConfig(32, 4, "float16"), None),
                "backward_float16": (OpConfig(32, 4, "float16"),
                                     {"pass_": "backward", "min_n": 897}),
                "backward_float16_rows32": (OpConfig(32, 4, "float16"),
                                            {"pass_": "backward", "min_n": 1073,
                                             "threads": 576})}
#: The params of "float16_rows32" (BandParams' fields, the TVM-free way).
ROWS32_DYNAMIC = {"rows": 32, "threads": 768, "ctas_per_sm": 2, "min_n": 1073, "max_n": 1079,
                  "min_numel": 0}


def golden_band_path(name: str) -> Path:
    stem = f"band_{name}" if name.startswith("backward") else f"band_forward_{name}"
    return GOLDEN_DIR / f"{stem}.tvmscript"


def band_kernel(name: str):
    from psa_tvm.compiler import band

    config, fields = BAND_CONFIGS[name]
    if fields is None:
        params = band.BandParams(**ROWS32_DYNAMIC)
    else:
        (params,) = [p for p in band.default_params(config)
                     if all(getattr(p, key) == value for key, value in fields.items())]
    assert name.endswith("rows8") == (params.rows == 8)
    assert name.startswith("backward") == (params.pass_ == "backward")
    return band.band_pass(config, params, golden_band_path(name).stem)


#: The CPU register-tile kernels (psa_tvm/compiler/rules/cpu_shuffle.py), hand-written TIR like
#: the band kernels, at default params: float32 at kd 8 (8x8 square tiles, one channel block),
#: both passes, and the forward that prefetches its slice first. (A 16-bit square tile is 16x16:
#: 67 KB of text a pass; tests/test_cpu_exact.py checks those kernels' instructions instead.)
#: Name -> (config, pass, prefetch).
CPU_SHUFFLE_CASES = {"forward_float32": (OpConfig(8, 1, "float32"), "forward", False),
                     "backward_float32": (OpConfig(8, 1, "float32"), "backward", False),
                     "forward_float32_prefetch": (OpConfig(8, 1, "float32"), "forward", True),
                     # 16-bit defaults: square tiles with their halves joined at the loads, the
                     # rest of N by one lane tile
                     "forward_float16": (OpConfig(16, 1, "float16"), "forward", False)}


def golden_cpu_shuffle_path(name: str) -> Path:
    return GOLDEN_DIR / f"cpu_shuffle_{name}.tvmscript"


def cpu_shuffle_kernel(name: str):
    import dataclasses

    from psa_tvm.compiler.cpu import SHUFFLE

    config, pass_, prefetch = CPU_SHUFFLE_CASES[name]
    params = dataclasses.replace(SHUFFLE.default_params(config), prefetch=prefetch)
    return SHUFFLE.build(pass_, config, params, name=golden_cpu_shuffle_path(name).stem)


#: The aligned-line forward (cpu_lines): one channel group of each element size.
CPU_LINES_CASES = {"forward_float16": OpConfig(8, 1, "float16"),
                   "forward_float32": OpConfig(4, 1, "float32")}


def golden_cpu_lines_path(name: str) -> Path:
    return GOLDEN_DIR / f"cpu_lines_{name}.tvmscript"


def cpu_lines_kernel(name: str):
    from psa_tvm.compiler.cpu import LINES

    config = CPU_LINES_CASES[name]
    return LINES.build(config, LINES.default_params(config),
                       name=golden_cpu_lines_path(name).stem)
