"""Every ```python and ```bash block of README.md and docs/**/*.md runs in CI, or has its flags checked (issue 30).

What happens to a block is said by `<!-- ci: ... -->` lines directly above its fence (HTML comments: invisible on
GitHub and in the MkDocs site); a block without one runs as it is. One marker per line, several lines allowed:

- `<!-- ci: short FLAGS / replace 'OLD' 'NEW' -->`: too long for CI; CI runs this short form. `--flag VALUE` (or a
  bare `--flag`) in a bash block replaces the value at every place the block has that flag, or, where it has none, is
  appended to the block's first command that has `--` options (before its `#` comment); `replace 'OLD' 'NEW'` (any
  language, shell quoting) replaces literal text, and must match.
- `<!-- ci: network REASON -->`, `<!-- ci: gpu REASON -->`: needs the network (the Hub, a public data set, a package
  registry) or a GPU: not run. Each command's `--flags` must be options of what it calls (a training, study or
  benchmark script's argparse/HfArgumentParser parser, the `hf-simple-attn` subcommand's, `torchrun`'s,
  `accelerate launch`'s, `mkdocs`'s) and every repository path it names must exist; a python block must compile and
  its imports must succeed.
- `<!-- ci: skip REASON -->`: not run for the stated reason (a multi-hour study, a full-size benchmark, CI's own
  commands); checked as a network block is.
- `<!-- ci: from PAGE: PATH -->`: before this block, copy PATH (e.g. `runs/hc-sa-en-de`) from the folder where PAGE's
  blocks ran (PAGE runs first if it has not).
- `<!-- ci: module NAME -->`: a python block that is a module of the package (relative imports) runs as module NAME,
  in a process of its own.

How blocks run: one test per page; its blocks run in page order in one temporary folder (the working directory), so
later blocks find what earlier ones wrote. `training` there is a link to the repository's `training/`, so
`python training/run_translation.py ...` resolves, and `python`, `hf-simple-attn` and `torchrun` are this
interpreter's (wrappers on PATH). Bash blocks run with `bash -euo pipefail -c`, offline (`HF_HUB_OFFLINE=1`,
`HF_EVALUATE_OFFLINE=1`), at one thread (`OMP_NUM_THREADS=1`), with `$REPO` the repository root and a fresh
`HF_HOME`; python blocks run in this process (fresh globals, one thread), except `module` blocks. Nothing is written
into the repository. Fences in other languages (`text`, `json`, ...) are not code and not counted; a fence without a
language fails.

`block_counts()` is the count line that tests/conftest.py prints at the end of a session that ran these tests.
"""

import argparse
import ast
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parent.parent
CODE_LANGUAGES = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "console": "bash", "shell": "bash"}
CATEGORIES = ("short", "network", "gpu", "skip", "from", "module")
MARKER = re.compile(r"^\s*<!--\s*ci:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
# Repository folders whose paths a command may name (checked to exist when it is not run).
REPO_PATH = re.compile(r"^(?:training|scripts|studies|benchmarks|docs|tests)/[\w./-]+\.(?:py|sh|json)$")
# Flags whose value is a file the command writes (not checked to exist).
OUTPUT_FLAG = re.compile(r"^--(?:output\w*|chart)$")
# Links made in each page's folder, so that relative script paths resolve as from the repository root.
LINKED_FOLDERS = ("training",)
BLOCK_TIMEOUT = 600


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    language: str  # "python" or "bash"
    code: str
    markers: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def directives(self, name: str) -> list[str]:
        """The arguments of this block's `ci: NAME ...` markers."""
        return [marker.partition(" ")[2].strip() for marker in self.markers if marker.split(" ", 1)[0] == name]

    @property
    def category(self) -> str:
        """'skip', 'network', 'gpu', 'short' or 'run'."""
        for name in ("skip", "network", "gpu", "short"):
            if self.directives(name):
                return name
        return "run"

    @property
    def runs(self) -> bool:
        return self.category in ("run", "short")


# --- the Markdown --------------------------------------------------------------------------------------------


def parse_page(path: Path, root: Path = REPO) -> list[Block]:
    """The python and bash blocks of a Markdown page, with their `ci:` markers; a stale or unknown marker, or a fence
    without a language, raises ValueError."""
    page = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence, language = match.groups()
        start, body = index, []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][len(indent) :] if lines[index].startswith(indent) else lines[index])
            index += 1
        index += 1
        markers, above = [], start - 1
        while above >= 0 and MARKER.match(lines[above]):
            markers.insert(0, MARKER.match(lines[above]).group(1))
            above -= 1
        if not language:
            raise ValueError(f"{page}:{start + 1}: a fence without a language (```text for output)")
        for marker in markers:
            if marker.split(" ", 1)[0] not in CATEGORIES:
                raise ValueError(f"{page}:{start + 1}: unknown marker `ci: {marker}` (known: {', '.join(CATEGORIES)})")
        if language.lower() not in CODE_LANGUAGES:
            if markers:
                raise ValueError(f"{page}:{start + 1}: `ci:` marker above a ```{language} block, which is not code")
            continue
        block = Block(page, start + 1, CODE_LANGUAGES[language.lower()], "\n".join(body) + "\n", markers)
        for name in ("skip", "network", "gpu"):
            if name in [marker.split(" ", 1)[0] for marker in markers] and not all(block.directives(name)):
                raise ValueError(f"{block.where}: `ci: {name}` needs its reason")
        blocks.append(block)
    for line_number, line in enumerate(lines, 1):
        if MARKER.match(line) and not any(
            block.line - len(block.markers) <= line_number < block.line for block in blocks
        ):
            raise ValueError(f"{page}:{line_number}: a `ci:` marker that is not directly above a code block")
    return blocks


