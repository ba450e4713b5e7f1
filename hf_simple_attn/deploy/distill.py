"""Sequence-level knowledge distillation (Kim and Rush 2016): a student trained on its teacher's translations.

`--distill_from TEACHER` (`DistillationArguments`, taken by `training/run_translation.py` and
`training/run_translation_no_trainer.py`) translates the training split's sources with the teacher (a Hub name or a
folder of any seq2seq checkpoint `AutoModelForSeq2SeqLM` loads) and trains on these translations; the validation and
test splits keep their references. The teacher reads the raw sources (without `--source_prefix`). Before anything is
translated the teacher is checked against the run: the languages its config, tokenizer or (for a folder) model card
records must be the run's `--source_lang` / `--target_lang`, and a student that starts from a pretrained tokenizer
(`--model_name_or_path` / `--tokenizer_name`) must have the teacher's vocabulary.

The translations are cached on disk under `--distill_cache_dir` (default: $HF_SIMPLE_ATTN_DISTILL_CACHE, else
~/.cache/hf_simple_attn/distill), in a folder named by a hash of what decides them (`manifest.json` lists it): the
teacher (a folder's path and the size and modification time of its files; a Hub name's commit), the languages, the
generation settings and the source texts. Every run that distils the same data from the same teacher, such as the
runs of a study, reuses one translation, made once: a lock lets one process translate while the others wait. The
folder holds shards `shard-<first position>.jsonl` of `{"index": ..., "translation": ...}` rows, each written whole
(a temporary file renamed) as soon as it is done, so a killed run loses at most one shard (`--distill_shard_size`
sentences) and the next run continues after the last shard written, with the same result as an uninterrupted run.

Sentences are translated in batches of `--distill_batch_size`, longest first (ordered by their length in the
teacher's tokens, ties in dataset order; the dataset's order is restored at the end), by beam search
(`--distill_num_beams`, default 4) of at most `--max_target_length` new tokens, inputs cut at `--max_source_length`.

The engine (`--distill_engine`): `pytorch`, the teacher's `generate` (on the GPU when there is one), or `onnx`, the
teacher exported by `hf_simple_attn.deploy.export.export_onnx` and decoded by `OnnxSeq2SeqModel` in ONNX Runtime on
the CPU (Marian and hf_simple_attn seq2seq teachers; a Marian one is exported as the `base` layout, which computes
what Marian computes). `auto` (the default) takes PyTorch on a GPU; on a CPU it takes ONNX when onnxruntime and
onnxscript are installed, the teacher is of a kind that exports and at least `ONNX_MIN_SENTENCES` sentences remain
to translate, else PyTorch. (At opus-mt size on 2 cores, ONNX decodes batches of 64 by beam search of 4 about 1.6×
as fast as PyTorch, `benchmarks/results/deployment_engine.json` against `deployment.json`'s `base/eager`; the export
took 85 s on a busy machine, which about 1,700 sentences repay.) An export that fails under `auto` falls back to
PyTorch with a warning. The engine is not part of the cache's key: both run the same beam search on the same logits,
up to floating-point rounding, and the manifest lists the engines that wrote its shards.
"""

import hashlib
import importlib.util
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock, Timeout
from huggingface_hub import ModelCard
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import CONFIG_NAME, cached_file

from ..modeling.configuration_simple_attn import SimpleAttnMarianConfig
from ..modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from ..modeling.pipeline_translation import recorded_languages
from ..recipes.convert import convert_marian_checkpoint
from ..recipes.model_setup import load_pretrained_tokenizer
from ..recipes.translation_task import DataTrainingArguments, source_and_target_texts


logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "HF_SIMPLE_ATTN_DISTILL_CACHE"
ENGINES = ("auto", "pytorch", "onnx")
# Teachers the ONNX engine exports: the package's own seq2seq models, and Marian ones (as the `base` layout).
ONNX_MODEL_TYPES = ("marian", SimpleAttnMarianConfig.model_type)
# `auto` exports the teacher to ONNX for this many sentences to translate or more (see the module docstring).
ONNX_MIN_SENTENCES = 2000
MANIFEST_NAME = "manifest.json"
SHARD_GLOB = "shard-*.jsonl"
# A teacher folder's files that decide its translations: weights, configs, tokenizer files.
TEACHER_FILE_SUFFIXES = (".safetensors", ".bin", ".json", ".spm", ".model")


