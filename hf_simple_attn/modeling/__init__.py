"""The models: configurations, attention families, layouts, presets and pipelines.

This is the code that travels with every checkpoint (copied next to the weights by `save_pretrained`), so it stands
alone: its modules import each other with single-dot relative imports only, and nothing else of this package;
outside it they import only the standard library, torch and transformers (with its huggingface_hub).
"""
