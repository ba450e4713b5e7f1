"""Dynamic int8 quantisation of a model's linear layers, for smaller and (at large sizes) faster CPU inference.

Every `nn.Linear` is replaced by a dynamically quantised one: its weight is stored in int8 with one scale per
tensor, and its input is quantised on the fly at each call (fbgemm/x86 or qnnpack kernels); embeddings, layer norms
and the attention families' own tables stay float32. Works for every layout, `generate` included.

It uses `torch.ao.quantization.quantize_dynamic`, which torch 2.13 marks deprecated in favour of torchao's
`quantize_(model, Int8DynamicActivationInt8WeightConfig())`. It stays here because it is in torch itself and its
eager CPU kernels are the fast ones: torchao's int8 dynamic config decoded 2.5x slower than float32 in eager mode on
this project's CPU (it needs `torch.compile`), and torchao is not a dependency. The deprecation warnings it
raises are silenced here, once, on purpose.

`quantize_onnx_int8` does the same for the graphs of `hf_simple_attn.deploy.export.export_onnx` (seq2seq) and
`hf_simple_attn.deploy.export_bert.export_bert_onnx` (encoders), with ONNX Runtime's dynamic quantisation (int8
weights of the matrix multiplications, activations quantised at run time).
"""

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` (left as it is) in eval mode whose `nn.Linear` layers compute in int8.

    A translation model with a vocabulary shortlist keeps its output layer in float32: the shortlist computes the
    logits of its candidate rows of that layer's weight only, which an int8 layer does not expose."""
    keep_float = {"lm_head"} if isinstance(model, SimpleAttnMarianMTModel) and model.shortlist is not None else set()
    linears = {
        name: torch.ao.quantization.default_dynamic_qconfig
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name not in keep_float
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.(ao\.quantization|quantize_per_tensor)")
        return torch.ao.quantization.quantize_dynamic(model, linears, dtype=torch.qint8).eval()


def quantize_onnx_int8(onnx_dir, out_dir) -> Path:
    """A copy of an `export_onnx` or `export_bert_onnx` folder whose graphs compute their matrix multiplications in
    int8 (ONNX Runtime's `quantize_dynamic`, signed int8 weights) and whose vocabulary shortlist keeps the output
    layer's rows in int8 (one scale per row); config, generation config and tokenizer files are copied. `out_dir`
    is written whole or not at all. Returns `out_dir`; load it with `OnnxSeq2SeqModel` or `OnnxBertModel` as the
    float32 folder."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from .export import DECODER_FILE, ENCODER_FILE, OUTPUT_FILE, SHORTLIST_FILE, save_int8_shortlist
    from .export_bert import MODEL_FILE

    onnx_dir, out_dir = Path(onnx_dir), Path(out_dir)
    graphs = (MODEL_FILE,) if (onnx_dir / MODEL_FILE).is_file() else (ENCODER_FILE, DECODER_FILE, OUTPUT_FILE)
    missing = [name for name in graphs if not (onnx_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{onnx_dir}: no {', '.join(missing)} (nor {MODEL_FILE}); write the graphs with export_bert_onnx "
            "(encoders) or export_onnx first"
        )
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; choose a new folder for the int8 graphs")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        for name in sorted(os.listdir(onnx_dir)):
            source = onnx_dir / name
            if name in graphs:
                quantize_dynamic(source, staging / name, weight_type=QuantType.QInt8)
            elif name == SHORTLIST_FILE:
                save_int8_shortlist(source, staging / name)
            elif source.is_file() and not name.endswith(".data"):
                shutil.copy2(source, staging / name)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


__all__ = ["DynamicQuantizedLinear", "quantize_dynamic_int8", "quantize_onnx_int8"]
