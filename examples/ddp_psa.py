"""DDP training of a C2PSA-like block whose attention runs on psa_attention.

    torchrun --nproc_per_node=2 examples/ddp_psa.py --steps 5 --out ddp.pt      # 2 GPUs
    python examples/ddp_psa.py --steps 5 --out single.pt                        # 1 process
    torchrun --nproc_per_node=2 examples/ddp_psa.py --device cpu ...            # gloo, CPU

Every process draws the same global batch from a seeded generator and trains on its slice;
DDP averages the gradients, so with a mean loss the parameters after each step equal those of
one process training on the whole batch (tests/test_ddp.py checks this). The block has no
batch norm for that reason (per-rank batch statistics would differ); ultralytics' C2PSA has,
and in real training would use SyncBatchNorm.
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch import nn

from psa_tvm.torch import psa_attention


class PsaAttention(nn.Module):
    """ultralytics' Attention (attn_ratio 0.5) with convolutions without batch norm."""

    def __init__(self, dim: int, num_heads: int, backend: str = "auto") -> None:
        super().__init__()
        self.num_heads, self.key_dim, self.backend = num_heads, dim // num_heads // 2, backend
        self.qkv = nn.Conv2d(dim, 2 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)
        self.pe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        qkv = self.qkv(x)
        out = psa_attention(qkv, self.num_heads, self.key_dim, h, w, self.backend)
        v = qkv.view(b, self.num_heads, 4 * self.key_dim, h * w)[:, :, 2 * self.key_dim:]
        return self.proj(out + self.pe(v.reshape(b, c, h, w)))


class C2PSALike(nn.Module):
    """C2PSA's structure: split, ``n`` PSA blocks (attention + FFN, residual) on one half."""

    def __init__(self, c1: int, n: int = 1, backend: str = "auto") -> None:
        super().__init__()
        self.c = c1 // 2
        self.cv1 = nn.Conv2d(c1, 2 * self.c, 1)
        self.cv2 = nn.Conv2d(2 * self.c, c1, 1)
        self.attn = nn.ModuleList(PsaAttention(self.c, max(self.c // 64, 1), backend)
                                  for _ in range(n))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Conv2d(self.c, 2 * self.c, 1), nn.SiLU(),
                                               nn.Conv2d(2 * self.c, self.c, 1))
                                 for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        for attn, ffn in zip(self.attn, self.ffn, strict=True):
            b = b + attn(b)
            b = b + ffn(b)
        return self.cv2(torch.cat((a, b), 1))


def train(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    distributed = "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if args.batch % world:
        raise ValueError(f"--batch {args.batch} must be a multiple of the world size {world}")
    torch.manual_seed(args.seed)
    model = C2PSALike(args.channels, args.blocks, args.backend).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    data = torch.Generator().manual_seed(args.seed + 1)
    local = args.batch // world
    amp = torch.autocast(device.type, dtype=torch.float16 if device.type == "cuda"
                         else torch.bfloat16, enabled=args.amp)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.channels, args.size, args.size, generator=data)
        y = torch.randn(args.batch, args.channels, args.size, args.size, generator=data)
        x, y = (t[rank * local:(rank + 1) * local].to(device) for t in (x, y))
        with amp:
            loss = (model(x).float() - y).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.6f}", flush=True)
    state = {k.removeprefix("module."): v.detach().cpu()
             for k, v in model.state_dict().items()}
    if rank == 0 and args.out:
        torch.save(state, args.out)
    if distributed:
        # Tear the group down here, in a fixed order, and not at interpreter exit: both ranks
        # reach teardown together (a rank that destroys its gloo group while the other is still
        # saving can abort), and DDP's reducer, which holds the group, is freed first, so the
        # gloo threads are joined while the interpreter is alive. Left to finalization, one rank
        # aborted at exit twice in CI ("terminate called without an active exception";
        # pytorch/pytorch#179291 describes the same teardown).
        dist.barrier()
        del model, opt
        gc.collect()
        dist.destroy_process_group()
    return state


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8, help="global batch")
    parser.add_argument("--channels", type=int, default=256, help="C2PSA c1 (attention: c1/2)")
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--size", type=int, default=20, help="H = W")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="auto", choices=["auto", "flash", "cudnn", "sdpa"])
    parser.add_argument("--amp", action="store_true", help="autocast (float16 on CUDA)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=["cuda", "cpu"])
    parser.add_argument("--out", default=None, help="save rank 0's parameters here")
    train(parser.parse_args(argv))


if __name__ == "__main__":
    main()