@dataclass
class DistillationArguments:
    """Sequence-level distillation: train on a teacher's translations of the training sources."""

    distill_from: str | None = field(
        default=None,
        metadata={
            "help": "A teacher (Hub name or folder of a seq2seq checkpoint) whose translations of the training "
            "sources replace the training targets; validation and test keep their references. Its languages (and, "
            "for a student with a pretrained tokenizer, its vocabulary) must be the run's. Cached on disk and "
            "resumed (hf_simple_attn.deploy.distill)."
        },
    )
    distill_num_beams: int = field(default=4, metadata={"help": "Beams of the teacher's beam search."})
    distill_batch_size: int = field(default=32, metadata={"help": "Sentences the teacher translates at a time."})
    distill_shard_size: int = field(
        default=1024,
        metadata={"help": "Translations written to the cache at a time: the most a killed run loses."},
    )
    distill_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": f"Where the teacher's translations are cached (default: ${CACHE_DIR_ENV}, else "
            "~/.cache/hf_simple_attn/distill), one folder per teacher, data and settings."
        },
    )
    distill_engine: str = field(
        default="auto",
        metadata={
            "help": "How the teacher translates: pytorch (generate, on the GPU if there is one), onnx (ONNX Runtime "
            "on the CPU; Marian and hf_simple_attn teachers) or auto: PyTorch on a GPU, else ONNX when installed, "
            f"the teacher exports and {ONNX_MIN_SENTENCES:,} or more sentences remain, else PyTorch.",
            "choices": list(ENGINES),
        },
    )

    def __post_init__(self):
        for name in ("distill_num_beams", "distill_batch_size", "distill_shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name}: expected a positive integer, got {getattr(self, name)}")
        if self.distill_engine not in ENGINES:
            raise ValueError(f"--distill_engine: expected one of {list(ENGINES)}, got {self.distill_engine!r}")


