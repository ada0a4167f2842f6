"""Tuned vs shipped, same run (H100): worst and per-shape kernel/copy at the tuning shapes."""
import json
from pathlib import Path
from psa_tvm.runtime.manifest import Manifest
old = json.load(open("/tmp/sm_90.before.json")); new = json.load(open("schedules/sm_90.json"))
def tiled(table, pass_, c):
    for e in table["entries"]:
        if (e["pass"], e["dtype"], e["key_dim"], e["num_heads"]) == (pass_, c.dtype, c.key_dim, c.num_heads):
            return e["params"]
def shifted(table, c):
    for e in table.get("shifted", []):
        if (e["dtype"], e["key_dim"], e["num_heads"]) == (c.dtype, c.key_dim, c.num_heads):
            return e["params"]
for name in ("t64", "t128", "s64", "s128"):
    d = Path(".tune41") / name
    builds = {str(b.source.relative_to(d)): b for b in Manifest.load(d).builds}
    res = {}
    for line in open(d / "results.jsonl"):
        r = json.loads(line); res.setdefault((r["source"], r["pass"]), {})[tuple(r["shape"])] = r["us"] / r["copy_us"]
    for src, b in builds.items():
        pass
    configs = sorted({b.config for b in builds.values()}, key=lambda c: c.tag)
    for c in configs:
        for pass_ in ("forward", "backward"):
            def find(params, kind):
                for src, b in builds.items():
                    if b.config != c: continue
                    if kind == "t":
                        sp = {k: v for k, v in b.schedule_params.items()}
                        if sp == params or (params is None and not sp): return res.get((src, pass_))
                    else:
                        sp = b.shifted_params or {}
                        if params is None and not sp: return res.get((src, pass_))
                        if params is not None and all(sp.get(k) == v for k, v in params.items()): return res.get((src, pass_))
            kind = name[0]
            before = find(tiled(old, pass_, c) if kind == "t" else shifted(old, c), kind)
            after = find(tiled(new, pass_, c) if kind == "t" else shifted(new, c), kind)
            fmt = lambda x: "n/a" if not x else f"worst {max(x.values()):.3f} " + " ".join(f"{s[0]}x{s[1]}x{s[2]}:{v:.3f}" for s, v in sorted(x.items()))
            print(f"{name} {c.tag} {pass_[:3]}: before {fmt(before)} | after {fmt(after)}")