def doc_pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def all_blocks(root: Path = REPO) -> list[Block]:
    return [block for page in doc_pages(root) for block in parse_page(page, root)]


def block_counts(root: Path = REPO) -> str:
    """The count line: blocks run (and how many in short form), checked without running, skipped."""
    blocks = all_blocks(root)
    count = {name: sum(block.category == name for block in blocks) for name in ("run", "short", "network", "gpu")}
    skipped = sum(block.category == "skip" for block in blocks)
    return (
        f"doc blocks: {count['run'] + count['short']} run ({count['short']} in short form), "
        f"{count['network'] + count['gpu']} network-or-GPU flag-checked ({count['gpu']} GPU; python ones: imports), "
        f"{skipped} skipped with a stated reason (flag-checked too)"
    )


# --- short forms ------------------------------------------------------------------------------------------------


def short_form(block: Block) -> str:
    """The code CI runs for `block`: the block itself, or its `ci: short` form."""
    code = block.code
    for directive in block.directives("short"):
        tokens = shlex.split(directive)
        flags: list[tuple[str, str | None]] = []
        while tokens:
            token = tokens.pop(0)
            if token == "replace":
                if len(tokens) < 2:
                    raise ValueError(f"{block.where}: `replace` needs 'OLD' 'NEW'")
                old, new = tokens.pop(0), tokens.pop(0)
                if old not in code:
                    raise ValueError(f"{block.where}: short form: {old!r} is not in the block")
                code = code.replace(old, new)
            elif token.startswith("--"):
                value = tokens.pop(0) if tokens and not tokens[0].startswith("--") and tokens[0] != "replace" else None
                flags.append((token, value))
            else:
                raise ValueError(f"{block.where}: short form: expected --flag or replace, got {token!r}")
        if flags:
            if block.language != "bash":
                raise ValueError(f"{block.where}: flag overrides are for bash blocks; use replace 'OLD' 'NEW'")
            code = override_flags(code, flags, block.where)
    return code


def override_flags(code: str, flags: list[tuple[str, str | None]], where: str) -> str:
    code = re.sub(r"[ \t]*\\\n[ \t]*", " ", code)
    appended = []
    for flag, value in flags:
        pattern = re.compile(rf"(?<!\S){re.escape(flag)}(?=[\s=]|$)((?:=|\s+)(?!--)(?:'[^']*'|\"[^\"]*\"|\S+))?")
        if pattern.search(code):
            if value is not None:
                code = pattern.sub(lambda match: f"{flag} {shlex.quote(value)}", code)
        else:
            appended.append(flag if value is None else f"{flag} {shlex.quote(value)}")
    if appended:
        lines = code.split("\n")
        target = next((i for i, line in enumerate(lines) if re.search(r"(?<!\S)--\w", strip_comment(line))), None)
        if target is None:
            raise ValueError(f"{where}: short form: no command with -- options to append {appended} to")
        line = lines[target]
        end = command_end(line)
        lines[target] = f"{line[:end].rstrip()} {' '.join(appended)}{' ' if end < len(line) else ''}{line[end:]}"
        code = "\n".join(lines)
    return code


