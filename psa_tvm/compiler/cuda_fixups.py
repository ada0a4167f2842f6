"""Repairs to TVM 0.27's generated CUDA, each for a specific, tested codegen defect."""

from __future__ import annotations

import re

_PACK = {"float16": "__pack_half2", "bfloat16": "__pack_nv_bfloat162"}
_COMPONENTS = {"uint2": 2, "uint4": 4}
_CTOR = re.compile(r"make_(uint2|uint4)\(")


def split_args(text: str, start: int) -> tuple[list[str], int]:
    """Top-level comma-separated arguments of the call (or parenthesis) whose '(' is at
    ``start - 1``, and the index just past its ')'."""
    depth, args, begin = 0, [], start
    for i in range(start, len(text)):
        char = text[i]
        if char in "([":
            depth += 1
        elif char in ")]":
            if depth == 0:
                args.append(text[begin:i])
                return args, i + 1
            depth -= 1
        elif char == "," and depth == 0:
            args.append(text[begin:i])
            begin = i + 1
    raise ValueError("unbalanced call in generated CUDA")


def pack_16bit_gathers(source: str, dtype: str) -> str:
    """Pack 16-bit lanes of gathered vector loads in pairs.

    For a load of 8 (or 4) ``half``/``bfloat16`` elements that are not contiguous (a gather from
    a shared-memory column), TVM 0.27 prints ``make_uint4(e0, ..., e7)``: one argument per lane
    where ``uint4`` has four 32-bit components. Earlier TVM releases packed the lanes pairwise
    with ``__pack_half2``; this restores that, which the generated source already defines.
    """
    pack = _PACK.get(dtype)
    if pack is None:
        return source
    out, pos = [], 0
    while match := _CTOR.search(source, pos):
        args, end = split_args(source, match.end())
        out.append(source[pos:match.end()])
        if len(args) == 2 * _COMPONENTS[match.group(1)]:
            pairs = [f"{pack}({args[i]},{args[i + 1]})" for i in range(0, len(args), 2)]
            out.append(",".join(pairs) + ")")
        else:
            out.append(source[match.end():end])
        pos = end
    out.append(source[pos:])
    return "".join(out)
