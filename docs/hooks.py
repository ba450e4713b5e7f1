"""MkDocs hooks (mkdocs.yml `hooks:`): the generated parts of the documentation, built from the code and the result
files at every build, so that no page holds a hand-copied copy of them.

- `<!-- presets:seq2seq -->`, `<!-- presets:encoder -->`: the preset catalogue, from
  `hf_simple_attn.modeling.presets`;
- `<!-- presets:family:KIND -->`: the presets that use attention family KIND anywhere in their layout;
- `<!-- families:table -->`: every registered attention family (`attention_registry.ATTENTION_FAMILIES`) with the
  sites, projections, options and paper its class declares, and its page: the one in `docs/families/` whose markers
  name its kind; `<!-- families:summary -->`: what each family's head computes (its class's `summary`), for the
  home page (the README holds the same table, which a test compares);
- `<!-- bibtex:KIND -->`: the BibTeX of family KIND's paper, its class's `citation` (the model cards cite the same);
- `<!-- benchmark:FILE.json -->`: the tables and target checks that `benchmarks/summarize.py` prints for
  `benchmarks/results/FILE.json`;
- `<!-- gpu:PRESET,PRESET -->`: those presets' row of `benchmarks/results/gpu.json` (the family pages), from
  `benchmarks/summarize.py`'s `gpu_presets`;
- `<!-- choosing:PRESET,PRESET -->`: the "which family when" table (`docs/families/choosing.md`): per preset, its
  GPU figures (`gpu_preset_cells` of `benchmarks/results/gpu.json`), its CPU decoding ratio
  (`benchmarks/results/decoding_target.json`) and its test BLEU cells from the tables of the studies in
  `CHOOSING_STUDIES` (`studies/summarize.py`'s `docs_block`, as the studies' pages show them), with the sources;
- `<!-- reference:package -->`: the names `hf_simple_attn` exports (`__all__`), each linked to its reference entry;
- `<!-- reference:families -->`: a reference entry (mkdocstrings) for each registered attention family's class, under
  its kind, linked to its page; the families table links each class here;
- `<!-- reference:cli -->`: the `hf-simple-attn` command, from its parser (`hf_simple_attn.cli.build_parser`): every
  subcommand with its synopsis and a table of its arguments (values, defaults, help);
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

import argparse
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
MARKER = re.compile(r"<!-- (presets|families|bibtex|benchmark|gpu|choosing|reference|memos):([A-Za-z0-9_.:,\-]+) -->")
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
    """`table`: the families table, for `docs/families/index.md` (its links are relative to that folder);
    `summary`: what each family's head computes, for the home page."""
    from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES

    if name == "summary":
        return families_summary(ATTENTION_FAMILIES, "families/")
    if name != "table":
        raise ValueError(f"unknown families marker {name!r}")

    pages = family_pages()
    lines = [
        "| `kind` | class | sites | query/key projections | options | paper |",
        "|---|---|---|---|---|---|",
    ]
    for kind, family in ATTENTION_FAMILIES.items():
        options = ", ".join(f"`{option}`" for option in family.option_names) or "none"
        name = f"[`{kind}`]({pages[kind]})" if kind in pages else f"`{kind}`"
        entry = f"`{family.__module__.rsplit('.', 1)[-1]}.{family.__name__}`"
        lines.append(
            f"| {name} | [{entry}][{family.__module__}.{family.__qualname__}] | "
            f"{', '.join(f'`{site}`' for site in family.sites)} | {'yes' if family.uses_query_key else 'no'} | "
            f"{options} | {cell(family.paper)} |"
        )
    return "\n".join(lines)


def families_summary(families: dict, link_prefix: str) -> str:
    """What each family's head computes (its class's `summary`), the baseline `dot` last; the README holds the same
    table with `link_prefix="docs/families/"`, which a test compares."""
    pages = family_pages()
    lines = ["| family (`kind`) | what a head computes | sites | paper |", "|---|---|---|---|"]
    for kind, family in sorted(families.items(), key=lambda item: item[0] == "dot"):
        name = f"[`{kind}`]({link_prefix}{pages[kind]})" if kind in pages else f"`{kind}`"
        sites = "all" if len(family.sites) == 3 else " / ".join(site.replace("_", " ") for site in family.sites)
        paper = re.match(r".*?\d{4}", family.paper)
        lines.append(f"| {name} | {family.summary} | {sites} | {paper.group(0) if paper else family.paper} |")
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


# --- which family when ----------------------------------------------------------------------------------------

# The studies whose test BLEU the "which family when" table shows, each the table of `python studies/summarize.py
# STUDY`; its CPU decoding cell is benchmarks/summarize.py's `CPU_DECODING_CELL`.
CHOOSING_STUDIES = ("mt-headline-long", "mt-headline")


