"""Hard-coded Gaussian attention against the paper's numbers (You, Sun and Iyyer 2020)."""

import pytest
import torch

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.attention_hard_coded import HardCodedGaussianHeads
from hf_simple_attn.modeling.attention_heads import AttentionContext

from conftest import assert_hand_computed, assert_same_maths


pytestmark = pytest.mark.numerics


# N(d; 0, 1) = exp(-d²/2)/√(2π): d=0 → 1/2.506628 = 0.398942, d=1 → 0.606531·0.398942 = 0.241971,
# d=2 → 0.135335·0.398942 = 0.053991, d=3 → 0.011109·0.398942 = 0.004432.
N0, N1, N2, N3 = 0.398942, 0.241971, 0.053991, 0.004432


def heads(site, config, **options):
    spec = HardCodedGaussianHeads.normalize_spec({"kind": "hard_coded", "num_heads": 2, **options}, site, "test")
    return HardCodedGaussianHeads(spec, config, site, 0, head_dim=1)


def weights(module, query_len, key_len, is_causal=False, key_padding_mask=None, batch=1):
    value = torch.zeros(batch, module.num_heads, key_len, 1)
    context = AttentionContext(key_padding_mask, 0, query_len, is_causal)
    return module(None, None, value, context, output_attentions=True)[1]


@pytest.fixture
def config(tiny_marian_kwargs):
    return SimpleAttnMarianConfig(**tiny_marian_kwargs)


def test_self_attention_weights_are_the_papers_gaussians(config):
    w = weights(heads("encoder_self", config, offsets=[0, -1]), 5, 5)[0]
    # head 0 centred on i: row 2 = N(j; 2, 1) for j = 0..4
    assert_hand_computed(w[0, 2], [N2, N1, N0, N1, N2], decimals=6)
    # head 1 centred on i - 1: row 2 = N(j; 1, 1)
    assert_hand_computed(w[1, 2], [N1, N0, N1, N2, N3], decimals=6)


def test_rows_are_cut_at_the_borders_not_renormalised(config):
    w = weights(heads("encoder_self", config, offsets=[0, 1]), 3, 3)[0]
    assert_hand_computed(w[0, 0], [N0, N1, N2], decimals=6)
    assert_hand_computed(w[0, 0].sum(), 0.694904, decimals=6, reduction=3)  # N0 + N1 + N2 < 1: not renormalised
    # head 1 at i = 2 is centred on position 3, outside a 3-token sentence
    assert_hand_computed(w[1, 2], [N3, N2, N1], decimals=6)


def test_padding_cuts_weights_without_renormalising(config):
    mask = torch.tensor([[True, True, True, False, False]])
    w = weights(heads("encoder_self", config, offsets=[0]), 5, 5, key_padding_mask=mask)[0]
    assert_hand_computed(w[0, 2], [N2, N1, N0, 0.0, 0.0], decimals=6)


def test_causal_mask_cuts_future_positions(config):
    w = weights(heads("decoder_self", config, offsets=[0, -1]), 4, 4, is_causal=True)[0]
    assert_hand_computed(w[0, 1], [N1, N0, 0.0, 0.0], decimals=6)
    assert_hand_computed(w[1, 3], [N2, N1, N0, N1], decimals=6)


def test_cross_attention_centre_follows_the_length_ratio(config):
    config.length_ratio = 1.5
    w = weights(heads("cross", config, offsets=[0]), 3, 6)[0, 0]
    # floor(1.5·i) for i = 0, 1, 2 → 0, 1, 3
    assert w.argmax(-1).tolist() == [0, 1, 3]
    assert_hand_computed(w[2], [N3, N2, N1, N0, N1, N2], decimals=6)
    continuous = weights(heads("cross", config, offsets=[0], centre="continuous"), 3, 6)[0, 0]
    # i = 1 → centre 1.5: positions 1 and 2 are 0.5 away, N(0.5) = 0.882497·0.398942 = 0.352065
    assert_hand_computed(continuous[1, 1:3], [0.352065, 0.352065], decimals=6)


