"""The model card templates, installed as the package data `hf_simple_attn.model_cards` (see README.md)."""
