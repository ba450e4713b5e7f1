"""Rebuild the embedded English-German corpus in ``hf_simple_attn/data/embedded``.

The corpus is ``build_libreoffice_help("de")`` with its default settings: its validation and
test splits are exactly that build's, and its train split is the first ``--train-size``
examples of that build's train split (which is ordered by hash, i.e. a fixed shuffle).
A model trained on the full build therefore never sees the embedded test sentences.

Needs apt-get and dpkg-deb (Debian/Ubuntu) and access to the Debian package archive; the
output is byte-identical between runs on the same package version::

    PYTHONPATH=. python scripts/build_embedded_corpus.py --cache-dir /tmp/hf_simple_attn_data
"""

import argparse
import gzip
import json
from pathlib import Path

from hf_simple_attn.data.corpora import (
    EMBEDDED_CORPUS_NAME,
    EMBEDDED_DIR,
    EMBEDDED_TARGET_LANG,
    build_libreoffice_help,
    default_cache_dir,
)
from hf_simple_attn.data.fetch import deb_field, download_deb, unpack_deb


SOURCE_PACKAGES = ("libreoffice-help-en-us", f"libreoffice-help-{EMBEDDED_TARGET_LANG}")


def write_jsonl_gz(rows: list[dict], path: Path) -> None:
    """Write rows as gzipped JSON lines with a zero timestamp, so reruns give identical bytes."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed:
        for row in rows:
            compressed.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def licence_stanza(cache_dir: Path) -> str:
    """The ``Files: *`` stanza (licence and its notices) of the English help package's copyright file."""
    copyright_file = unpack_deb(SOURCE_PACKAGES[0], cache_dir) / "usr/share/doc" / SOURCE_PACKAGES[0] / "copyright"
    stanzas = copyright_file.read_text(encoding="utf-8").split("\n\n")
    return next(stanza for stanza in stanzas if stanza.startswith("Files: *"))


def notice_text(cache_dir: Path, counts: dict[str, int], train_size: int) -> str:
    versions = "\n".join(
        f"  - {package} {deb_field(download_deb(package, cache_dir), 'Version')}" for package in SOURCE_PACKAGES
    )
    sizes = "\n".join(f"  - {EMBEDDED_CORPUS_NAME}.{split}.jsonl.gz: {count} pairs" for split, count in counts.items())
    return f"""\
LibreOffice help English-German parallel corpus (excerpt)
==========================================================

Source
  Paragraphs of the LibreOffice 7.4 help pages, as shipped in the Debian packages
{versions}
  Upstream: LibreOffice, The Document Foundation, and contributors.

Licence
  Mozilla Public License 2.0 (MPL-2.0), https://mozilla.org/MPL/2.0/ .
  The packages' copyright file states, for all files:

{licence_stanza(cache_dir)}

How the files were made (scripts/build_embedded_corpus.py)
  1. apt-get download both packages (no install) and unpack them with dpkg-deb -x.
  2. Pair paragraphs and headings of usr/share/libreoffice/help/{{en-US,de}}/text/**.html
     by (page, element id, occurrence); strip the markup, keeping the default variant of
     platform-dependent text.
  3. Drop empty, untranslated (identical), over 100-word and length-mismatched (>3x) pairs.
  4. Deduplicate on the normalised English text and split by a SHA-256 hash of it:
     the 500 lowest hashes are the test split, the next 500 validation, the rest train;
     train keeps its first {train_size} examples in hash order.
  Rows are {{"translation": {{"en": ..., "de": ...}}}}.

Files
{sizes}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="where raw packages are kept")
    parser.add_argument("--output-dir", type=Path, default=EMBEDDED_DIR)
    parser.add_argument("--train-size", type=int, default=20_000)
    args = parser.parse_args()

    corpus = build_libreoffice_help(EMBEDDED_TARGET_LANG, cache_dir=args.cache_dir)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, dataset in corpus.items():
        rows = dataset.select(range(min(args.train_size, len(dataset)))) if split == "train" else dataset
        pairs = [{"translation": {"en": row["translation"]["en"], "de": row["translation"]["de"]}} for row in rows]
        write_jsonl_gz(pairs, args.output_dir / f"{EMBEDDED_CORPUS_NAME}.{split}.jsonl.gz")
        counts[split] = len(pairs)
    (args.output_dir / "NOTICE").write_text(notice_text(args.cache_dir, counts, args.train_size), encoding="utf-8")
    print(", ".join(f"{split}: {count}" for split, count in counts.items()), "->", args.output_dir)


if __name__ == "__main__":
    main()
