"""Outside translation systems a study compares against, on the same splits and SacreBLEU signature.

Apertium (Debian: `apt-get install apertium apertium-eng-spa`) is the rule-based system an offline user would
otherwise pick for English-Spanish; it is an evaluation baseline only, and never needed by the tests.
"""

import shutil
import subprocess


# ISO 639-1 (our corpora) -> the ISO 639-3 codes of Apertium's language pairs.
APERTIUM_LANGUAGES = {"en": "eng", "es": "spa", "fr": "fra", "de": "deu", "ca": "cat", "pt": "por", "it": "ita"}


class Apertium:
    """`apertium -u <src>-<tgt>`: one output line per input line (`-u`: no `*` marks on unknown words)."""

    def pair(self, source_lang: str, target_lang: str) -> str:
        if source_lang not in APERTIUM_LANGUAGES or target_lang not in APERTIUM_LANGUAGES:
            raise ValueError(
                f"apertium: no language code for {source_lang!r}/{target_lang!r}; known: {sorted(APERTIUM_LANGUAGES)}"
            )
        return f"{APERTIUM_LANGUAGES[source_lang]}-{APERTIUM_LANGUAGES[target_lang]}"

    def available(self, source_lang: str, target_lang: str) -> bool:
        if shutil.which("apertium") is None:
            return False
        listed = subprocess.run(["apertium", "-l"], capture_output=True, text=True, check=False).stdout.split()
        return self.pair(source_lang, target_lang) in listed

    def install_hint(self, source_lang: str, target_lang: str) -> str:
        package = "apertium-" + self.pair(source_lang, target_lang)
        return f"apertium with the {self.pair(source_lang, target_lang)} pair is not installed (apt-get install apertium {package})"

    def describe(self) -> str:
        shown = subprocess.run(
            ["dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}=${Version}\n", "apertium*"],
            capture_output=True,
            text=True,
            check=False,
        )
        installed = [line.split(" ", 1)[1] for line in shown.stdout.splitlines() if line.startswith("installed ")]
        return " ".join(installed) or "apertium"

    def translate(self, sources: list[str], source_lang: str, target_lang: str) -> list[str]:
        lines = [" ".join(text.split()) for text in sources]  # one sentence per line, whatever its own breaks
        completed = subprocess.run(
            ["apertium", "-u", self.pair(source_lang, target_lang)],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
        output = completed.stdout[:-1] if completed.stdout.endswith("\n") else completed.stdout
        translations = output.split("\n")
        if len(translations) != len(lines):
            raise RuntimeError(f"apertium returned {len(translations)} lines for {len(lines)} sentences")
        return [text.strip() for text in translations]


BASELINES = {"apertium": Apertium()}
