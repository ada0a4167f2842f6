"""Optional: run ultralytics' ``Attention`` modules (the PSA / C2PSA blocks) on psa_attention.

ultralytics is not a dependency of psa-tvm; it is imported only here, and only when
:func:`patch` is called without ``classes``::

    from ultralytics.nn.tasks import DetectionModel
    from psa_tvm.integrations.ultralytics import patch, unpatch

    model = DetectionModel("yolo11n.yaml").cuda().half()
    patch(model)            # every Attention module now runs pack -> flash/cuDNN -> merge
    ...
    unpatch(model)          # back to ultralytics' own forward

The patched forward computes what ultralytics' does: ``proj(attn(qkv(x)) + pe(v))``, with the
attention core from :func:`psa_tvm.attention.psa_attention`. In a model run channels_last
(``model.to(memory_format=torch.channels_last)``) the ``qkv`` conv's output already is the packed
tensor the attention reads, so no pack kernel runs, and the result stays channels_last.
Modules whose ``head_dim`` is not ``2*key_dim`` (``attn_ratio != 0.5``) and CoreML-export
modules keep their own forward.
"""

from __future__ import annotations

from types import MethodType

import torch
from torch import nn

from psa_tvm.attention import (
    BACKENDS,
    _channels_last,
    _channels_last_of,
    _nhwc_heads,
    psa_attention,
)

__all__ = ["attention_forward", "patch", "unpatch"]

_MARK = "_psa_tvm_backend"


def _attention_classes() -> tuple[type, ...]:
    try:
        from ultralytics.nn.modules.block import Attention
    except ImportError as err:
        raise ImportError("psa_tvm.integrations.ultralytics.patch needs ultralytics "
                          "(pip install ultralytics), or pass classes=") from err
    return (Attention,)


def attention_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """ultralytics' ``Attention.forward`` with the core on psa_attention."""
    b, c, height, width = x.shape
    num_heads, key_dim = self.num_heads, self.key_dim
    qkv = self.qkv(x)
    out = psa_attention(qkv, num_heads, key_dim, height, width, getattr(self, _MARK, "auto"))
    n = height * width
    if _channels_last(qkv):
        # a channels_last model: v stays channels_last for pe (one copy, as stock's reshape)
        v = _channels_last_of(_nhwc_heads(qkv, num_heads)[..., 2 * key_dim:], height, width)
    else:
        if qkv.is_contiguous() and not torch.compiler.is_compiling():
            # v (the last 2*kd channels of each head's 4*kd) as one view op, not view + slice
            v = qkv.as_strided((b, num_heads, 2 * key_dim, n),
                               (num_heads * 4 * key_dim * n, 4 * key_dim * n, n, 1),
                               qkv.storage_offset() + 2 * key_dim * n)
        else:
            v = qkv.view(b, num_heads, 4 * key_dim, n)[:, :, 2 * key_dim:]
        v = v.reshape(b, c, height, width)
    pe = self.pe(v)
    if torch.is_grad_enabled() and (pe.requires_grad or out.requires_grad):
        return self.proj(out + pe)
    return self.proj(out.add_(pe))  # inference: into psa_attention's fresh output, no allocation


def _patchable(module: nn.Module) -> bool:
    return (getattr(module, "head_dim", None) == 2 * getattr(module, "key_dim", -1)
            and getattr(module, "format", None) != "coreml")


def patch(model: nn.Module, backend: str = "auto",
          classes: tuple[type, ...] | None = None) -> int:
    """Swap the forward of every ``Attention`` module in ``model`` (``classes``: the module
    types to patch, default ultralytics' ``Attention``) for :func:`attention_forward`; returns
    how many were patched. Patching again only changes the backend."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {list(BACKENDS)}, got {backend!r}")
    classes = classes or _attention_classes()
    count = 0
    for module in model.modules():
        if isinstance(module, classes) and _patchable(module):
            setattr(module, _MARK, backend)
            module.forward = MethodType(attention_forward, module)
            count += 1
    return count


def unpatch(model: nn.Module) -> int:
    """Restore the class's own forward on every module :func:`patch` touched; returns how many."""
    count = 0
    for module in model.modules():
        if hasattr(module, _MARK):
            delattr(module, _MARK)
            module.__dict__.pop("forward", None)
            count += 1
    return count
