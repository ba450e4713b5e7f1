"""Simplified attention from machine-translation research as Hugging Face Transformers models.

Importing the package registers the models with the Auto classes.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .modeling.attention_registry import ATTENTION_FAMILIES, LayoutError, register_attention
from .modeling.configuration_simple_attn import SimpleAttnMarianConfig
from .modeling.modeling_simple_attn_marian import SimpleAttnMarianModel, SimpleAttnMarianMTModel
from .modeling.pipeline_translation import TranslationPipeline
from .modeling.presets import list_presets


AutoConfig.register(SimpleAttnMarianConfig.model_type, SimpleAttnMarianConfig, exist_ok=True)
AutoModel.register(SimpleAttnMarianConfig, SimpleAttnMarianModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(SimpleAttnMarianConfig, SimpleAttnMarianMTModel, exist_ok=True)

# save_pretrained writes `auto_map` and copies the modeling code for trust_remote_code loads.
SimpleAttnMarianConfig.register_for_auto_class()
SimpleAttnMarianModel.register_for_auto_class("AutoModel")
SimpleAttnMarianMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "ATTENTION_FAMILIES",
    "LayoutError",
    "SimpleAttnMarianConfig",
    "SimpleAttnMarianModel",
    "SimpleAttnMarianMTModel",
    "TranslationPipeline",
    "list_presets",
    "register_attention",
]