def default_cache_dir() -> Path:
    """`$HF_SIMPLE_ATTN_DISTILL_CACHE`, else `~/.cache/hf_simple_attn/distill`."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "hf_simple_attn" / "distill")


def distill_training_split(
    train_dataset, distill_args: DistillationArguments, data_args: DataTrainingArguments, model_args, progress=False
):
    """`train_dataset` with its target texts replaced by the teacher's translations of its sources (cached, resumed:
    `distill_translations`), after the teacher's languages and vocabulary are checked against the run's."""
    teacher = distill_args.distill_from
    load_kwargs = teacher_load_kwargs(model_args)
    teacher_tokenizer = AutoTokenizer.from_pretrained(teacher, **load_kwargs)
    teacher_config = AutoConfig.from_pretrained(teacher, **load_kwargs)
    check_teacher_languages(teacher, teacher_config, teacher_tokenizer, data_args)
    student_tokenizer_name = model_args.tokenizer_name or model_args.model_name_or_path
    if student_tokenizer_name is not None:
        check_teacher_vocabulary(
            teacher, teacher_tokenizer, load_pretrained_tokenizer(model_args), student_tokenizer_name
        )
    sources, _ = source_and_target_texts(train_dataset, data_args)
    translations, folder = distill_translations(
        sources, teacher_tokenizer, teacher_config, distill_args, data_args, load_kwargs, progress
    )
    empty = sum(1 for text in translations if not text)
    logger.info(
        "Training targets: %d translations by %s (cached in %s)%s",
        len(translations),
        teacher,
        folder,
        f"; {empty} of them empty" if empty else "",
    )
    target_lang = data_args.target_lang

    def replace_target(row, index):
        return {"translation": {**row["translation"], target_lang: translations[index]}}

    return train_dataset.map(
        replace_target,
        with_indices=True,
        new_fingerprint=f"distilled-{folder.name}",
        desc="Replacing the training targets by the teacher's translations",
    )


def teacher_load_kwargs(model_args) -> dict:
    """What loading the teacher shares with loading the student: the Hub cache, token and remote code permission."""
    return {
        "cache_dir": model_args.cache_dir,
        "token": model_args.token,
        "trust_remote_code": model_args.trust_remote_code,
    }


def language_code(code: str) -> str:
    """The primary subtag of a language code, lower case: `en_US`, `en-us` and `EN` are `en`."""
    return code.replace("_", "-").split("-")[0].lower()


def teacher_languages(teacher: str, config, tokenizer) -> tuple[str | None, str | None, str]:
    """(source, target, where they are recorded) of the teacher: its config's or tokenizer's `source_lang` /
    `target_lang`, else the two languages of a folder's model card (the training scripts' cards list source and
    target); (None, None, "") when nothing records them."""
    source, target = recorded_languages(config, tokenizer)
    if (source, target) != (None, None):
        return source, target, "its config or tokenizer"
    card = Path(teacher) / "README.md"
    if card.is_file():
        languages = ModelCard.load(card).data.language
        if isinstance(languages, list) and len(languages) == 2:
            return languages[0], languages[1], "its model card"
    return None, None, ""


def check_teacher_languages(teacher: str, config, tokenizer, data_args: DataTrainingArguments) -> None:
    """Refuse a teacher that records other languages than the run's `--source_lang` / `--target_lang`. Codes are
    compared by their primary subtag; a two-letter code and a three-letter one (ISO 639-1 and 639-3) are not
    compared."""
    source, target, where = teacher_languages(teacher, config, tokenizer)
    for recorded, wanted in ((source, data_args.source_lang), (target, data_args.target_lang)):
        if recorded is None:
            continue
        recorded_code, wanted_code = language_code(recorded), language_code(wanted)
        if len(recorded_code) != len(wanted_code):
            logger.info(
                "--distill_from %s: its language %r is not compared with the run's %r", teacher, recorded, wanted
            )
        elif recorded_code != wanted_code:
            raise ValueError(
                f"--distill_from {teacher}: the teacher translates {source or '?'} to {target or '?'} ({where}); "
                f"this run translates {data_args.source_lang} to {data_args.target_lang} (--source_lang / "
                "--target_lang). Distil from a teacher of the run's languages."
            )


def check_teacher_vocabulary(teacher: str, teacher_tokenizer, student_tokenizer, student_name: str) -> None:
    """Refuse a teacher whose tokenizer's vocabulary (tokens and ids) is not the student's."""
    teacher_vocab, student_vocab = teacher_tokenizer.get_vocab(), student_tokenizer.get_vocab()
    if teacher_vocab == student_vocab:
        return
    only_teacher = sorted(set(teacher_vocab) - set(student_vocab))
    only_student = sorted(set(student_vocab) - set(teacher_vocab))
    if only_teacher or only_student:
        detail = f"tokens only the teacher has: {only_teacher[:5]}, only the student has: {only_student[:5]}"
    else:
        detail = "the same tokens under other ids"
    raise ValueError(
        f"--distill_from {teacher}: its tokenizer's vocabulary ({len(teacher_vocab):,} entries) is not the student's "
        f"({student_name}, {len(student_vocab):,} entries; {detail}). Distil from a teacher with the student's "
        "tokenizer, or let the student train its own (leave out --model_name_or_path and --tokenizer_name)."
    )


def teacher_fingerprint(teacher: str, load_kwargs: dict) -> dict:
    """What identifies the teacher's weights: a folder's absolute path and the size and modification time of its
    files (`TEACHER_FILE_SUFFIXES`), or a Hub name and the commit its cached files come from."""
    folder = Path(teacher)
    if folder.is_dir():
        files = {
            path.name: [path.stat().st_size, path.stat().st_mtime_ns]
            for path in sorted(folder.iterdir())
            if path.is_file() and path.suffix in TEACHER_FILE_SUFFIXES
        }
        return {"path": str(folder.resolve()), "files": files}
    config_file = cached_file(teacher, CONFIG_NAME, cache_dir=load_kwargs["cache_dir"], token=load_kwargs["token"])
    return {"hub_id": teacher, "commit": Path(config_file).parent.name}


def texts_fingerprint(texts: list[str]) -> str:
    """The SHA-256 of the texts, in order."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def choose_engine(requested: str, teacher: str, model_type: str, remaining: int, on_gpu: bool) -> str:
    """The engine that translates `remaining` sentences: "pytorch" or "onnx", by the rule of the module docstring."""
    exportable = model_type in ONNX_MODEL_TYPES
    if requested == "onnx" and not exportable:
        raise ValueError(
            f"--distill_engine onnx: the ONNX engine exports {' and '.join(ONNX_MODEL_TYPES)} teachers; {teacher} is a "
            f"{model_type!r} model. Use --distill_engine pytorch (or auto)."
        )
    if requested != "auto":
        return requested
    onnx_installed = all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnxscript"))
    if not on_gpu and onnx_installed and exportable and remaining >= ONNX_MIN_SENTENCES:
        return "onnx"
    return "pytorch"