def unquoted_positions(line: str):
    """(index, character) of `line` outside quotes."""
    quote = None
    for index, character in enumerate(line):
        if quote:
            if character == quote:
                quote = None
        elif character in "'\"":
            quote = character
        else:
            yield index, character


def command_end(line: str) -> int:
    """Where a line's first command ends: at an unquoted `#` comment, `&&`, `||`, `;` or `|`."""
    for index, character in unquoted_positions(line):
        if character == "#" and (index == 0 or line[index - 1].isspace()):
            return index
        if character in ";|&":
            return index
    return len(line)


def strip_comment(line: str) -> str:
    for index, character in unquoted_positions(line):
        if character == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


# --- checking flags without running ------------------------------------------------------------------------------


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a bash block as token lists: continuation lines joined, here-document bodies and comments
    dropped, split at `&&`, `||`, `;` and `|`."""
    lines, commands, heredoc_end = code.replace("\\\n", " ").split("\n"), [], None
    for line in lines:
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", strip_comment(line))
        if heredoc:
            heredoc_end = heredoc.group(1)
            line = line[: heredoc.start()]
        parts, start = [], 0
        for index, character in unquoted_positions(line):
            if character in ";|&":
                parts.append(line[start:index])
                start = index + 1
        parts.append(line[start:])
        for part in parts:
            tokens = shlex.split(part, comments=True)
            if tokens and re.match(r"^\w+=.*\$\(", tokens[0]):
                continue  # an assignment from a command substitution
            while tokens and re.match(r"^\w+=", tokens[0]):
                tokens.pop(0)
            if tokens:
                commands.append(tokens)
    return commands


class CapturedParser(Exception):
    def __init__(self, parser):
        super().__init__("parser captured")
        self.parser = parser


def capture_parser(run) -> argparse.ArgumentParser:
    """The first argparse parser that `run()` parses with (the call is stopped there): a script's own parser, whether
    built with argparse or HfArgumentParser, without running the script."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        raise CapturedParser(self)

    argparse.ArgumentParser.parse_known_args = capture
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    try:
        run()
    except CapturedParser as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    raise AssertionError("no argument parser was used")


PARSERS: dict[str, object] = {}


def script_parser(script: str) -> argparse.ArgumentParser:
    """The parser of a repository script (`training/run_translation.py`, `benchmarks/...`, `studies/...`)."""
    if script not in PARSERS:
        path = REPO / script

        def run():
            sys.argv[:] = [str(path)]
            sys.path.insert(0, str(path.parent))
            runpy.run_path(str(path), run_name="__main__")

        PARSERS[script] = capture_parser(run)
    return PARSERS[script]


def cli_parser() -> argparse.ArgumentParser:
    if "hf-simple-attn" not in PARSERS:
        from hf_simple_attn.cli import build_parser

        PARSERS["hf-simple-attn"] = build_parser()
    return PARSERS["hf-simple-attn"]


def subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def unknown_flags(options: set[str], arguments: list[str]) -> list[str]:
    """The `-x` / `--flag` (or `--flag=value`) tokens of `arguments` that are not among `options` (exact names: no
    abbreviations)."""
    unknown = []
    for token in arguments:
        if token.startswith("-") and not re.match(r"^-\d", token) and token != "-":
            name = token.split("=", 1)[0]
            if name not in options:
                unknown.append(name)
    return unknown


def is_script(token: str) -> bool:
    return token.endswith(".py") and (REPO / token).is_file()


