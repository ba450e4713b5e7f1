"""What the training scripts in `training/` share: their arguments, model and tokenizer set-up, the translation
task, length-grouped sampling, label smoothing, checkpoint conversion, model cards and Hub uploads.

It may import `modeling`, `data` and `metrics`, never `deploy` or `studies`.
"""