def studies_summarize():
    spec = importlib.util.spec_from_file_location("studies_summarize", REPO / "studies" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(table: str) -> dict[str, dict[str, str]]:
    """{first cell: {column: cell}} of a markdown table."""
    header, _, *lines = table.strip().splitlines()
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells))
    return rows


def study_bleu_cells(study_name: str, names: list[str]) -> tuple[dict, str, dict[str, str]]:
    """The study's training arguments, its docs page, and per preset its test BLEU (mean ± std over seeds), its
    difference from `base` (paired by seed) and its number of seeds, as the study's own table shows them."""
    from hf_simple_attn.studies.runner import load_study

    study, script = load_study(REPO / "studies" / f"{study_name}.json"), studies_summarize()
    rows = table_rows(script.docs_block(study).split("\n\n", 1)[0])  # the table, not the chart below it
    missing = [name for name in names if name not in rows]
    if missing:
        raise ValueError(f"not in the results of study {study_name}: {missing}")
    cells = {}
    for name in names:
        row, seeds = rows[name], len(rows[name]["seeds"].split(","))
        difference = "" if row["Δ vs base (bleu)"] == "-" else f", Δ {row['Δ vs base (bleu)']}"
        cells[name] = f"{row['test bleu']}{difference}, {seeds} seed{'s' if seeds > 1 else ''}"
    return study.arguments, script.docs_page(study, script.DOCS_DIR).name, cells


def choosing_marker(names: str) -> str:
    """The "which family when" table for `names` (links relative to docs/families/), and its sources."""
    names = names.split(",")
    summarize = benchmarks_summarize()
    results = REPO / "benchmarks" / "results"
    gpu_data = json.loads((results / "gpu.json").read_text(encoding="utf-8"))
    gpu_cells = summarize.gpu_preset_cells(gpu_data, names)
    memory = gpu_data["memory"]["models"]
    cpu_file, cpu_size, cpu_batch, cpu_beams = summarize.CPU_DECODING_CELL
    cpu_data = json.loads((results / cpu_file).read_text(encoding="utf-8"))
    cpu_cell = summarize.decoding_cell(cpu_data, cpu_size, cpu_batch, cpu_beams)
    if cpu_cell is None:
        raise ValueError(f"benchmarks/results/{cpu_file} has no cell {cpu_size}, batch {cpu_batch}, beams {cpu_beams}")
    studies = {study_name: study_bleu_cells(study_name, names) for study_name in CHOOSING_STUDIES}
    presets, pages = presets_module().PRESETS["seq2seq"], family_pages()
    lines = [
        "| preset | family | GPU training speed | GPU tokens per batch | GPU peak memory, training step "
        "| GPU greedy decoding, batch 64 | CPU greedy decoding, batch 64 | "
        + " | ".join(
            f"test BLEU, {arguments['max_steps']:,} steps ([{name}](../studies/{page}))"
            for name, (arguments, page, _) in studies.items()
        )
        + " |",
        "|---" * (7 + len(studies)) + "|",
    ]
    for name in names:
        kinds = families_of(presets[name]["layout"]) or ["dot"]
        family = ", ".join(f"[`{kind}`]({pages[kind]})" if kind in pages else f"`{kind}`" for kind in kinds)
        peak = memory.get(name, {}).get("peak_bytes")
        cpu_entry = cpu_cell["models"].get(name)
        row = [
            f"`{name}`",
            family,
            gpu_cells[name]["training tokens/s, eager"],
            gpu_cells[name]["tokens per batch"],
            f"{peak / 2**30:.2f} GiB" if peak else "-",
            gpu_cells[name]["greedy, batch 64, eager"],
            summarize.ratio(cpu_entry["speedup_vs_base"]) if cpu_entry else "-",
            *(cells[name] for _, _, cells in studies.values()),
        ]
        lines.append("| " + " | ".join(cell(text) for text in row) + " |")
    gpu_settings, device = gpu_data["settings"], gpu_data["environment"]["device"]
    cpu_settings, cpu_environment = cpu_data["settings"], cpu_data["environment"]
    sources = [
        f"- GPU columns: `benchmarks/results/gpu.json` ({gpu_data['environment']['date'][:10]}, {device['name']}, "
        f"size {gpu_settings['size']}, bf16, eager): ratios of medians to `base` in the same run; training speed in "
        f"target tokens/s at {gpu_settings['batch_size']} sentences of {gpu_settings['source_length']}"
        f"+{gpu_settings['target_length']} tokens, whose peak memory is the memory column; tokens per batch: the "
        f"largest training batch that fits in {gpu_settings['memory_cap_gib']:g} GiB; decoding: "
        f"{gpu_settings['new_tokens']} new tokens.",
        f"- CPU column: `benchmarks/results/{cpu_file}` ({cpu_environment['date'][:10]}, {cpu_environment['cpu_count']}"
        f" × {cpu_environment['cpu']}, {cpu_environment['torch_threads']} threads, PyTorch eager, size {cpu_size}): "
        f"sentences/s against `base`, median of {cpu_settings['repeats']} repeats (min-max of the paired ratios); "
        "`-`: not measured.",
        *(
            f"- test BLEU, {arguments['max_steps']:,} steps: `studies/results/{name}/` (d_model {arguments['d_model']}, "
            f"{arguments['encoder_layers']} + {arguments['decoder_layers']} layers, dataset `{arguments['dataset_name']}`"
            + (f" `{arguments['dataset_config_name']}`" if "dataset_config_name" in arguments else "")
            + f", batches of {arguments['per_device_train_batch_size']} sentences, beam {arguments['num_beams']}): "
            "mean ± std over seeds; Δ: the mean difference from `base` at the same seed."
            for name, (arguments, _, _) in studies.items()
        ),
    ]
    table = "\n".join(lines)
    return f'<div class="results" markdown="1">\n\n{table}\n\n</div>\n\n' + "\n".join(sources)


