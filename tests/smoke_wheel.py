"""Smoke test of an installed wheel, run by `.ci/run` with a fresh environment's python (offline, seconds).

Checks that `hf_simple_attn` comes from that environment (not a source tree), then trains a tiny model
on the corpus shipped with the package, saves it with its model card (`publish_checkpoint`, no push),
loads it back and translates through the pipeline.

    <venv>/bin/python tests/smoke_wheel.py
"""

import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import torch
from huggingface_hub import ModelCard
from transformers import pipeline

import hf_simple_attn
from hf_simple_attn import SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.data import load_embedded_corpus
from hf_simple_attn.recipes.hub import publish_checkpoint
from hf_simple_attn.recipes.tokenization import train_tokenizer


SENTENCES = ["Click OK to close the dialog.", "Select the cells that you want to print."]


def main() -> None:
    installed = Path(hf_simple_attn.__file__).resolve()
    if not installed.is_relative_to(Path(sys.prefix).resolve()):
        sys.exit(f"hf_simple_attn was imported from {installed}, not from the environment at {sys.prefix}")
    if version("hf_simple_attn") != hf_simple_attn.__version__:  # the wheel's version is read from the package
        sys.exit(f"wheel version {version('hf_simple_attn')}, hf_simple_attn.__version__ {hf_simple_attn.__version__}")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = load_embedded_corpus(cache_dir=Path(tmp) / "cache")["train"].select(range(64))["translation"]
        sources, targets = [pair["en"] for pair in pairs], [pair["de"] for pair in pairs]
        tokenizer = train_tokenizer(sources + targets, vocab_size=300)
        pad = tokenizer.pad_token_id
        config = SimpleAttnMarianConfig.from_preset(
            "hc-sa",
            vocab_size=len(tokenizer),
            pad_token_id=pad,
            decoder_start_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=128,
            dropout=0.0,
        )
        model = SimpleAttnMarianMTModel(config)
        batch = tokenizer(
            sources, text_target=targets, return_tensors="pt", padding=True, truncation=True, max_length=64
        )
        batch["labels"][batch["labels"] == pad] = -100
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(20):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        assert losses[-1] < losses[0], losses

        output_dir = Path(tmp) / "run"
        model.save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
        card_path = publish_checkpoint(
            output_dir,
            model,
            push_to_hub=False,
            task="translation",
            dataset_name="hf_simple_attn:embedded",
            metrics={"eval_bleu": 1.0},
            language=["en", "de"],
        )
        card = ModelCard.load(card_path)
        assert card.data.license and card.data.metrics == ["sacrebleu"], card.data

        translator = pipeline("translation", model=str(output_dir), trust_remote_code=True)
        translations = [out["translation_text"] for out in translator(SENTENCES, max_new_tokens=8)]
        assert len(translations) == len(SENTENCES) and all(isinstance(text, str) for text in translations)
    print(f"wheel smoke test passed: {installed.parent}, loss {losses[0]:.2f} -> {losses[-1]:.2f}, {translations}")


if __name__ == "__main__":
    main()
