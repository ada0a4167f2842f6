"""Rank the band candidates of ``bands42.py`` per configuration, pass and shape against the
shipped kernels timed in the same run (build 0), and against the best tiled or shifted
candidate of v41's call 1 at the same shape where one was timed there (``--rest``).

    python rank_bands42.py ROOT DIR [DIR...] [--rest DIR...]

A shape's line: the fraction of copy of the shipped kernels, of the best non-band candidate
of ``--rest`` (the best at that one shape: what a retune could reach at most), and of the
three best bands with their params. Then per (configuration, pass) the band that is best by
the worst of its fractions over the shapes where it beats both, to read ``default_params``
entries off (call sizes are chosen by hand from the per-shape lines, as key_dim 32's were).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from psa_tvm.runtime.manifest import Manifest


def load(d: Path) -> tuple[dict, dict, list[dict]]:
    """``d``'s builds and their band params (the manifest's record, which BuildSpec does not
    parse) by source, and its timings."""
    builds = {str(b.source.relative_to(d)): b for b in Manifest.load(d).builds}
    raw = json.loads((d / "manifest.json").read_text())["builds"]
    bands = {entry["source"]: [{**params, "spills": _spills(entry, params["pass_"])}
                               for params in entry.get("band_params", [])] for entry in raw}
    path = d / "results.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return builds, bands, records


def _spills(entry: dict, pass_: str) -> bool:
    """Whether ptxas spilled the build's ``pass_`` band kernel (tests/test_build.py refuses a
    shipped kernel that spills: such a candidate is shown but never proposed)."""
    return any(k.get("band") and k["pass"] == pass_ and any(
        r["spill_stores"] or r["spill_loads"] for r in k.get("resources", {}).values())
        for k in entry["kernels"])


def band_of(band_params: list[dict], pass_: str) -> str:
    """The band params of a build's ``pass_`` kernel, as ``rows x threads x ctas [fetch]``
    (empty: no band)."""
    for params in band_params:
        if params["pass_"] == pass_:
            fetch = f" L2::{params['l2_fetch']}B" if params.get("l2_fetch") else ""
            spills = " SPILLS" if params["spills"] else ""
            return f"{params['rows']}x{params['threads']}x{params['ctas_per_sm']}{fetch}{spills}"
    return ""


#: A band must beat the better of the shipped and the retuned kernels by this much at a shape
#: to own it: the spread of equal kernels timed in one run (tools/tune.py's SHIFTED_MIN_GAIN).
MIN_GAIN = 0.01


def _won_largest(won: dict, shapes: list) -> int:
    """How many of the largest ``shapes`` in a row ``won`` holds True for."""
    run = 0
    for shape in reversed(shapes):
        if not won.get(shape):
            break
        run += 1
    return run


def proposals(bands: dict, shipped: dict, rest: dict, builds: dict, band_params: dict
              ) -> list[str]:
    """Per (configuration, pass): the band that wins the longest run of the largest timed
    calls (by ``MIN_GAIN`` over the floor at each), as a ``BandParams`` from the first of them
    (``min_numel``: that call's merged elements); none where no band wins the largest."""
    params_of = {}
    for source, listed in band_params.items():
        for params in listed:
            name = band_of(listed, params["pass_"])
            params_of[builds[source].config.tag, params["pass_"], name] = params
    by_case: dict = defaultdict(dict)
    fractions: dict = defaultdict(dict)  # (tag, pass, shape) -> band -> fraction of copy
    for (tag, pass_, shape), ranked in bands.items():
        floor = min(shipped.get((tag, pass_, shape), 9.9), rest.get((tag, pass_, shape), 9.9))
        for fraction, name, _ in ranked:
            if "SPILLS" not in name:
                by_case[tag, pass_].setdefault(name, {})[shape] = fraction < floor - MIN_GAIN
                fractions[tag, pass_, shape][name] = fraction
    out = []
    for (tag, pass_), per_name in sorted(by_case.items()):
        shapes = sorted({s for won in per_name.values() for s in won})  # by batch: call size
        scores = {}  # the longest run of the largest calls won, then the lower worst there
        for name, won in per_name.items():
            run = _won_largest(won, shapes)
            worst = max((fractions[tag, pass_, s].get(name, 9.9)
                         for s in shapes[len(shapes) - run:]), default=9.9)
            scores[name] = (run, -worst)
        name = max(scores, key=scores.__getitem__)
        run = scores[name][0]
        if not run:
            out.append(f"{tag} {pass_}: no band wins the largest call")
            continue
        first = shapes[len(shapes) - run]
        config = next(b.config for b in builds.values() if b.config.tag == tag)
        numel = first[0] * config.num_heads * 2 * config.key_dim * first[1] * first[2]
        p = params_of[tag, pass_, name]
        out.append(f"{tag} {pass_}: BandParams(pass_={pass_!r}, rows={p['rows']}, "
                   f"threads={p['threads']}, ctas_per_sm={p['ctas_per_sm']}, "
                   f"l2_fetch={p['l2_fetch']}, min_n={p['min_n']}, max_n={p['max_n']}, "
                   f"min_numel={numel})  # wins {run} of {len(shapes)} from {first}")
    return out


def main() -> int:
    args = sys.argv[1:]
    rest_dirs = args[args.index("--rest") + 1:] if "--rest" in args else []
    args = args[:args.index("--rest")] if "--rest" in args else args
    root, names = Path(args[0]), args[1:]
    rest: dict = {}
    for d in rest_dirs:
        builds, _, records = load(Path(d))
        for r in records:
            key = (builds[r["source"]].config.tag, r["pass"], tuple(r["shape"]))
            rest[key] = min(rest.get(key, 9.9), r["us"] / r["copy_us"])
    for name in names:
        builds, band_params, records = load(root / name)
        shipped: dict = {}
        bands: dict = defaultdict(list)
        for r in records:
            b = builds[r["source"]]
            if not r["exact"]:
                print("INEXACT", name, r)
                continue
            key = (b.config.tag, r["pass"], tuple(r["shape"]))
            fraction = r["us"] / r["copy_us"]
            params = band_of(band_params[r["source"]], r["pass"])
            if not band_params[r["source"]]:
                shipped[key] = fraction
            elif params:
                bands[key].append((fraction, params, r.get("kernel", "")))
        print(f"== {name}")
        per_band: dict = defaultdict(dict)
        for key in sorted(bands):
            ranked = sorted(bands[key])
            floor = min(shipped.get(key, 9.9), rest.get(key, 9.9))
            tag, pass_, shape = key
            top = "  ".join(f"{f:.3f} {p}" for f, p, _ in ranked[:3])
            print(f"{tag} {pass_[:3]} {shape}: shipped {shipped.get(key, float('nan')):.3f} "
                  f"rest {rest.get(key, float('nan')):.3f} | {top}")
            for f, p, _ in ranked:
                per_band[tag, pass_].setdefault(p, []).append((f, f < floor))
        for (tag, pass_), by_params in sorted(per_band.items()):
            wins = [(max(f for f, _ in v), p, sum(w for _, w in v), len(v))
                    for p, v in by_params.items() if "SPILLS" not in p]
            if not wins:
                continue
            best = min(wins, key=lambda w: (-w[2], w[0]))
            print(f"  {tag} {pass_}: best {best[1]} (worst {best[0]:.3f}, beats the floor at "
                  f"{best[2]} of {best[3]} shapes)")
        for line in proposals(bands, shipped, rest, builds, band_params):
            print(f"  proposal: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