def test_window_gives_the_papers_conv_kernel(config):
    w = weights(heads("encoder_self", config, offsets=[0], window=3), 5, 5)[0, 0]
    assert_hand_computed(w[2], [0.0, N1, N0, N1, 0.0], decimals=6)
    assert [round(x, 3) for x in w[2, 1:4].tolist()] == [0.242, 0.399, 0.242]


def test_indexing_copies_exactly_one_value(config):
    module = heads("encoder_self", config, offsets=[-1, 1], indexing=True)
    value = torch.arange(4, dtype=torch.float32).view(1, 1, 4, 1).expand(1, 2, 4, 1)
    context = AttentionContext(None, 0, 4, False)
    output, w = module(None, None, value, context, output_attentions=True)
    # head 0 copies v[i-1], head 1 copies v[i+1]; zero outside the sentence
    assert output[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0]
    assert output[0, 1, :, 0].tolist() == [1.0, 2.0, 3.0, 0.0]
    assert set(w.unique().tolist()) == {0.0, 1.0}


def test_hard_coded_layers_have_no_query_key_parameters(tiny_marian_kwargs):
    model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset("hc-all", **tiny_marian_kwargs))
    names = [name for name, _ in model.named_parameters()]
    assert not any("q_proj" in name or "k_proj" in name for name in names)
    assert any("encoder.layers.0.self_attn.v_proj.weight" in name for name in names)
    model.train()
    ids = torch.tensor([[5, 6, 7, 0]])
    loss = model(input_ids=ids, labels=torch.tensor([[8, 9, 0]])).loss
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "v_proj" in n or "out_proj" in n)


def test_model_attention_outputs_are_the_weights_used(tiny_marian_kwargs):
    model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset("hc-sa", **tiny_marian_kwargs)).eval()
    ids = torch.tensor([[5, 6, 7, 0, 39]])
    out = model(
        input_ids=ids,
        attention_mask=(ids != 39).long(),
        decoder_input_ids=torch.tensor([[39, 5, 6]]),
        output_attentions=True,
    )
    encoder_weights = out.encoder_attentions[0][0]  # (heads, 5, 5), offsets -1, +1 cycled
    assert_hand_computed(encoder_weights[0, 2], [N1, N0, N1, N2, 0.0], decimals=6)
    assert_hand_computed(encoder_weights[1, 2], [N3, N2, N1, N0, 0.0], decimals=6)
    decoder_weights = out.decoder_attentions[0][0]
    assert_hand_computed(decoder_weights[1, 1], [N1, N0, 0.0], decimals=6)
    assert out.cross_attentions[0].shape == (1, 4, 3, 5)


def test_a_decoding_step_over_static_slots_reads_only_the_kernel_reach(config):
    """The exported decoding step (`window_step`) gathers the slots within the kernel's reach around its position and
    cuts padded ones from its weights: the output of weighing every slot with the full table and zeroed padded
    values, at every position of a cache longer than the reach, the first ones included."""
    module = heads("decoder_self", config, offsets=[0, -1])
    first, last = module.kernel_reach(True, torch.float64)
    assert (first, last) == (-9, 0)  # offset -1 and radius 8 in float64 (`gaussian_radius`)
    slots = 3 - first
    generator = torch.Generator().manual_seed(0)
    value = torch.randn(2, 2, slots, 3, dtype=torch.float64, generator=generator)
    mask = torch.ones(2, slots, dtype=torch.bool)
    mask[1, 4] = False
    for position in range(slots):
        # A static cache's step: the position held on the device, given in the context's shared tensors.
        context = AttentionContext(None, None, 1, True, shared_tensors={("positions",): torch.tensor([position])})
        step = module.window_step(value, mask, context)
        table = module.weight_table(torch.tensor([position]), torch.arange(slots), True)  # (heads, 1, slots)
        expected = torch.matmul(table[None], value * mask[:, None, :, None])
        assert_same_maths(step, expected, reduction=slots)
