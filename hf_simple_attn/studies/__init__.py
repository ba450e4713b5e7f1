"""The reproduction studies of `studies/`: the study runner, its summary (tables, charts, significance), the
summary of the distillation study across its four studies, the papers' analyses of trained checkpoints and the
outside baselines.

It may import every other subpackage; nothing outside `studies` and the CLI imports it.
"""
