"""MkDocs hooks (mkdocs.yml `hooks:`): the generated parts of the documentation, built from the code and the result
files at every build, so that no page holds a hand-copied copy of them.

- `<!-- presets:seq2seq -->`, `<!-- presets:encoder -->`: the preset catalogue, from
  `hf_simple_attn.modeling.presets`;
- `<!-- presets:family:KIND -->`: the presets that use attention family KIND anywhere in their layout;
- `<!-- families:table -->`: every registered attention family (`attention_registry.ATTENTION_FAMILIES`) with the
  sites, projections, options and paper its class declares, and its page: the one in `docs/families/` whose markers
  name its kind;
- `<!-- bibtex:KIND -->`: the BibTeX of family KIND's paper, its class's `citation` (the model cards cite the same);
- `<!-- benchmark:FILE.json -->`: the tables and target checks that `benchmarks/summarize.py` prints for
  `benchmarks/results/FILE.json`;
- `<!-- gpu:PRESET,PRESET -->`: those presets' row of `benchmarks/results/gpu.json` (the family pages), from
  `benchmarks/summarize.py`'s `gpu_presets`;
- `<!-- reference:package -->`: the names `hf_simple_attn` exports (`__all__`), each linked to its reference entry;
- `<!-- memos:table -->`: the memos' budget table (`hf_simple_attn.modeling.memo.MEMO_BUDGETS`), each memo with the
  modules of `hf_simple_attn/modeling/` that name it;
- maths (`$...$` inline, `$$...$$` displayed; `pymdownx.arithmatex` in generic mode) is rendered to MathML here,
  by `latex2mathml`, so that the browser lays it out with no script, font or stylesheet from anywhere; a formula it
  cannot convert (or converts leaving a TeX command behind) fails the build;
- the navigation lists every page of `docs/families/` under "Attention families", those `mkdocs.yml` does not name
  after those it does;
- the charts and result pages of the studies (`studies/results/**/*.png`, `studies/results/<study>/README.md`) and
  the benchmark charts (`benchmarks/results/*.png`) are added to the site at the same paths.

An unknown marker fails the build. The studies' tables are not made here: `python studies/summarize.py STUDY`
writes them into the `<!-- study:NAME -->` blocks of `docs/studies/*.md`.
"""

import contextlib
import html
import importlib.util
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files


REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- (presets|families|bibtex|benchmark|gpu|reference|memos):([A-Za-z0-9_.:,\-]+) -->")
SITE_LABELS = {"encoder_self": "encoder self", "decoder_self": "decoder self", "cross": "cross"}
FAMILIES_SECTION = "Attention families"


def on_config(config):
    """Add the family pages that `mkdocs.yml`'s nav does not name to its "Attention families" section, so that a new
    family's page needs no entry there."""
    section = next(
        entry[FAMILIES_SECTION] for entry in config["nav"] if isinstance(entry, dict) and FAMILIES_SECTION in entry
    )
    listed = {page if isinstance(page, str) else next(iter(page.values())) for page in section}
    for path in sorted((Path(config["docs_dir"]) / "families").glob("*.md")):
        page = f"families/{path.name}"
        if page not in listed:
            section.append(page)
    return config


