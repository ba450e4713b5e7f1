"""Shared test settings: offline, one thread, tiny models."""

import importlib.util
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


torch.set_num_threads(1)

TINY_MARIAN = dict(
    vocab_size=40,
    d_model=32,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=64,
    pad_token_id=39,
    decoder_start_token_id=39,
    eos_token_id=0,
    forced_eos_token_id=0,
    dropout=0.0,
)

TINY_BERT = dict(
    vocab_size=50,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

WORDS = "the a cat dog sat on mat house is big small red blue green tree car runs fast slow and".split()


@pytest.fixture(scope="session")
def hooks():
    """`docs/hooks.py`, what the documentation generates at build time, as a module."""
    spec = importlib.util.spec_from_file_location(
        "docs_hooks", Path(__file__).resolve().parent.parent / "docs" / "hooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tiny_marian_kwargs():
    return dict(TINY_MARIAN)


def make_model(preset: str | None = None, layout: dict | None = None, **overrides):
    """A tiny SimpleAttnMarianMTModel in eval mode, seeded: of `preset`, or of `layout` when one is given.
    `init_std` 0.3 makes the attention weights differ visibly, `length_ratio` 1.3 moves hard-coded cross centres
    off the diagonal; `overrides` replace any config field."""
    from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel

    torch.manual_seed(0)
    kwargs = {**TINY_MARIAN, "init_std": 0.3, "length_ratio": 1.3, **overrides}
    if layout is None:
        config = SimpleAttnMarianConfig.from_preset(preset, **kwargs)
    else:
        config = SimpleAttnMarianConfig(attention_layout=layout, **kwargs)
    return SimpleAttnMarianMTModel(config).eval()


# --- the tolerance policy (docs/contributing.md, "Comparing floating-point results") --------------------------------
# Two formulations of the same maths (a fast path and its reference, the rows of a chain and the whole chain, an export
# and eager, cached and uncached decoding) run the same operations in another order, and the order is the CPU's: torch
# picks AVX-512, AVX2 or scalar kernels at run time (`ATEN_CPU_CAPABILITY`), oneDNN and SDPA fuse differently. So such
# tests compare in float64 where the code allows, and their tolerance is never a constant tuned on one machine: it is
# `rounding_tolerance`, from the dtype's epsilon and the size of the reductions involved.

# The reductions one transformer layer chains (query/key/value projections, scores, softmax, weighted sum, output
# projection, two feed-forward products, two layer norms), for `depth` in `rounding_tolerance`.
REDUCTIONS_PER_LAYER = 10


def rounding_tolerance(dtype: torch.dtype, reduction: int, depth: int = 1) -> float:
    """The relative distance two orders of the same floating-point operations may put between their results: `depth`
    chained reductions (sums, dot products, softmaxes, norms) of at most `reduction` terms each, in `dtype`. Each one's
    error is at most n·u relative to the sum of its terms' magnitudes (recursive summation, u = eps/2; Higham 2002, §3.1,
    §4.2), whatever order a kernel sums in; errors of a chain add up. Twice that bound: the two results being compared
    each carry their own."""
    return depth * reduction * torch.finfo(dtype).eps


def assert_same_maths(
    actual, expected, *, reduction: int, depth: int = 1, dtype: torch.dtype | None = None, msg: str | None = None
) -> None:
    """`actual` equals `expected` up to the rounding of `rounding_tolerance(dtype, reduction, depth)`, relative to each
    value and, for values near zero (cancellations), to the largest finite magnitude of `expected` (at least 1);
    infinities must match exactly. `dtype`: the precision the two were computed in, `expected`'s dtype by default
    (bfloat16 for a comparison under autocast)."""
    expected = torch.as_tensor(expected)
    tolerance = rounding_tolerance(dtype or expected.dtype, reduction, depth)
    finite = expected.detach()[torch.isfinite(expected.detach())] if expected.is_floating_point() else expected
    scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance * scale, msg=msg)


def model_reductions(config) -> dict[str, int]:
    """`reduction` and `depth` of `assert_same_maths` for a whole model's outputs (a Marian-style or BERT-style config):
    its longest sum (features, feed-forward units or positions) and the reductions of every layer, plus the output
    projection."""
    widths = (config.hidden_size, getattr(config, "intermediate_size", 0))
    widths += (getattr(config, "encoder_ffn_dim", 0), getattr(config, "decoder_ffn_dim", 0))
    layers = getattr(config, "encoder_layers", 0) + getattr(config, "decoder_layers", 0) or config.num_hidden_layers
    return dict(reduction=max(*widths, config.max_position_embeddings), depth=REDUCTIONS_PER_LAYER * layers + 1)


def assert_hand_computed(actual, expected, *, decimals: int, reduction: int = 1, depth: int = 1) -> None:
    """`actual` equals numbers worked out by hand and written to `decimals` places: half a unit of the last place
    written, plus the rounding of computing them (`rounding_tolerance` in `actual`'s dtype)."""
    actual = torch.as_tensor(actual)
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    tolerance = 0.5 * 10.0**-decimals + rounding_tolerance(actual.dtype, reduction, depth) * max(
        1.0, expected.abs().max().item()
    )
    torch.testing.assert_close(actual, expected, rtol=0, atol=tolerance)


def sampling_tolerance(spread: float, draws: int) -> float:
    """How far the mean of `draws` independent draws of standard deviation at most `spread` may fall from its
    expectation: six standard errors (a false failure about once in five hundred million runs, for a normal mean)."""
    return 6 * spread / draws**0.5


def cached_steps(model, source, source_mask, target, cache=None) -> tuple[torch.Tensor, object]:
    """The logits of decoding `target` one token a step with the cache (a new one, or `cache`), (batch, target_len,
    vocab), and the cache."""
    encoder_outputs = model.get_encoder()(input_ids=source, attention_mask=source_mask)
    steps = []
    for position in range(target.shape[1]):
        output = model(
            encoder_outputs=encoder_outputs,
            attention_mask=source_mask,
            decoder_input_ids=target[:, position : position + 1],
            cache=cache,
            use_cache=True,
        )
        cache, steps = output.cache, steps + [output.logits]
    return torch.cat(steps, dim=1), cache


def build_tokenizer():
    """A Marian-layout word-level fast tokenizer: </s>=0, <unk>=1, words, <pad> last (id 39)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"</s>": 0, "<unk>": 1}
    for word in WORDS:
        vocab[word] = len(vocab)
    for index in range(len(vocab), TINY_MARIAN["vocab_size"] - 1):
        vocab[f"w{index}"] = index
    vocab["<pad>"] = TINY_MARIAN["vocab_size"] - 1
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 0)])
    backend.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tokenizer()


BERT_WORDS = "the a cat dog sat on mat house is big small red blue green tree car runs fast slow and good bad".split()


def build_bert_tokenizer():
    """A word-level BERT-layout fast tokenizer: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    for word in BERT_WORDS:
        vocab[word] = len(vocab)
    for index in range(len(vocab), TINY_BERT["vocab_size"]):
        vocab[f"w{index}"] = index
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def padded_bert_batch(lengths, vocab_size=TINY_BERT["vocab_size"], seed=0):
    """Right-padded random ids (pad 0) and the attention mask, one row per length."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(5, vocab_size, (length,), generator=generator)
        attention_mask[row, :length] = 1
    return input_ids, attention_mask


@pytest.fixture(scope="session")
def bert_tokenizer():
    return build_bert_tokenizer()


HUB_TOKEN = "hf_SECRETTOKEN123"
# The users of the local Hub (tests/hub_server.py), by token: HUB_TOKEN is `user`'s, a member of `someone`.
HUB_USERS = {HUB_TOKEN: "user", "hf_OTHERTOKEN456": "other"}
HUB_ORGANIZATIONS = {"someone": {"user"}}


@contextmanager
def serving_hub(hf_home: Path, lfs_threshold: int = 10_000, token: str | None = None):
    """A local Hub (tests/hub_server.py) on 127.0.0.1 that huggingface_hub in this process talks to for as long as it
    runs: the endpoint, online mode, no Xet (large files take the LFS path) and a fresh `hf_home` (its token, caches)
    replace what huggingface_hub read from the environment at import; HF_TOKEN is `token` (unset by default).
    Subprocesses get the same through `hub_environment`."""
    from hub_server import HubServer
    from huggingface_hub import constants

    default_home = constants.HF_HOME
    with HubServer(HUB_USERS, HUB_ORGANIZATIONS, lfs_threshold) as hub, pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "ENDPOINT", hub.endpoint)
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        for name, value in vars(constants).copy().items():
            if isinstance(value, str) and value.startswith(default_home):
                patch.setattr(constants, name, str(hf_home) + value.removeprefix(default_home))
        for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            patch.delenv(variable, raising=False)
        if token is not None:
            patch.setenv("HF_TOKEN", token)
        yield hub


def hub_environment(hub, hf_home: Path) -> dict[str, str]:
    """The environment of a subprocess that talks to `hub` only, with `hf_home` as its Hugging Face home."""
    return dict(HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="0", HF_HUB_DISABLE_XET="1", HF_HOME=str(hf_home))


@pytest.fixture
def fake_hub(tmp_path_factory):
    """The uploads made to a local Hub (`serving_hub`) during the test, as they arrive: per commit, the token it was
    made with and the bytes of every file it added. HUB_TOKEN is the default token (HF_TOKEN)."""
    with serving_hub(tmp_path_factory.mktemp("hf_home"), token=HUB_TOKEN) as hub:
        yield hub.uploads
        assert hub.unexpected == [], f"requests the local Hub does not understand: {hub.unexpected}"


def assert_hub_token_kept_out(output_dir, uploads) -> None:
    """The token reached the Hub client only: no file under `output_dir` (checkpoints included) holds
    it, and the one upload has neither a file holding it nor `training_args.bin`."""
    secret = HUB_TOKEN.encode()
    saved = [path for path in Path(output_dir).rglob("*") if path.is_file()]
    assert [str(path) for path in saved if secret in path.read_bytes()] == []
    [upload] = uploads
    assert upload["token"] == HUB_TOKEN
    assert "config.json" in upload["files"] and "training_args.bin" not in upload["files"]
    assert [name for name, data in upload["files"].items() if secret in data] == []


def run_without_package(args: list[str], workdir, timeout: int = 300, **environment) -> dict:
    """Run `python *args` in `workdir`, offline and at one thread, with PYTHONPATH unset so that a checkpoint must
    bring its own code (trust_remote_code); the JSON object its last line of output prints."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(Path(workdir) / "hf_home"), OMP_NUM_THREADS="1", **environment)
    result = subprocess.run(
        [sys.executable, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def dynamo_counters():
    """Dynamo's counters (graphs compiled, graph breaks) of one test's compiled runs: its caches are emptied before the
    test, so that the runs compile as in a new process (no recompile limit reached by earlier tests' models), and after
    it, so that no compiled code outlives it."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


def record_calls(monkeypatch, module, name: str) -> list[SimpleNamespace]:
    """Replace `module.name` by a wrapper that records each call's `args` and `result`; returns the record."""
    original, calls = getattr(module, name), []

    def recorded(*args, **kwargs):
        calls.append(SimpleNamespace(args=args, result=original(*args, **kwargs)))
        return calls[-1].result

    monkeypatch.setattr(module, name, recorded)
    return calls


def assert_saved_as_trained(model, folder, inputs: dict) -> None:
    """The weights saved in `folder` carry `model`'s own parameter names (none of `torch.compile`'s `_orig_mod.`), and
    the model they load as gives `model`'s outputs on `inputs`, bit for bit."""
    from safetensors.torch import load_file

    assert set(load_file(Path(folder) / "model.safetensors")) <= set(model.state_dict())
    loaded = type(model).from_pretrained(folder).eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)


def pytest_terminal_summary(terminalreporter):
    """The count line of README.md's and docs/'s code blocks (tests/test_doc_blocks.py), at the end of a session that
    ran that module's tests. Under pytest-xdist this runs on the controller, which has the workers' reports; the
    counts are read from the Markdown here."""
    reports = [report for reports in terminalreporter.stats.values() for report in reports]
    if not any("test_doc_blocks.py" in (getattr(report, "nodeid", "") or "") for report in reports):
        return
    from test_doc_blocks import block_counts

    try:
        line = block_counts()
    except ValueError as error:
        line = f"doc blocks: cannot count them: {error}"
    terminalreporter.write_line(line)