def command_problems(tokens: list[str], written: set[str]) -> list[str]:
    """What is wrong with one command that is not run: unknown flags of what it calls, repository paths that neither
    exist nor are `written` by an earlier command of the block (the value of an `--output...` flag; this command's
    are added)."""
    problems = []
    for previous, token in zip(["", *tokens], tokens):
        if OUTPUT_FLAG.match(previous):
            written.add(token)
        elif REPO_PATH.match(token) and token not in written and not (REPO / token).exists():
            problems.append(f"{token}: no such file in the repository")
    program, arguments = tokens[0], tokens[1:]
    checks: list[tuple[str, set[str], list[str]]] = []  # (what, its options, the arguments to check)
    if program in ("python", "python3") and arguments and arguments[0] == "-m":
        module, rest = arguments[1], arguments[2:]
        if module == "hf_simple_attn.cli":
            program, arguments = "hf-simple-attn", rest
        elif module == "torch.distributed.run":
            program, arguments = "torchrun", rest
        elif module == "mkdocs":
            program, arguments = "mkdocs", rest
        else:
            return problems + [f"python -m {module}: no flag check for this module"]
    if program in ("python", "python3"):
        if arguments and is_script(arguments[0]):
            checks.append((arguments[0], set(script_parser(arguments[0])._option_string_actions), arguments[1:]))
        elif arguments and arguments[0].endswith(".py"):
            problems.append(f"{arguments[0]}: no such script in the repository")
    elif program in ("torchrun", "accelerate"):
        if program == "accelerate":
            if not arguments or arguments[0] != "launch":
                return problems + [f"accelerate {' '.join(arguments[:1])}: only `accelerate launch` is checked"]
            from accelerate.commands.launch import launch_command_parser

            launcher, arguments = launch_command_parser(), arguments[1:]
        else:
            from torch.distributed.run import get_args_parser

            launcher = get_args_parser()
        split = next((i for i, token in enumerate(arguments) if token.endswith(".py")), None)
        if split is None or not is_script(arguments[split]):
            return problems + [f"{program}: no repository script to launch"]
        checks.append(
            (f"{program} {' '.join(arguments[:1])}", set(launcher._option_string_actions), arguments[:split])
        )
        script = arguments[split]
        checks.append((script, set(script_parser(script)._option_string_actions), arguments[split + 1 :]))
    elif program == "hf-simple-attn":
        subcommand = subcommand_parser(cli_parser(), arguments[0]) if arguments else None
        if subcommand is None:
            return problems + [f"hf-simple-attn {' '.join(arguments[:1])}: no such subcommand"]
        checks.append((f"hf-simple-attn {arguments[0]}", set(subcommand._option_string_actions), arguments[1:]))
    elif program == "mkdocs":
        from mkdocs.__main__ import cli

        command = cli.commands.get(arguments[0]) if arguments else None
        if command is None:
            return problems + [f"mkdocs {' '.join(arguments[:1])}: no such command"]
        options = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
        checks.append((f"mkdocs {arguments[0]}", options | {"--help", "-h"}, arguments[1:]))
    elif program in ("bash", "sh", "source", "."):
        if arguments and not (REPO / arguments[0]).is_file():
            problems.append(f"{arguments[0]}: no such script in the repository")
    for what, options, checked in checks:
        problems += [f"{flag}: not an option of {what}" for flag in unknown_flags(options, checked)]
    return problems


def check_without_running(block: Block) -> None:
    """A block that is not run: its commands' flags and paths (bash), or its syntax and imports (python)."""
    if block.language == "bash":
        written: set[str] = set()
        problems = [problem for tokens in shell_commands(block.code) for problem in command_problems(tokens, written)]
        assert not problems, f"{block.where} ({block.category}): " + "; ".join(problems)
        return
    tree = ast.parse(block.code, filename=block.where)
    imports = ast.Module(
        body=[node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))], type_ignores=[]
    )
    try:
        exec(compile(imports, block.where, "exec"), {"__name__": "__doc_block__"})
    except Exception:
        pytest.fail(f"{block.where} ({block.category}): its imports fail:\n{traceback.format_exc(limit=-3)}")


# --- running ------------------------------------------------------------------------------------------------------


