"""Deployment of trained checkpoints: ONNX export and ONNX Runtime decoding, CTranslate2 conversion, int8
quantisation, vocabulary shortlists, and a corpus translated by a teacher for distillation (through the fastest
engine of these).

It may import `modeling`, `data`, `metrics` and `recipes` (the shortlist and distillation read the training data as
the scripts do), never `studies`.
"""