# --- the API reference --------------------------------------------------------------------------------------------


def reference_marker(name: str) -> str:
    generators = {"package": package_reference, "families": families_reference, "cli": cli_reference}
    if name not in generators:
        raise ValueError(f"unknown reference marker {name!r}")
    return generators[name]()


def package_reference() -> str:
    """The names `hf_simple_attn` exports, each linked to its reference entry."""
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


def families_reference() -> str:
    """A section per registered attention family, for `docs/reference/families.md`: its kind, its page and its
    class's reference entry (mkdocstrings), in the registry's order."""
    from hf_simple_attn.modeling.attention_registry import ATTENTION_FAMILIES

    pages = family_pages()
    parts = []
    for kind, family in ATTENTION_FAMILIES.items():
        page = (
            f"[its page](../families/{pages[kind]})" if kind in pages else "[Attention families](../families/index.md)"
        )
        parts += [
            f"## `{kind}`",
            "",
            f"Layouts name it `{kind}`; what it computes and its presets: {page}.",
            "",
            f"::: {family.__module__}.{family.__qualname__}",
            "    options:",
            "      heading_level: 3",
            "",
        ]
    return "\n".join(parts)


def cli_reference() -> str:
    """`hf-simple-attn`'s reference, from its parser (`hf_simple_attn.cli.build_parser`): a section per subcommand,
    with its synopsis and a table of its arguments (help, values, default)."""
    from hf_simple_attn.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    command_help = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = [
        parser.description,
        "",
        f"```text\n{synopsis(parser)}\n```",
        "",
        arguments_table(parser),
        "",
        "| command | what it does |",
        "|---|---|",
        *(f"| [`{name}`](#{name}) | {cell(command_help[name])} |" for name in commands.choices),
    ]
    for name, command in commands.choices.items():
        summary = cell(command_help[name])
        lines += [
            "",
            f"## `{name}` {{#{name}}}",
            "",
            f"{summary[:1].upper()}{summary[1:]}.",
            "",
            f"```text\n{synopsis(command)}\n```",
            "",
            arguments_table(command),
        ]
    return "\n".join(lines)


def cli_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a parser documents: positionals and options, not `--help` or the subcommands."""
    return [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
    ]


def argument_name(action: argparse.Action) -> str:
    return ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest.upper()}`"


def synopsis(parser: argparse.ArgumentParser) -> str:
    """`PROG POSITIONAL... --required VALUE... [options]`, shorter than argparse's usage (which lists choices)."""
    words = [parser.prog]
    for action in cli_arguments(parser):
        if not action.option_strings:
            words.append(action.dest.upper())
        elif action.required:
            words.append(f"{action.option_strings[0]} {action.dest.upper()}")
    if any(action.option_strings and not action.required for action in cli_arguments(parser)):
        words.append("[options]")
    if any(isinstance(action, argparse._SubParsersAction) for action in parser._actions):
        words.append("COMMAND ...")
    return " ".join(words)


def arguments_table(parser: argparse.ArgumentParser) -> str:
    lines = ["| argument | value | default | what |", "|---|---|---|---|"]
    for action in cli_arguments(parser):
        if action.choices:
            value = "one of " + ", ".join(f"`{choice}`" for choice in action.choices)
        elif action.nargs == 0:
            value = "none (a switch)"
        else:
            value = "text" if action.type in (None, str) else f"`{action.type.__name__}`"
        if action.required or not action.option_strings:
            default = "required"
        elif action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
            default = ""
        else:
            default = f"`{action.default}`"
        lines.append(f"| {argument_name(action)} | {value} | {default} | {cell(action.help or '')} |")
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
    "choosing": choosing_marker,
    "reference": reference_marker,
    "memos": memos_marker,
}