def wrappers(folder: Path) -> Path:
    """A bin folder whose `python`, `hf-simple-attn` and `torchrun` are this interpreter's."""
    folder.mkdir(parents=True, exist_ok=True)
    scripts = {
        "python": f'exec "{sys.executable}" "$@"\n',
        "python3": f'exec "{sys.executable}" "$@"\n',
        "hf-simple-attn": f'exec "{sys.executable}" -m hf_simple_attn.cli "$@"\n',
        "torchrun": f'exec "{sys.executable}" -m torch.distributed.run "$@"\n',
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(0o755)
    return folder


def block_environment(session_dir: Path) -> dict[str, str]:
    environment = dict(os.environ)
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ACCELERATE_USE_CPU", "WORLD_SIZE"):
        environment.pop(variable, None)
    python_path = [str(REPO), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment.update(
        REPO=str(REPO),
        PATH=f"{wrappers(session_dir / 'bin')}{os.pathsep}{environment.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(python_path),
        HF_HUB_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        HF_HOME=str(session_dir / "hf_home"),
        HF_SIMPLE_ATTN_DATA_CACHE=str(session_dir / "data_cache"),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
    )
    return environment


def run_process(command: list[str], workdir: Path, environment: dict) -> subprocess.CompletedProcess:
    """`command` in the page's folder and environment, its output captured, within `BLOCK_TIMEOUT`."""
    return subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)


def run_bash(block: Block, code: str, workdir: Path, environment: dict) -> None:
    completed = run_process(["bash", "-euo", "pipefail", "-c", code], workdir, environment)
    if completed.returncode != 0:
        output = (completed.stdout + completed.stderr)[-4000:]
        pytest.fail(
            f"{block.where} (bash, {block.category}) exited with {completed.returncode}:\n{code}\n---\n{output}"
        )


def run_python(block: Block, code: str, workdir: Path, environment: dict) -> None:
    module = block.directives("module")
    if module:
        runner = textwrap.dedent(
            """
            import sys, types
            name, path = sys.argv[1], sys.argv[2]
            module = types.ModuleType(name)
            module.__package__ = name.rpartition(".")[0]
            sys.modules[name] = module
            exec(compile(open(path, encoding="utf-8").read(), sys.argv[3], "exec"), module.__dict__)
            """
        )
        source = workdir / f".block-{block.line}.py"
        source.write_text(code, encoding="utf-8")
        completed = run_process(
            [sys.executable, "-c", runner, module[0], str(source), block.where], workdir, environment
        )
        if completed.returncode != 0:
            pytest.fail(f"{block.where} (python module {module[0]}) failed:\n{completed.stderr[-4000:]}")
        return
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        exec(compile(code, block.where, "exec"), {"__name__": "__main__", "__file__": block.where})
    except Exception:
        pytest.fail(f"{block.where} (python, {block.category}) failed:\n{code}\n---\n{traceback.format_exc()[-4000:]}")
    finally:
        os.chdir(previous)
        import torch

        torch.set_num_threads(1)


class PageRuns:
    """Each page's blocks run once, in page order, in a folder of their own; a page that copies another's output
    (`ci: from`) finds it here."""

    def __init__(self, base: Path, root: Path = REPO):
        self.base, self.root = base, root
        self.environment = block_environment(base)
        self.done: dict[str, Path | BaseException] = {}

    def run(self, page: str) -> Path:
        if page not in self.done:
            try:
                self.done[page] = self._run(page)
            except BaseException as error:  # pytest's failure too: a page that needs this one reports it
                self.done[page] = error
                raise
        result = self.done[page]
        if isinstance(result, BaseException):
            pytest.fail(f"{page} failed earlier: {str(result).splitlines()[0] if str(result) else result!r}")
        return result

    def _run(self, page: str) -> Path:
        workdir = self.base / "pages" / page.replace("/", "__")
        workdir.mkdir(parents=True)
        for name in LINKED_FOLDERS:
            (workdir / name).symlink_to(self.root / name, target_is_directory=True)
        for block in parse_page(self.root / page, self.root):
            for directive in block.directives("from"):
                provider, _, path = (part.strip() for part in directive.partition(":"))
                source = self.run(provider) / path
                assert source.exists(), f"{block.where}: {provider} wrote no {path}"
                if not (workdir / path).exists():
                    shutil.copytree(source, workdir / path)
            if not block.runs:
                check_without_running(block)
            elif block.language == "bash":
                run_bash(block, short_form(block), workdir, self.environment)
            else:
                run_python(block, short_form(block), workdir, self.environment)
        return workdir


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory):
    return PageRuns(tmp_path_factory.mktemp("doc_blocks"))


PAGES = [page.relative_to(REPO).as_posix() for page in doc_pages() if parse_page(page)]


