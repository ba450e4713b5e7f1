"""Recipes: what the training scripts in `training/` are built from: their arguments, model and tokenizer set-up, the steps every
script takes (`run_steps`), the translation, summarization and classification tasks (`*_task`), length-grouped
sampling, label smoothing, checkpoint conversion, model cards and Hub uploads.

It may import `modeling`, `data` and `metrics`, never `deploy` or `studies`.
"""
