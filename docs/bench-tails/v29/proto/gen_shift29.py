"""Write the library's shifted backward (psa_tvm/compiler/shifted.py) with other tiles than the
shipped 248 (16-bit) and 124 (float32) positions into one ``shift29.cu`` with a ctypes launcher
per variant, ``(g, d_lo, d_hi, rows, N, stream)`` as probe29.py calls them (docs/perf.md v29,
call 2). At ``N = 1073`` the shipped tiles leave a row's last tile a third full (81 of 248
positions); the probe asks which tile a range of ``N`` should have. Needs TVM:

    python docs/bench-tails/v29/proto/gen_shift29.py OUT_DIR [CALL]  # CALL 2, 3, 4, 5 or 8
    nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static \
        -Xptxas -v OUT_DIR/shift29.cu -o shift29.so
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from psa_tvm.compiler import shifted
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig

#: dtype tag -> tiles (positions a CTA); each at 256 and 512 threads, edge loads first or not
TILES = {"h": (216, 232, 272, 312, 360, 464, 544), "f": (136, 156, 180, 216, 272)}
#: Call 3: tiles of a whole number of warps' vectors with the one before the tile (call 2:
#: every other tile ran 0.05-0.15 slower than the shipped 248, which is 31 + 1 vectors), the
#: shipped tiles among them; 128 threads too.
TILES_CALL3 = {"h": (120, 248, 504, 760), "f": (60, 124, 252)}
#: Call 4: float32's shipped tile with its tuned 8 threads a position (calls 2-3 took the
#: untuned 4), at 256 and 512 threads.
TILES_CALL4 = {"f": (124,)}
#: Call 5: the 16-bit shifted backward as v28 shipped it (248 positions, 256 threads, edge
#: loads after), beside the final artifacts whose band backwards replace it in their ranges.
TILES_CALL5 = {"h": (248,)}
#: Call 8: float32 shifted *forwards*, (threads, threads a position, positions a thread): every
#: shape ``shifted.fits`` takes, the shipped (256, 4, 1) among them.
FORWARDS_CALL8 = [(128, 2, 1), (128, 2, 2), (128, 2, 4), (128, 4, 2), (128, 4, 4), (128, 8, 4),
                  (256, 2, 1), (256, 2, 2), (256, 4, 1), (256, 4, 2), (256, 4, 4), (256, 8, 2),
                  (256, 8, 4), (512, 2, 1), (512, 4, 1), (512, 4, 2), (512, 8, 1), (512, 8, 2),
                  (512, 8, 4)]


def forward_variants() -> list[tuple[str, str, int, int]]:
    """Call 8's kernels: (name, source, tile, threads)."""
    config = OpConfig(32, 4, "float32")
    out = []
    for threads, row_threads, positions in FORWARDS_CALL8:
        params = replace(shifted.default_params(config), fwd_threads=threads,
                         fwd_row_threads=row_threads, fwd_positions=positions)
        assert shifted.fits(config, params) is None, params
        name = f"s29_f_fwd_t{threads}_r{row_threads}_p{positions}"
        lowered = lower_cuda({name: shifted.shifted_pass(config, "forward", params, name)})
        args = ", ".join(f"(float*){p['tensor']}" if p["type"] == "ptr"
                         else {"B": "rows / 4", "N": "n"}[p["symbol"]]
                         for p in lowered.kernels[name]["params"])
        tile = positions * threads // row_threads
        launcher = (f'\nextern "C" int {name}(const void* lo, const void* hi, void* out, '
                    f"int rows, int n, void* s) {{\n"
                    f"  if (rows % 4) return 2;\n"
                    f"  const dim3 grid((n + {tile - 1}) / {tile}, rows * 2);\n"
                    f"  {name}_kernel<<<grid, {threads}, 0, (cudaStream_t)s>>>({args});\n"
                    f"  return (int)cudaGetLastError();\n}}\n")
        out.append((name, lowered.source, launcher))
    return out
DTYPES = {"h": ("float16", "half"), "f": ("float32", "float")}


def main(out: Path, call: str = "2") -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources, launchers, names = [], [], []
    if call == "8":
        for name, source, launcher in forward_variants():
            names.append(name)
            sources.append(source)
            launchers.append(launcher)
    for tag, tiles in {"3": TILES_CALL3, "4": TILES_CALL4, "5": TILES_CALL5, "8": {}}.get(
            call, TILES).items():
        dtype, ctype = DTYPES[tag]
        config = OpConfig(32, 4, dtype)
        base = replace(shifted.default_params(config), bwd_small_below=0, bwd_whole_tile_n=0,
                       **({"bwd_row_threads": 8} if call == "4" else {}))
        for tile in tiles:
            for threads in {"3": (128, 256, 512), "5": (256,)}.get(call, (256, 512)):
                for edge_first in (0,) if call == "5" else (0, 1):
                    params = replace(base, bwd_tile_n=tile, bwd_threads=threads,
                                     bwd_edge_first=edge_first)
                    if (why := shifted.fits(config, params)) is not None:
                        print(f"skip {tag} {tile} {threads} {edge_first}: {why}")
                        continue
                    name = f"s29_{tag}_n{tile}_t{threads}_e{edge_first}"
                    if call == "4":
                        name += f"_r{params.bwd_row_threads}"
                    lowered = lower_cuda({name: shifted.shifted_pass(config, "backward",
                                                                     params, name)})
                    kernel = lowered.kernels[name]
                    source = pack_16bit_gathers(lowered.source, dtype)
                    sources.append(source)
                    args = [f"({ctype}*){p['tensor']}" if p["type"] == "ptr"
                            else {"B": "rows / 4", "N": "n"}[p["symbol"]]
                            for p in kernel["params"]]
                    launchers.append(
                        f'\nextern "C" int {name}(const void* g, void* dlo, void* dhi, '
                        f"int rows, int n, void* s) {{\n"
                        f"  if (rows % 4) return 2;\n"
                        f"  const dim3 grid((n + {tile - 1}) / {tile}, rows * 2);\n"
                        f"  {name}_kernel<<<grid, {threads}, 0, (cudaStream_t)s>>>("
                        f"{', '.join(args)});\n"
                        f"  return (int)cudaGetLastError();\n}}\n")
                    names.append(name)
    first, *rest = sources
    kernels = [s[s.index('extern "C" __global__'):] for s in rest]
    (out / "shift29.cu").write_text("\n".join([first, *kernels, *launchers]))
    (out / "shift29.so.txt").write_text("\n".join(names) + "\n")
    print(len(names), "variants")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