@pytest.mark.parametrize("page", PAGES)
def test_the_blocks_of_the_page_run(page, page_runs):
    page_runs.run(page)


def test_every_code_fence_is_counted_and_marked_consistently():
    blocks = all_blocks()
    assert len(blocks) >= 40, block_counts()
    for block in blocks:
        if block.category == "short":
            assert short_form(block) != block.code, f"{block.where}: its short form changes nothing"
    line = block_counts()
    assert re.fullmatch(r"doc blocks: \d+ run \(\d+ in short form\), \d+ network-or-GPU .*", line), line


# --- the checks can fail -------------------------------------------------------------------------------------------


def write_page(folder: Path, text: str) -> Path:
    (folder / "docs").mkdir(exist_ok=True)
    page = folder / "docs" / "page.md"
    page.write_text(textwrap.dedent(text), encoding="utf-8")
    return page


def test_a_failing_block_fails_its_page(tmp_path):
    write_page(
        tmp_path,
        """\
        # Page

        ```bash
        echo "first" > out.txt
        ```

        ```python
        assert open("out.txt").read() == "first\\n"  # the bash block's output, in the same folder
        raise RuntimeError("this example is broken")
        ```
        """,
    )
    (tmp_path / "training").mkdir()
    runs = PageRuns(tmp_path / "runs", root=tmp_path)
    with pytest.raises(
        pytest.fail.Exception, match=r"docs/page.md:7 \(python, run\) failed:(.|\n)*this example is broken"
    ):
        runs.run("docs/page.md")
    write_page(tmp_path, "```bash\ntrue\nfalse\necho never\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"docs/page.md:1 \(bash, run\) exited with 1"):
        PageRuns(tmp_path / "runs2", root=tmp_path).run("docs/page.md")


def test_an_unknown_flag_in_a_network_block_fails_the_flag_check(tmp_path):
    page = write_page(
        tmp_path,
        """\
        <!-- ci: network WMT16 from the Hub -->
        ```bash
        python training/run_translation.py --dataset_name wmt16 --max_steps 10 \\
          --no_such_flag 3 --output_dir runs/x   # --hub_token in a comment is not checked
        hf-simple-attn export runs/x runs/y --format onnx --quantisation int8
        torchrun --nproc_per_node 8 --no_such_launcher_flag training/run_glue.py --task_name cola
        ```
        """,
    )
    [block] = parse_page(page, tmp_path)
    assert block.category == "network" and not block.runs
    with pytest.raises(AssertionError) as failure:
        check_without_running(block)
    message = str(failure.value)
    assert message.startswith("docs/page.md:2 (network): ")
    assert "--no_such_flag: not an option of training/run_translation.py" in message
    assert "--quantisation: not an option of hf-simple-attn export" in message
    assert "--no_such_launcher_flag: not an option of torchrun" in message
    for accepted in ("--dataset_name", "--max_steps", "--output_dir", "--format", "--nproc_per_node", "--task_name"):
        assert f"{accepted}:" not in message


def test_short_forms_replace_append_and_must_match():
    block = Block(
        "docs/page.md",
        3,
        "bash",
        "python training/run_translation.py --max_steps 600 \\\n  --output_dir runs/x  # a comment\nhf-simple-attn x\n",
        ["short --max_steps 2 --max_train_samples 16 replace runs/x runs/y"],
    )
    assert short_form(block) == (
        "python training/run_translation.py --max_steps 2 --output_dir runs/y --max_train_samples 16 # a comment\n"
        "hf-simple-attn x\n"
    )
    stale = Block("docs/page.md", 3, "python", "print(1)\n", ["short replace 'print(2)' 'print(3)'"])
    with pytest.raises(ValueError, match="docs/page.md:3: short form: 'print\\(2\\)' is not in the block"):
        short_form(stale)


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- ci: skip too long -->\n```text\noutput\n```\n", "not code"),
        ("<!-- ci: skip -->\n```bash\ntrue\n```\n", "needs its reason"),
        ("<!-- ci: network the Hub -->\n\n```bash\ntrue\n```\n", "not directly above a code block"),
        ("```\nls\n```\n", "without a language"),
    ],
)
def test_markers_must_sit_on_code_blocks_and_skips_need_a_reason(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        parse_page(write_page(tmp_path, text), tmp_path)
