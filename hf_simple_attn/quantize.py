"""Dynamic int8 quantisation of a model's linear layers, for smaller and (at large sizes) faster CPU inference.

Every `nn.Linear` is replaced by a dynamically quantised one: its weight is stored in int8 with one scale per
tensor, and its input is quantised on the fly at each call (fbgemm/x86 or qnnpack kernels); embeddings, layer norms
and the attention families' own tables stay float32. Works for every layout, `generate` included.

It uses `torch.ao.quantization.quantize_dynamic`, which torch 2.13 marks deprecated in favour of torchao's
`quantize_(model, Int8DynamicActivationInt8WeightConfig())`. It stays here because it is in torch itself and its
eager CPU kernels are the fast ones: torchao's int8 dynamic config decoded 2.5x slower than float32 in eager mode on
this project's CPU (it needs `torch.compile`), and torchao is not a dependency. The deprecation warnings it
raises are silenced here, once, on purpose.
"""

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` (left as it is) in eval mode whose `nn.Linear` layers compute in int8."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.(ao\.quantization|quantize_per_tensor)")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8).eval()


__all__ = ["DynamicQuantizedLinear", "quantize_dynamic_int8"]
