"""How the engines open an ONNX graph in ONNX Runtime: one place for the session settings they share.

- The worker threads do not spin after a run (`session.intra_op.allow_spinning` "0"): a spinning pool holds the
  cores while the next graph, or the Python work between steps, runs (1.65x slower greedy decoding of 64 sentences
  with 2 threads at opus-mt size, int8).
- ONNX Runtime's `SkipLayerNormFusion` is turned off on the CPU: it replaces each residual `Add` +
  `LayerNormalization` with a `SkipLayerNormalization` kernel that is 7x slower there (ONNX Runtime 1.32: 647 us
  against 88 us for the pair at (256, 512), one thread), 10 % of a beam-4 call at opus-mt size. The graphs compute
  the same values either way.
"""

from pathlib import Path


SLOWER_FUSIONS = ["SkipLayerNormFusion"]


def session_options(threads: int | None = None):
    """The engines' default `SessionOptions`: threads that do not spin, `threads` of them (ONNX Runtime's choice
    when None)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def inference_session(graph: Path | str | bytes, options=None, providers: list[str] | None = None):
    """An `InferenceSession` of `graph` (a file or a serialised model) with `options` (ONNX Runtime's defaults when
    None) on `providers` (default the CPU); on the CPU alone, without the fusions that are slower there
    (`SLOWER_FUSIONS`)."""
    import onnxruntime

    providers = providers or ["CPUExecutionProvider"]
    disabled = SLOWER_FUSIONS if providers == ["CPUExecutionProvider"] else []
    graph = str(graph) if isinstance(graph, Path) else graph
    return onnxruntime.InferenceSession(graph, options, providers=providers, disabled_optimizers=disabled)


__all__ = ["SLOWER_FUSIONS", "inference_session", "session_options"]
