"""Evaluation metrics that load through `evaluate` without the Hugging Face Hub.

`evaluate.load("sacrebleu")` fetches the metric script from the Hub, which fails offline. This
package ships its own metric modules (one folder per metric, `<name>/<name>.py`) and loads them
by path, so `compute`, `add_batch` and `evaluate.combine` work the same with or without a network.

`evaluate` is imported only inside `load_metric`, because importing it takes about ten seconds.

Nothing else of `hf_simple_attn` is imported here.
"""

import logging
import os
from pathlib import Path


logger = logging.getLogger(__name__)

METRICS_DIR = Path(__file__).resolve().parent

METRIC_NAMES = (
    "sacrebleu",
    "chrf",
    "rouge",
    "accuracy",
    "f1",
    "matthews_correlation",
    "classification",
)

# Shipped metrics that have a Hub module of the same name (`classification` has none).
_HUB_NAMES = frozenset(METRIC_NAMES) - {"classification"}

_OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE")
_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})


def hub_is_offline() -> bool:
    """Whether `HF_HUB_OFFLINE` or `HF_EVALUATE_OFFLINE` is switched on in the environment."""
    return any(os.environ.get(switch, "").upper() in _TRUE_VALUES for switch in _OFFLINE_SWITCHES)


def metric_path(name: str) -> Path:
    """Folder of the shipped metric module `name` (what `evaluate.load` takes as a path)."""
    if name not in METRIC_NAMES:
        raise ValueError(f"Unknown metric {name!r}; available: {', '.join(METRIC_NAMES)}")
    return METRICS_DIR / name


def load_metric(name: str, *, prefer_hub: bool = False, **kwargs):
    """Load metric `name` as an `evaluate.EvaluationModule`.

    By default the shipped module is loaded by path, so results and their keys do not depend
    on network access. With `prefer_hub=True` the Hub module of the same name is tried first,
    unless an offline switch is on (then the Hub is never contacted, so no retries are waited
    on); any failure there falls back to the shipped module. `kwargs` go to `evaluate.load`
    (for example `keep_in_memory`, `cache_dir`, `experiment_id`).
    """
    import evaluate

    folder = metric_path(name)
    if prefer_hub and name in _HUB_NAMES and not hub_is_offline():
        try:
            return evaluate.load(name, **kwargs)
        except Exception as error:  # any Hub failure: the shipped module is the fallback
            logger.warning("Loading %r from the Hub failed (%s); using the shipped module", name, error)
    return evaluate.load(str(folder), **kwargs)


__all__ = ["METRICS_DIR", "METRIC_NAMES", "hub_is_offline", "load_metric", "metric_path"]
