"""The vocabulary shortlist: building it from parallel data, decoding with it, saving it, the CLI."""

import json
import os
import textwrap

import pytest
import torch
from transformers import LogitsProcessorList

from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel, TranslationPipeline
from hf_simple_attn.cli import main
from hf_simple_attn.deploy.shortlist import build_shortlist, shortlist_coverage
from hf_simple_attn.modeling.candidate_vocabulary import CandidateVocabulary
from hf_simple_attn.modeling.vocab_shortlist import CandidateRows

from conftest import TINY_MARIAN, assert_same_maths, make_model, model_reductions, run_without_package


VOCAB = TINY_MARIAN["vocab_size"]
SPECIAL = [0, 1, VOCAB - 1]  # </s>, <unk>, <pad> of the tiny tokenizer
SENTENCES = ["the cat sat on the mat", "a big red car runs fast", "the dog is small", "green tree and blue house"]


def full_vocabulary_shortlist():
    return torch.arange(VOCAB).repeat(VOCAB, 1), torch.zeros(0, dtype=torch.long)


def restricted_shortlist(top_k=2, seed=0):
    """Random candidates per source token, some slots empty; two frequent tokens."""
    generator = torch.Generator().manual_seed(seed)
    candidates = torch.randint(2, VOCAB - 1, (VOCAB, top_k), generator=generator)
    candidates[::3, -1] = -1
    return candidates, torch.tensor([5, 9])


def allowed_tokens(candidates, frequent, input_ids, attention_mask) -> set[int]:
    """A sentence's candidates, computed independently of the model: its source tokens' rows, frequent, special."""
    allowed = {0, VOCAB - 1} | set(frequent.tolist())  # eos, pad (= decoder start)
    for token in input_ids[attention_mask.bool()].tolist():
        allowed |= {candidate for candidate in candidates[token].tolist() if candidate >= 0}
    return allowed


