"""Deployment of trained checkpoints: ONNX export and ONNX Runtime decoding, CTranslate2 conversion, int8
quantisation and vocabulary shortlists.

It may import `modeling`, `data`, `metrics` and `training` (the shortlist reads the training data as the scripts
do), never `studies`.
"""
