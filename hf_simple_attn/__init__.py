"""Simplified attention from machine-translation research as Hugging Face Transformers models.

Importing the package registers the models with the Auto classes. The subpackages, by concern: `modeling` (the
models; the code that travels with checkpoints), `training` (what the training scripts share), `deploy` (ONNX,
CTranslate2, int8, shortlists), `studies` (the reproduction studies), `data` (offline corpora) and `metrics`.
"""

# The package's version, the one source of it (pyproject.toml reads it; CHANGELOG.md has a section for each version).
__version__ = "0.2.0"

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .modeling.attention_heads import LayoutError
from .modeling.attention_registry import ATTENTION_FAMILIES, register_attention
from .modeling.configuration_simple_attn import SimpleAttnMarianConfig
from .modeling.configuration_simple_attn_bert import SimpleAttnBertConfig
from .modeling.modeling_simple_attn_bert import (
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertForTokenClassification,
    SimpleAttnBertModel,
)
from .modeling.modeling_simple_attn_marian import SimpleAttnMarianModel, SimpleAttnMarianMTModel
from .modeling.pipeline_translation import (
    SummarizationPipeline,
    Text2TextGenerationPipeline,
    TranslationPipeline,
)
from .modeling.presets import list_presets


AutoConfig.register(SimpleAttnMarianConfig.model_type, SimpleAttnMarianConfig, exist_ok=True)
AutoModel.register(SimpleAttnMarianConfig, SimpleAttnMarianModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(SimpleAttnMarianConfig, SimpleAttnMarianMTModel, exist_ok=True)
AutoConfig.register(SimpleAttnBertConfig.model_type, SimpleAttnBertConfig, exist_ok=True)
AutoModel.register(SimpleAttnBertConfig, SimpleAttnBertModel, exist_ok=True)
AutoModelForMaskedLM.register(SimpleAttnBertConfig, SimpleAttnBertForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(
    SimpleAttnBertConfig, SimpleAttnBertForSequenceClassification, exist_ok=True
)
AutoModelForTokenClassification.register(SimpleAttnBertConfig, SimpleAttnBertForTokenClassification, exist_ok=True)

# save_pretrained writes `auto_map` and copies the modeling code for trust_remote_code loads.
SimpleAttnMarianConfig.register_for_auto_class()
SimpleAttnMarianModel.register_for_auto_class("AutoModel")
SimpleAttnMarianMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")
SimpleAttnBertConfig.register_for_auto_class()
SimpleAttnBertModel.register_for_auto_class("AutoModel")
SimpleAttnBertForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
SimpleAttnBertForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
SimpleAttnBertForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")

__all__ = [
    "ATTENTION_FAMILIES",
    "LayoutError",
    "SimpleAttnBertConfig",
    "SimpleAttnBertForMaskedLM",
    "SimpleAttnBertForSequenceClassification",
    "SimpleAttnBertForTokenClassification",
    "SimpleAttnBertModel",
    "SimpleAttnMarianConfig",
    "SimpleAttnMarianModel",
    "SimpleAttnMarianMTModel",
    "SummarizationPipeline",
    "Text2TextGenerationPipeline",
    "TranslationPipeline",
    "list_presets",
    "register_attention",
]