def source_batch(tokenizer):
    return tokenizer(SENTENCES, return_tensors="pt", padding=True)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_full_vocabulary_shortlist_generates_exactly_as_without(tiny_tokenizer, num_beams):
    model = make_model("hc-sa")
    batch = source_batch(tiny_tokenizer)
    expected = model.generate(
        **batch, num_beams=num_beams, max_new_tokens=8, output_scores=True, return_dict_in_generate=True
    )
    model.set_vocab_shortlist(*full_vocabulary_shortlist())
    output = model.generate(
        **batch,
        num_beams=num_beams,
        max_new_tokens=8,
        use_shortlist=True,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert torch.equal(output.sequences, expected.sequences)
    assert all(torch.equal(a, b) for a, b in zip(output.scores, expected.scores))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_restricted_shortlist_generates_only_the_candidates_of_the_batch(tiny_tokenizer, num_beams):
    model = make_model("base")
    candidates, frequent = restricted_shortlist()
    model.set_vocab_shortlist(candidates, frequent)
    batch = source_batch(tiny_tokenizer)
    output = model.generate(**batch, num_beams=num_beams, max_new_tokens=8, use_shortlist=True)
    batch_candidates = set().union(
        *(
            allowed_tokens(candidates, frequent, ids, mask)
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
        )
    )
    assert set(output.flatten().tolist()) <= batch_candidates
    # Alone, a sentence gets only its own candidates.
    alone = tiny_tokenizer(SENTENCES[1:2], return_tensors="pt")
    output = model.generate(**alone, num_beams=num_beams, max_new_tokens=8, use_shortlist=True)
    assert set(output[0].tolist()) <= allowed_tokens(
        candidates, frequent, alone["input_ids"][0], alone["attention_mask"][0]
    )


def logits_widths(model) -> list[int]:
    """The width of the logits of every forward call of `model` from now on."""
    widths = []
    model.register_forward_hook(lambda module, inputs, output: widths.append(output.logits.shape[-1]))
    return widths


@pytest.mark.numerics
@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_shortlist_search_runs_over_the_candidates_and_chooses_the_same_tokens(
    tiny_tokenizer, num_beams, monkeypatch
):
    """The candidates become the search's vocabulary (logits of their width only); every option's token ids are
    carried into it, so it chooses exactly the tokens of the search over the whole vocabulary with -inf."""
    model = make_model("base").double()
    candidates, frequent = restricted_shortlist()
    model.set_vocab_shortlist(candidates, frequent)
    batch = source_batch(tiny_tokenizer)
    allowed = set().union(
        *(
            allowed_tokens(candidates, frequent, ids, mask)
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
        )
    )
    outside = min(set(range(VOCAB)) - allowed)
    options = dict(
        num_beams=num_beams,
        num_return_sequences=num_beams,
        max_new_tokens=8,
        min_new_tokens=3,
        no_repeat_ngram_size=2,
        repetition_penalty=1.3,
        bad_words_ids=[[5], [outside]],  # a candidate (frequent) and a token outside the candidates
        suppress_tokens=[9, outside],
        length_penalty=0.8,
        use_shortlist=True,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
    )
    widths = logits_widths(model)
    searched = model.generate(**batch, **options)
    assert widths and set(widths) == {len(allowed)}
    widths.clear()
    monkeypatch.setattr(CandidateVocabulary, "search_config", lambda self, config, model: None)
    expected = model.generate(**batch, **options)
    assert set(widths) == {VOCAB}
    assert torch.equal(searched.sequences, expected.sequences)
    assert not set(searched.sequences.flatten().tolist()) & {5, 9, outside}
    # Scores and logits come back over the whole vocabulary, -inf outside the candidates, as that search gives them.
    for name in ("scores", "logits"):
        assert len(getattr(searched, name)) == len(getattr(expected, name))
        for step, expected_step in zip(getattr(searched, name), getattr(expected, name)):
            assert step.shape == expected_step.shape == (len(expected.sequences), VOCAB)
            finite = expected_step.isfinite()  # -inf at the same places; the rest computed as the same maths
            assert torch.equal(step.isfinite(), finite) and torch.equal(step[~finite], expected_step[~finite])
            assert_same_maths(step[finite], expected_step[finite], **model_reductions(model.config))
    if num_beams > 1:
        assert_same_maths(searched.sequences_scores, expected.sequences_scores, **model_reductions(model.config))
        assert torch.equal(searched.beam_indices, expected.beam_indices)


def test_the_shortlist_searches_the_whole_vocabulary_when_the_call_needs_it(tiny_tokenizer):
    """A logits processor, sampling, or a forced token outside the candidates: the search runs over the whole
    vocabulary (-inf outside the candidates), as before."""
    model = make_model("base")
    candidates, frequent = restricted_shortlist()
    model.set_vocab_shortlist(candidates, frequent)
    batch = source_batch(tiny_tokenizer)
    outside = min(set(range(2, VOCAB)) - set(candidates[batch["input_ids"]].flatten().tolist()) - {5, 9})
    widths = logits_widths(model)
    for options in (
        dict(logits_processor=LogitsProcessorList()),
        dict(do_sample=True),
        dict(forced_bos_token_id=outside),
    ):
        widths.clear()
        model.generate(**batch, max_new_tokens=4, use_shortlist=True, **options)
        assert set(widths) == {VOCAB}, options


def test_beam_search_keeps_the_whole_vocabulary_when_its_filler_would_change(tiny_tokenizer):
    """transformers' beam search writes pad after a finished hypothesis, or eos when pad's id is 0. With pad 1 the
    smallest candidate, pad would be candidate 0 and the filler eos: that search keeps the whole vocabulary."""
    model = make_model("base", pad_token_id=1, eos_token_id=5, forced_eos_token_id=5, decoder_start_token_id=1)
    model.set_vocab_shortlist(*restricted_shortlist())
    batch = source_batch(tiny_tokenizer)
    widths = logits_widths(model)
    for num_beams, whole_vocabulary in ((1, False), (3, True)):
        widths.clear()
        model.generate(**batch, num_beams=num_beams, max_new_tokens=6, use_shortlist=True)
        assert (set(widths) == {VOCAB}) == whole_vocabulary, num_beams


@pytest.mark.numerics
def test_shortlist_logits_are_the_full_logits_of_the_candidates(tiny_tokenizer):
    model = make_model("base").double()
    model.set_vocab_shortlist(*restricted_shortlist())
    batch = source_batch(tiny_tokenizer)
    union = model.shortlist.candidate_mask(batch["input_ids"], batch["attention_mask"]).any(dim=0)
    assert 10 < union.sum() < VOCAB
    decoder_input_ids = torch.tensor([[VOCAB - 1, 4, 5]] * len(SENTENCES))
    full = model(**batch, decoder_input_ids=decoder_input_ids).logits
    restricted = model(**batch, decoder_input_ids=decoder_input_ids, output_vocab_mask=union[None]).logits
    assert (restricted[..., ~union] == float("-inf")).all()
    assert_same_maths(restricted[..., union], full[..., union], **model_reductions(model.config))


def test_candidate_rows_are_gathered_once_per_mask_and_weights():
    model = make_model("base")
    weight, bias = model.lm_head.weight, model.final_logits_bias
    mask = torch.zeros(2, VOCAB, dtype=torch.bool)
    mask[0, [3, 7]] = mask[1, 5] = True
    memo = CandidateRows()
    ids, rows, biases = first = memo.get(mask, weight, bias)
    assert ids.tolist() == [3, 5, 7] and torch.equal(rows, weight[[3, 5, 7]]) and biases.shape == (3,)
    assert memo.get(mask, weight, bias) is first  # the next decoding steps
    with torch.no_grad():
        weight.add_(1.0)
    assert torch.equal(memo.get(mask, weight, bias)[1], weight[[3, 5, 7]])  # the weights changed
    assert memo.get(mask.clone(), weight, bias) is not first  # another call's mask


def test_the_shortlist_is_off_by_default_and_never_outlives_its_call(tiny_tokenizer):
    model = make_model("base")
    batch = source_batch(tiny_tokenizer)
    expected = model.generate(**batch, max_new_tokens=8)
    model.set_vocab_shortlist(*restricted_shortlist(top_k=1))
    restricted = model.generate(**batch, max_new_tokens=8, use_shortlist=True)
    assert not torch.equal(restricted, expected)
    assert torch.equal(model.generate(**batch, max_new_tokens=8), expected)
    assert not hasattr(model.generation_config, "use_shortlist")
    model.generation_config.use_shortlist = True  # on by default for this model: saved in generation_config.json
    assert torch.equal(model.generate(**batch, max_new_tokens=8), restricted)
    assert torch.equal(model.generate(**batch, max_new_tokens=8, use_shortlist=False), expected)
    translator = TranslationPipeline(model=model, tokenizer=tiny_tokenizer)
    # The candidates of a batch are those of all its sentences: the pipeline's batch is the same batch here.
    texts = [row["translation_text"] for row in translator(SENTENCES, max_new_tokens=8, batch_size=len(SENTENCES))]
    assert texts == tiny_tokenizer.batch_decode(restricted, skip_special_tokens=True)


def test_save_and_load_keep_the_shortlist_and_its_code(tmp_path, tiny_tokenizer):
    model = make_model("hc-sa")
    candidates, frequent = restricted_shortlist(top_k=3)
    model.set_vocab_shortlist(candidates, frequent)
    model.save_pretrained(tmp_path)
    assert os.path.exists(tmp_path / "vocab_shortlist.py")
    loaded, info = SimpleAttnMarianMTModel.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert (loaded.config.shortlist_top_k, loaded.config.shortlist_frequent) == (3, 2)
    assert torch.equal(loaded.shortlist.candidates, candidates.int())
    assert torch.equal(loaded.shortlist.frequent, frequent.int())
    batch = source_batch(tiny_tokenizer)
    assert torch.equal(
        loaded.eval().generate(**batch, max_new_tokens=8, use_shortlist=True),
        model.generate(**batch, max_new_tokens=8, use_shortlist=True),
    )
    # Loaded with shortlist_top_k=0, the shortlist is dropped quietly.
    plain, info = SimpleAttnMarianMTModel.from_pretrained(
        tmp_path, shortlist_top_k=0, shortlist_frequent=0, output_loading_info=True
    )
    assert plain.shortlist is None and info["unexpected_keys"] == set()


def test_a_hooked_output_layer_decodes_over_the_shortlist_through_the_hook(tiny_tokenizer):
    """The candidates' logits are read from `lm_head.weight` only for a plain head; a hook (or an adapter wrapping
    the head) is applied, and only the candidates remain."""
    model = make_model("base")
    candidates, frequent = restricted_shortlist()
    model.set_vocab_shortlist(candidates, frequent)
    alone = tiny_tokenizer(SENTENCES[1:2], return_tensors="pt")
    allowed = allowed_tokens(candidates, frequent, alone["input_ids"][0], alone["attention_mask"][0])
    favoured, outside = 5, min(set(range(2, VOCAB - 1)) - allowed)  # 5 is frequent: always a candidate
    # The tiny model's generation config forces eos at the last step.
    for token, expected in ((favoured, [VOCAB - 1] + [favoured] * 3 + [0]), (outside, None)):
        boost = torch.zeros(VOCAB)
        boost[token] = 100.0
        handle = model.lm_head.register_forward_hook(lambda module, inputs, output: output + boost)
        output = model.generate(**alone, max_new_tokens=4, use_shortlist=True)[0].tolist()
        handle.remove()
        assert set(output) <= allowed
        if expected is not None:
            assert output == expected


def test_resizing_the_vocabulary_fits_the_shortlist_and_the_checkpoint_reloads(tmp_path):
    model = make_model("base")
    candidates, frequent = restricted_shortlist()
    model.set_vocab_shortlist(candidates, frequent)
    model.resize_token_embeddings(VOCAB + 8)
    # Old rows kept, the 8 new source tokens without candidates of their own.
    expected_candidates = torch.cat([candidates, torch.full((8, 2), -1)]).int()
    assert torch.equal(model.shortlist.candidates, expected_candidates)
    assert torch.equal(model.shortlist.frequent, frequent.int())
    assert model.shortlist.target_vocab_size == VOCAB + 8
    source = {"input_ids": torch.tensor([[VOCAB + 3, 7, 0]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    output = model.generate(**source, num_beams=3, max_new_tokens=8, use_shortlist=True)
    assert set(output[0].tolist()) <= allowed_tokens(
        expected_candidates, frequent, source["input_ids"][0], source["attention_mask"][0]
    )
    model.save_pretrained(tmp_path)
    loaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.shortlist.candidates, expected_candidates)
    assert torch.equal(loaded.generate(**source, num_beams=3, max_new_tokens=8, use_shortlist=True), output)


def test_shrinking_the_vocabulary_drops_the_removed_tokens_from_the_shortlist():
    model = make_model("base")
    candidates = torch.tensor([[2, VOCAB - 3]] * VOCAB)
    model.set_vocab_shortlist(candidates, torch.tensor([5, VOCAB - 2]))
    model.resize_token_embeddings(VOCAB - 4)
    assert torch.equal(model.shortlist.candidates, torch.tensor([[2, -1]] * (VOCAB - 4), dtype=torch.int32))
    assert torch.equal(model.shortlist.frequent, torch.tensor([5], dtype=torch.int32))
    assert (model.config.shortlist_top_k, model.config.shortlist_frequent) == (2, 1)


def test_a_checkpoint_without_shortlist_loads_unchanged(tmp_path):
    model = make_model("base")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["shortlist_top_k"], config["shortlist_frequent"]) == (0, 0)
    del config["shortlist_top_k"], config["shortlist_frequent"]  # as saved before the shortlist existed
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded, info = SimpleAttnMarianMTModel.from_pretrained(tmp_path, output_loading_info=True)
    assert loaded.shortlist is None and info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_bad_arguments_name_the_field(tiny_tokenizer):
    for overrides, message in (
        ({"shortlist_top_k": -1}, "shortlist_top_k: expected an integer >= 0"),
        ({"shortlist_frequent": 5}, "shortlist_frequent: 5 frequent tokens need a shortlist table"),
    ):
        with pytest.raises(ValueError, match=message):
            SimpleAttnMarianConfig(**TINY_MARIAN, **overrides)
    model = make_model("base")
    candidates, frequent = restricted_shortlist()
    for bad, message in (
        ((candidates.float(), frequent), "candidates: expected a 2-D tensor of integer token ids"),
        ((candidates[:5], frequent), r"candidates: expected one row per source token \(40\)"),
        ((candidates[:, :0], frequent), r"candidates: expected at least one column"),
        ((candidates + VOCAB, frequent), r"candidates: token ids must lie in \[-1, 40\)"),
        ((candidates, frequent - 10), r"frequent: token ids must lie in \[0, 40\)"),
    ):
        with pytest.raises(ValueError, match=message):
            model.set_vocab_shortlist(*bad)
    assert model.shortlist is None and model.config.shortlist_top_k == 0
    batch = source_batch(tiny_tokenizer)
    with pytest.raises(ValueError, match="use_shortlist=True: this model has no vocabulary shortlist"):
        model.generate(**batch, max_new_tokens=3, use_shortlist=True)
    model.set_vocab_shortlist(candidates, frequent)
    with pytest.raises(ValueError, match="use_shortlist: expected True or False, got 'yes'"):
        model.generate(**batch, max_new_tokens=3, use_shortlist="yes")
    with pytest.raises(ValueError, match="output_vocab_mask: expected a bool tensor of shape"):
        model(**batch, decoder_input_ids=batch["input_ids"], output_vocab_mask=torch.ones(4, VOCAB))
    with pytest.raises(ValueError, match="pass it without labels"):
        model(**batch, labels=batch["input_ids"], output_vocab_mask=torch.ones(4, VOCAB, dtype=torch.bool))
    with pytest.raises(ValueError, match="top_k: expected an integer >= 1"):
        build_shortlist([[2]], [[3]], VOCAB, SPECIAL, top_k=0)


def toy_corpus():
    """Source token 10 always comes with target 20, 11 with 21 and 12 with 22; target 30 is in every sentence, 31 in
    most; the special tokens ends every sentence."""
    source = [[10, 12, 0], [11, 12, 0], [10, 11, 0], [10, 0], [11, 0], [12, 13, 0]]
    target = [[20, 22, 30, 0], [21, 22, 30, 31, 0], [20, 21, 30, 31, 0], [20, 30, 31, 0], [21, 30, 0], [22, 30, 31, 0]]
    return source, target


def test_build_shortlist_ranks_by_lexical_translation_probability():
    source, target = toy_corpus()
    shortlist = build_shortlist(source, target, VOCAB, SPECIAL, top_k=2, frequent=1)
    assert shortlist.frequent.tolist() == [*SPECIAL, 30]  # the special tokens, then the most frequent
    assert shortlist.candidates.shape == (VOCAB, 2) and shortlist.candidates.dtype == torch.int32
    # Each token's translation first; 30 is always allowed, so it takes no slot; 31 explains nothing better.
    assert shortlist.candidates[10].tolist() == [20, 31]
    assert shortlist.candidates[11].tolist() == [21, 31]
    assert shortlist.candidates[12, 0] == 22 and shortlist.candidates[13, 0] in (22, 31)
    # Unseen and special source tokens have no candidates.
    assert (shortlist.candidates[[0, 1, 2, 14, VOCAB - 1]] == -1).all()
    coverage = shortlist_coverage(
        shortlist, [[10, 11, 0], [13, 0]], [[21, 20, 30, 0], [23, 0]], VOCAB, SPECIAL, batch_size=1
    )
    assert coverage["coverage"] == 3 / 4 and coverage["sentences_covered"] == 1 / 2
    # Always allowed: the special tokens and 30; from the table: 20, 21, 31, and 22, 31.
    assert coverage["candidates_per_sentence"] == (2 * (len(SPECIAL) + 1) + 3 + 2) / 2


def test_cli_adds_the_shortlist_to_a_checkpoint(tmp_path, tiny_tokenizer, capsys):
    model = make_model("base")
    model.save_pretrained(tmp_path / "run")
    tiny_tokenizer.save_pretrained(tmp_path / "run")
    words = "the a cat dog sat on mat house is big small red blue green tree car runs fast slow and".split()
    with open(tmp_path / "train.jsonl", "w") as handle:
        for index in range(40):
            source = " ".join(words[(index + shift) % len(words)] for shift in (0, 3, 7))
            target = " ".join(words[(index + shift + 1) % len(words)] for shift in (0, 3, 7))
            handle.write(json.dumps({"translation": {"en": source, "de": target}}) + "\n")
    main(
        [
            "shortlist",
            str(tmp_path / "run"),
            "--train_file",
            str(tmp_path / "train.jsonl"),
            "--validation_file",
            str(tmp_path / "train.jsonl"),
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--top_k",
            "3",
            "--frequent",
            "2",
        ]
    )
    assert "validation coverage" in capsys.readouterr().out
    loaded = SimpleAttnMarianMTModel.from_pretrained(tmp_path / "run")
    assert (loaded.config.shortlist_top_k, loaded.config.shortlist_frequent) == (3, 3 + 2)
    assert torch.equal(loaded.model.shared.weight, model.model.shared.weight)
    # "cat" (word 2) is always translated as "dog" (word 3).
    assert loaded.shortlist.candidates[tiny_tokenizer.convert_tokens_to_ids("cat"), 0] == 5
    assert not [name for name in os.listdir(tmp_path / "run") if name.startswith(".shortlist")]
    with pytest.raises(SystemExit) as stopped:
        main(["shortlist", str(tmp_path / "run"), "--train_file", str(tmp_path / "train.jsonl")])
    assert stopped.value.code == 2
    assert "hf-simple-attn shortlist: error: Need to specify the source language" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--data_cache_dir", "--corpus_cache_dir"])
def test_cli_takes_the_corpus_cache_by_its_name_and_its_former_name(flag, tmp_path, monkeypatch, capsys):
    received = []

    def shortlist_from_data(run_dir, data_args, top_k, frequent, iterations):
        received.append(data_args.data_cache_dir)
        return {"top_k": top_k, "always_allowed": 3, "frequent": frequent, "training_pairs": 1}

    monkeypatch.setattr("hf_simple_attn.deploy.shortlist.shortlist_from_data", shortlist_from_data)
    main(["shortlist", str(tmp_path), "--dataset_name", "libreoffice_help", flag, str(tmp_path / "cache")])
    assert received == [str(tmp_path / "cache")]


REMOTE_SHORTLIST = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
    batch = tokenizer(json.loads(sys.argv[2]), return_tensors="pt", padding=True)
    output = model.generate(**batch, num_beams=3, max_new_tokens=8, use_shortlist=True)
    print(json.dumps({"module": type(model).__module__, "ids": output.tolist()}))
    """
)


def test_a_saved_shortlist_decodes_where_the_package_is_not_installed(tmp_path, tiny_tokenizer):
    model = make_model("hc-sa")
    model.set_vocab_shortlist(*restricted_shortlist())
    model.save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    report = run_without_package(["-c", REMOTE_SHORTLIST, str(tmp_path / "model"), json.dumps(SENTENCES)], tmp_path)
    assert report["module"].startswith("transformers_modules.")
    expected = model.generate(**source_batch(tiny_tokenizer), num_beams=3, max_new_tokens=8, use_shortlist=True)
    assert report["ids"] == expected.tolist()