def on_files(files: Files, config) -> Files:
    """Mount the studies' result pages and charts and the benchmark charts at their repository paths."""
    mounted = sorted((REPO / "studies" / "results").glob("*/README.md"))
    mounted += sorted((REPO / "studies" / "results").rglob("*.png"))
    mounted += sorted((REPO / "benchmarks" / "results").glob("*.png"))
    for path in mounted:
        uri = path.relative_to(REPO).as_posix()
        if files.get_file_from_path(uri) is None:
            files.append(File(uri, str(REPO), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        kind, name = match.groups()
        try:
            return GENERATORS[kind](name)
        except (KeyError, FileNotFoundError, ValueError) as error:
            raise PluginError(f"{page.file.src_uri}: cannot fill {match.group(0)}: {error}") from error

    return MARKER.sub(replace, markdown)


# --- maths ------------------------------------------------------------------------------------------------------

# What pymdownx.arithmatex writes in generic mode: \(...\) in a span, \[...\] in a div, the TeX HTML-escaped.
ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">\\[(\[](.*?)\\[)\]]</\1>', re.S)


def mathml(tex: str, display: str) -> str:
    """`tex` as MathML; ValueError where latex2mathml fails or leaves a command it does not know as text."""
    from latex2mathml.converter import convert

    try:
        output = convert(tex, display=display)
        element = ElementTree.fromstring(output)
    except Exception as error:  # latex2mathml raises its own exception types, or writes malformed XML
        raise ValueError(f"cannot convert {tex!r} to MathML: {error}") from error
    left = [text for node in element.iter() for text in (node.text, node.tail) if text and "\\" in text]
    if left:
        raise ValueError(f"cannot convert {tex!r} to MathML: {left[0]!r} is left as text")
    return output


def on_page_content(content: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        tag, tex = match.group(1), html.unescape(match.group(2)).strip()
        try:
            output = mathml(tex, "block" if tag == "div" else "inline")
        except ValueError as error:
            raise PluginError(f"{page.file.src_uri}: {error}") from error
        return f'<div class="arithmatex">{output}</div>' if tag == "div" else output

    return ARITHMATEX.sub(replace, content)


# --- the preset catalogue ---------------------------------------------------------------------------------------


def presets_module():
    from hf_simple_attn.modeling import presets

    return presets


def kinds_in(spec) -> list[str]:
    """The attention families a compact site spec uses (a bare kind, a group spec, groups, a per-layer list or a
    default/layers mapping); `none` and `dot` count too."""
    if spec is None or isinstance(spec, bool):
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, list):
        return [kind for item in spec for kind in kinds_in(item)]
    if "groups" in spec:
        return [kind for group in spec["groups"] for kind in kinds_in(group)]
    if "kind" in spec:
        return [spec["kind"]]
    found = kinds_in(spec.get("default", "dot")) if "default" in spec else ["dot"]
    return found + [kind for item in spec.get("layers", {}).values() for kind in kinds_in(item)]


def families_of(layout: dict) -> list[str]:
    """Families other than `dot` and `none` that a preset's layout uses, in order of first use."""
    kinds = [kind for site in SITE_LABELS for kind in kinds_in(layout.get(site, "dot"))]
    return [kind for kind in dict.fromkeys(kinds) if kind not in ("dot", "none")]


def compact(layout: dict) -> str:
    """The preset's layout as presets.py writes it (sites left out are `dot`; FFN switches included)."""
    if not layout:
        return "`{}` (every site `dot`)"
    return "`" + json.dumps(layout, ensure_ascii=False, separators=(", ", ": ")).replace("|", "\\|") + "`"


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def preset_table(model_kind: str, names: list[str] | None = None) -> str:
    presets = presets_module().PRESETS[model_kind]
    names = list(presets) if names is None else names
    lines = ["| preset | families | layout | what it is | source |", "|---|---|---|---|---|"]
    for name in names:
        preset = presets[name]
        families = ", ".join(f"`{kind}`" for kind in families_of(preset["layout"])) or "`dot`"
        lines.append(
            f"| `{name}` | {families} | {compact(preset['layout'])} | {cell(preset['description'])} | "
            f"{cell(preset['source'])} |"
        )
    return "\n".join(lines)


def presets_marker(name: str) -> str:
    if name in ("seq2seq", "encoder"):
        count = len(presets_module().PRESETS[name])
        return f"{count} presets.\n\n" + preset_table(name)
    if name.startswith("family:"):
        kind = name.removeprefix("family:")
        module = presets_module()
        from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES

        if kind not in ATTENTION_FAMILIES:
            raise ValueError(f"unknown attention family {kind!r}; registered: {sorted(ATTENTION_FAMILIES)}")
        parts = []
        for model_kind, label in (("seq2seq", "Seq2seq (Marian-style)"), ("encoder", "Encoder (BERT-style)")):
            presets = module.PRESETS[model_kind]
            names = [n for n, p in presets.items() if kind in families_of(p["layout"])]
            if names:
                parts += [f"**{label}**: {len(names)} presets.", "", preset_table(model_kind, names), ""]
        if not parts:
            raise ValueError(f"no preset uses {kind!r}")
        return "\n".join(parts)
    raise ValueError(f"unknown presets marker {name!r}")


# --- the families ---------------------------------------------------------------------------------------------


def family_pages(folder: Path = REPO / "docs" / "families") -> dict[str, str]:
    """Each attention family's page in `folder` (its file name): the page whose markers name the kind."""
    pages = {}
    for path in sorted(folder.glob("*.md")):
        for kind in re.findall(r"<!-- (?:presets:family|bibtex):(\w+) -->", path.read_text(encoding="utf-8")):
            pages.setdefault(kind, path.name)
    return pages


def families_marker(name: str) -> str:
    """The families table, for `docs/families/index.md` (its links are relative to that folder)."""
    if name != "table":
        raise ValueError(f"unknown families marker {name!r}")
    from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES

    pages = family_pages()
    lines = [
        "| `kind` | class | sites | query/key projections | options | paper |",
        "|---|---|---|---|---|---|",
    ]
    for kind, family in ATTENTION_FAMILIES.items():
        options = ", ".join(f"`{option}`" for option in family.option_names) or "none"
        name = f"[`{kind}`]({pages[kind]})" if kind in pages else f"`{kind}`"
        lines.append(
            f"| {name} | `{family.__module__.rsplit('.', 1)[-1]}.{family.__name__}` | "
            f"{', '.join(f'`{site}`' for site in family.sites)} | {'yes' if family.uses_query_key else 'no'} | "
            f"{options} | {cell(family.paper)} |"
        )
    return "\n".join(lines)


# --- BibTeX -------------------------------------------------------------------------------------------------------


def bibtex_marker(kind: str) -> str:
    from hf_simple_attn.modeling.attention_registry import get_attention_family

    citation = get_attention_family(kind).citation
    if not citation:
        raise ValueError(f"attention family {kind!r} declares no citation")
    return "```bibtex\n" + citation.strip() + "\n```"


# --- benchmark tables ---------------------------------------------------------------------------------------------


def benchmarks_summarize():
    spec = importlib.util.spec_from_file_location("benchmarks_summarize", REPO / "benchmarks" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmark_marker(file_name: str) -> str:
    path = REPO / "benchmarks" / "results" / file_name
    if path.suffix != ".json" or not path.is_file():
        raise FileNotFoundError(f"no benchmark results file {path.relative_to(REPO)}")
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        benchmarks_summarize().main([str(path)])
    environment = json.loads(path.read_text(encoding="utf-8")).get("environment", {})
    source = f"From `benchmarks/results/{file_name}`"
    if "command" in environment:
        source += f", written by `{environment['command']}`"
    details = [
        environment.get("date", "")[:10],
        f"torch {environment['torch']}" if "torch" in environment else "",
        f"transformers {environment['transformers']}" if "transformers" in environment else "",
        f"{environment['cpu_count']} × {environment.get('cpu', 'CPU')}" if "cpu_count" in environment else "",
    ]
    details = [detail for detail in details if detail]
    source += f" ({', '.join(details)})." if details else "."
    # In a div of their own: results tables keep each figure on one line and scroll sideways (docs/stylesheets).
    return f'{source}\n\n<div class="results" markdown="1">\n\n{output.getvalue().strip()}\n\n</div>'


def gpu_marker(names: str) -> str:
    """The rows of `names` from the committed GPU run, for a family page (the link is relative to docs/families/)."""
    data = json.loads((REPO / "benchmarks" / "results" / "gpu.json").read_text(encoding="utf-8"))
    intro, _, *table = benchmarks_summarize().gpu_presets(data, names.split(","))
    source = f"From `benchmarks/results/gpu.json` ({data['environment'].get('date', '')[:10]}; every model: "
    source += "[Benchmarks](../benchmarks.md#compiling-operators-per-step-and-the-gpu)). "
    return source + intro + '\n\n<div class="results" markdown="1">\n\n' + "\n".join(table) + "\n\n</div>"


# --- the API reference --------------------------------------------------------------------------------------------


def reference_marker(name: str) -> str:
    if name != "package":
        raise ValueError(f"unknown reference marker {name!r}")
    import inspect

    import hf_simple_attn

    lines = ["| name | what | defined in |", "|---|---|---|"]
    for export in hf_simple_attn.__all__:
        obj = getattr(hf_simple_attn, export)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            module, path = obj.__module__, f"{obj.__module__}.{obj.__qualname__}"
            summary = (inspect.getdoc(obj) or "").split("\n\n", 1)[0].replace("\n", " ")
            lines.append(f"| [`{export}`][{path}] | {cell(summary)} | `{module}` |")
        else:
            module = next(  # the module that assigns it, not one that imports it
                m.__name__
                for m in vars(hf_simple_attn.modeling).values()
                if inspect.ismodule(m) and re.search(rf"^{export}\b[^=\n]*=", inspect.getsource(m), re.M)
            )
            lines.append(f"| `{export}` | a `{type(obj).__name__}` | `{module}` |")
    return "\n".join(lines)


# --- the memos ----------------------------------------------------------------------------------------------------

MEMO_USE = re.compile(r'\b(?:memo_for|TensorMemo)\("(\w+)"\)')


def memo_users(folder: Path = REPO / "hf_simple_attn" / "modeling") -> dict[str, list[str]]:
    """The modules of `folder` that name each memo (`memo_for("name")`, `TensorMemo("name")`), by memo."""
    users = {}
    for path in sorted(folder.glob("*.py")):
        for name in dict.fromkeys(MEMO_USE.findall(path.read_text(encoding="utf-8"))):
            users.setdefault(name, []).append(path.name)
    return users


def memos_marker(name: str) -> str:
    if name != "table":
        raise ValueError(f"unknown memos marker {name!r}")
    from hf_simple_attn.modeling.memo import MEMO_BUDGETS

    users = memo_users()
    lines = ["| memo | budget | one per | holds | used in |", "|---|---|---|---|---|"]
    for memo, budget in MEMO_BUDGETS.items():
        modules = ", ".join(f"`{module}`" for module in users.get(memo, [])) or "none"
        lines.append(
            f"| `{memo}` | {budget.max_bytes / 2**20:g} MiB | {'layer' if budget.per_layer else 'process'} | "
            f"{cell(budget.holds)} | {modules} |"
        )
    return "\n".join(lines)


GENERATORS = {
    "presets": presets_marker,
    "families": families_marker,
    "bibtex": bibtex_marker,
    "benchmark": benchmark_marker,
    "gpu": gpu_marker,
    "reference": reference_marker,
    "memos": memos_marker,
}