def load_teacher(teacher: str, engine: str, requested: str, work_dir: str, load_kwargs: dict):
    """(the teacher as a model with `generate`, the engine it runs on): loaded with `AutoModelForSeq2SeqLM` (on the
    GPU when there is one) or exported to ONNX in `work_dir` (a PyTorch model again, with a warning, when the export
    of an `auto` choice fails)."""
    model = AutoModelForSeq2SeqLM.from_pretrained(teacher, **load_kwargs).eval()
    if engine == "onnx":
        from .export import OnnxSeq2SeqModel, export_onnx  # needs onnx, an optional dependency (the `export` extra)

        if not isinstance(model, SimpleAttnMarianMTModel):
            model = convert_marian_checkpoint(model)  # the `base` layout: Marian's own computation
        try:
            return OnnxSeq2SeqModel(export_onnx(model, work_dir)), "onnx"
        except Exception as error:  # the exporter fails in many ways (unsupported operators, tracing errors, ...)
            if requested == "onnx":
                raise
            logger.warning(
                "--distill_engine auto: exporting %s to ONNX failed (%s); translating with PyTorch", teacher, error
            )
    return model.to("cuda" if torch.cuda.is_available() else "cpu"), "pytorch"


def translate_batch(model, tokenizer, texts: list[str], data_args: DataTrainingArguments, num_beams: int) -> list[str]:
    """The teacher's translations of `texts`: beam search of `num_beams`, at most --max_target_length new tokens."""
    batch = tokenizer(
        texts, max_length=data_args.max_source_length, truncation=True, padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        generated = model.generate(
            input_ids=batch["input_ids"].to(model.device),
            attention_mask=batch["attention_mask"].to(model.device),
            num_beams=num_beams,
            max_new_tokens=data_args.max_target_length,
        )
    return [text.strip() for text in tokenizer.batch_decode(generated.cpu(), skip_special_tokens=True)]


def length_order(tokenizer, sources: list[str], max_source_length: int) -> list[int]:
    """The indices of `sources`, longest first in the teacher's tokens (ties in dataset order)."""
    lengths = [len(ids) for ids in tokenizer(sources, max_length=max_source_length, truncation=True)["input_ids"]]
    return sorted(range(len(sources)), key=lambda index: (-lengths[index], index))


def read_shards(folder: Path) -> list[tuple[int, str]]:
    """The (index, translation) rows of the shards written so far, in order; a ValueError for shards that do not
    follow each other (a damaged cache)."""
    rows = []
    for path in sorted(folder.glob(SHARD_GLOB)):
        start = int(path.stem.split("-")[1])
        if start != len(rows):
            raise ValueError(
                f"{path}: starts at position {start}, not {len(rows)}; the cache is damaged: delete {folder}"
            )
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows.append((row["index"], row["translation"]))
    return rows


def write_shard(folder: Path, start: int, indices: list[int], translations: list[str]) -> None:
    """One shard, written whole: a temporary file renamed."""
    path = folder / f"shard-{start:09d}.jsonl"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(
        "".join(
            json.dumps({"index": index, "translation": text}, ensure_ascii=False) + "\n"
            for index, text in zip(indices, translations)
        ),
        encoding="utf-8",
    )
    os.replace(temporary, path)


def distill_translations(
    sources: list[str],
    teacher_tokenizer,
    teacher_config,
    distill_args: DistillationArguments,
    data_args: DataTrainingArguments,
    load_kwargs: dict,
    progress: bool = False,
) -> tuple[list[str], Path]:
    """(the teacher's translation of each of `sources`, in order; the cache folder they are in): read from the
    cache, the missing ones translated and written shard by shard (see the module docstring)."""
    teacher = distill_args.distill_from
    identity = {
        "teacher": teacher_fingerprint(teacher, load_kwargs),
        "source_lang": data_args.source_lang,
        "target_lang": data_args.target_lang,
        "generation": {
            "num_beams": distill_args.distill_num_beams,
            "max_new_tokens": data_args.max_target_length,
            "max_source_length": data_args.max_source_length,
        },
        "data": {"examples": len(sources), "sha256": texts_fingerprint(sources)},
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    folder = Path(distill_args.distill_cache_dir or default_cache_dir()) / key
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(f"{folder}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.info("Waiting for another process that translates into %s", folder)
        lock.acquire()
    try:
        manifest = read_manifest(folder, identity, teacher, teacher_tokenizer)
        rows = read_shards(folder)
        if len(rows) < len(sources):
            rows = translate_missing(
                sources,
                rows,
                folder,
                manifest,
                teacher_tokenizer,
                teacher_config,
                distill_args,
                data_args,
                load_kwargs,
                progress,
            )
        translations = dict(rows)
        if len(rows) != len(sources) or sorted(translations) != list(range(len(sources))):
            raise ValueError(f"{folder}: its shards do not hold one translation per source; delete the folder")
        if not manifest["complete"]:
            manifest["complete"] = True
            write_manifest(folder, manifest)
    finally:
        lock.release()
    return [translations[index] for index in range(len(sources))], folder


def read_manifest(folder: Path, identity: dict, teacher: str, teacher_tokenizer) -> dict:
    """The folder's manifest, written now if it has none: what decides the translations (`identity`), the teacher's
    tokenizer, the engines used and whether every translation is written."""
    path = folder / MANIFEST_NAME
    if path.is_file():
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if {name: manifest.get(name) for name in identity} != identity:
            raise ValueError(f"{path}: written for other settings than this run's; delete {folder}")
        return manifest
    manifest = {
        **identity,
        "teacher_name": teacher,
        "teacher_tokenizer": {"class": type(teacher_tokenizer).__name__, "entries": len(teacher_tokenizer)},
        "engines": [],
        "complete": False,
    }
    write_manifest(folder, manifest)
    return manifest


def write_manifest(folder: Path, manifest: dict) -> None:
    temporary = folder / f"{MANIFEST_NAME}.tmp"
    temporary.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, folder / MANIFEST_NAME)


def translate_missing(
    sources, rows, folder, manifest, teacher_tokenizer, teacher_config, distill_args, data_args, load_kwargs, progress
) -> list[tuple[int, str]]:
    """`rows` (the translations in the cache) completed: the other sources translated in length order, batch by
    batch, and written shard by shard."""
    order = length_order(teacher_tokenizer, sources, data_args.max_source_length)
    if [index for index, _ in rows] != order[: len(rows)]:
        raise ValueError(f"{folder}: its shards follow another order than this data's; delete the folder")
    teacher, done = distill_args.distill_from, len(rows)
    engine = choose_engine(
        distill_args.distill_engine, teacher, teacher_config.model_type, len(sources) - done, torch.cuda.is_available()
    )
    rows = list(rows)
    with tempfile.TemporaryDirectory(prefix="distill-onnx-") as work_dir:
        model, engine = load_teacher(teacher, engine, distill_args.distill_engine, work_dir, load_kwargs)
        # Every batch bounds its length by `max_new_tokens`; a checkpoint's own `max_length` would make `generate`
        # warn at each batch that both are set.
        model.generation_config.max_length = None
        if engine not in manifest["engines"]:
            manifest["engines"].append(engine)
            write_manifest(folder, manifest)
        bar = tqdm(
            total=len(sources), initial=done, unit="sentence", desc=f"Translating with {teacher}", disable=not progress
        )
        for start in range(done, len(sources), distill_args.distill_shard_size):
            shard = order[start : start + distill_args.distill_shard_size]
            translations = []
            for first in range(0, len(shard), distill_args.distill_batch_size):
                batch = [sources[index] for index in shard[first : first + distill_args.distill_batch_size]]
                translations += translate_batch(
                    model, teacher_tokenizer, batch, data_args, distill_args.distill_num_beams
                )
                bar.update(len(batch))
            write_shard(folder, start, shard, translations)
            rows += zip(shard, translations)
        bar.close()
    return rows


def distillation_summary(distill_args: DistillationArguments) -> dict:
    """The model card's Training rows of a distilled run (none for another run)."""
    if distill_args.distill_from is None:
        return {}
    return {
        "training targets": f"translations by `{distill_args.distill_from}` (sequence-level distillation, "
        f"beam {distill_args.distill_num_beams}); validation and test against the references"
    }


__all__ = [
    "DistillationArguments",
    "choose_engine",
    "distill_training_split",
    "distill_translations",
    "distillation_summary",
]
