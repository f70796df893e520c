#!/usr/bin/env python3
"""Every measured figure in the user docs links to its row in docs/results.md, and every link
between the docs leads somewhere.

Checks README.md, examples/README.md and docs/*.md (docs/results.md's figures, the rows
themselves, excepted). A measured figure is a number with a unit of time, size, share, speed-up or
score: `12 ms`, `3.5 s`, `13 min`, `75.5 MB`, `9.5%`, `2.18x`, `221 GFLOP/s`, `sacreBLEU 35.31`,
`6.2 M parameters`. It
passes only inside the text of a link to a results row, `[35.31](docs/results.md#default-preset)`,
whose anchor must exist, and every number in such a link's text must be a figure of that heading's
section of docs/results.md (its rows and notes, up to the next heading), written the same way
(thousands separators aside): a quoted figure cannot drift from its row, and a rounded or derived
one has to be recorded in the row first. Not checked (the rule for structural numbers): fenced code blocks tagged
with a programming language (```sh, ```cpp, ...: commands and code, whose sizes are inputs, not
results; the info string's first word is the language), ```text sample (or sample=lines) blocks (a program's output
that tests/install/check_doc_commands.py compares with a real run), inline code (`--max-seq 2048`),
and link targets. Other fenced blocks (program output) are checked: show output with its figures
elided (`…`) and link the row.

Links: every relative link in those files must name an existing file, and an anchor in it (a
heading of a .md file) must exist; so must every source file named in inline code by its path in
the repository (`models/seq2seq/checkpoint.cpp`, `tests/test_tools_cli.py`). Quoted code: a fenced block right after a line
`<!-- from PATH -->` must appear verbatim in the file PATH (so README's program is the example
the test command builds).

usage: check_docs_numbers.py REPO_ROOT
Prints every unlinked figure and broken link as FILE:LINE: ... and exits 1 when there is one.
"""
import pathlib
import re
import sys

CODE_LANGUAGES = {"sh", "bash", "console", "cpp", "c++", "c", "python", "cmake", "json", "meson"}
UNIT = (r"(?:ms|µs|us|ns|s|sec|min|minutes|h|hours|kB|KB|MB|GB|MiB|GiB|%|x|"
        r"GFLOP/s|tok/s|ms/step|ms/sent|us/op|µs/op|M parameters)")
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?:(?<![\w.\-/])|(?<=\d-)){NUMBER}\s?{UNIT}(?![\w/])"  # 12 ms, 9.5%, 2.18x, 221 GFLOP/s, 1.22-1.31x
    rf"|\b(?:sacreBLEU|BLEU|chrF)(?:\s+of)?\s+{NUMBER}"    # sacreBLEU 35.31
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
RESULTS_LINK = re.compile(r"\[([^\]]*)\]\((?:\.\./)?(?:docs/)?results\.md#([A-Za-z0-9_-]+)\)")
ANY_LINK_TARGET = re.compile(r"\]\([^)]*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
QUOTED_FROM = re.compile(r"^<!--\s*from\s+(\S+)\s*-->$")
NAMED_FILE = re.compile(r"`((?:core|ops|nn|optim|models|tools|tests|docs|scripts|examples|bench|dist|data|cmake)/"
                        r"[A-Za-z0-9_./-]*\.(?:cpp|h|py|sh|cu|cuh|md|build|c|txt|json))`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: pathlib.Path) -> set:
    found = set()
    fenced = False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        fenced ^= line.strip().startswith("```")
        m = None if fenced else HEADING.match(line)
        if m:
            found.add(slug(m.group(1)))
    return found


def sections(markdown: pathlib.Path) -> dict:
    """Each heading's anchor -> the text under it, up to the next heading (fenced blocks included)."""
    found, current, fenced = {}, None, False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        fenced ^= line.strip().startswith("```")
        m = None if fenced else HEADING.match(line)
        if m:
            current = slug(m.group(1))
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return {anchor: "\n".join(lines) for anchor, lines in found.items()}


def numbers(text: str) -> list:
    """The numbers in text as written, thousands separators dropped: '1,020 s' -> '1020'. A number
    that is part of a name (k0, H200, Multi30k, test2016) is not one."""
    return [n.replace(",", "") for n in re.findall(rf"(?<![\w.]){NUMBER}(?!x\w)(?![^\Wx])", text)]


def drifted(link_text: str, section: str):
    """The numbers of a results link's text that its section does not hold, or []."""
    held = set(numbers(section))
    return [n for n in numbers(link_text) if n not in held]


def broken_link(source: pathlib.Path, target: str):
    """Why a relative link from `source` leads nowhere, or None."""
    if re.match(r"^[a-z]+:", target):
        return None  # https:, mailto:
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    if not resolved.exists():
        return f"link to a missing file '{target}'"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"link to a missing heading '{target}'"
    return None


def checked_lines(path: pathlib.Path):
    """(line number, text) of the lines the rule checks: prose, tables and output blocks."""
    fence = None  # the open fence's language, "" for none
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            # the info string's first word is the language ("cpp file=myops.cpp"); a "sample" block
            # is a program's output that tests/install/check_doc_commands.py compares with a real run
            info = stripped[3:].strip().lower().split()
            fence = None if fence is not None else ("sample" if any(w.split("=")[0] == "sample" for w in info) else info[0] if info else "")
            continue
        if fence is None or (fence not in CODE_LANGUAGES and fence != "sample"):
            yield number, line


def stale_quotes(root: pathlib.Path, path: pathlib.Path) -> list:
    """Fenced blocks marked `<!-- from FILE -->` that FILE no longer contains."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        m = QUOTED_FROM.match(line.strip())
        if not m:
            continue
        source = root / m.group(1)
        start = number + 1  # the fence's opening line, 1-based
        if start > len(lines) or not lines[start - 1].startswith("```"):
            found.append(f"{path.relative_to(root)}:{number}: '<!-- from ... -->' is not followed by a fenced block")
            continue
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("```")), len(lines))
        block = "\n".join(lines[start:end])
        if not source.exists() or block not in source.read_text(encoding="utf-8"):
            found.append(f"{path.relative_to(root)}:{start}: the block quoted from {m.group(1)} "
                         f"is not in that file any more; copy it again")
    return found


def problems(root: pathlib.Path) -> list:
    results = root / "docs" / "results.md"
    files = [root / "README.md", root / "examples" / "README.md"] + sorted((root / "docs").glob("*.md"))
    found = []
    rows = sections(results) if results.exists() else {}
    for path in files:
        if not path.exists():
            continue
        name = path.relative_to(root)
        found += stale_quotes(root, path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in NAMED_FILE.finditer(line):
                if not (root / m.group(1)).exists():
                    found.append(f"{name}:{number}: names {m.group(1)}, which does not exist")
        for number, line in checked_lines(path):
            for m in LINK.finditer(INLINE_CODE.sub(" ", line)):
                why = broken_link(path, m.group(1))
                if why:
                    found.append(f"{name}:{number}: {why}")
            for m in RESULTS_LINK.finditer(INLINE_CODE.sub(" ", line)):
                quoted, anchor = m.group(1), m.group(2)
                wrong = drifted(quoted, rows.get(anchor, ""))
                if anchor in rows and wrong:
                    found.append(f"{name}:{number}: [{quoted}](results.md#{anchor}) quotes "
                                 f"{', '.join(wrong)}, which the section '{anchor}' of docs/results.md does not hold")
            if path == results:
                continue  # the rows themselves
            text = RESULTS_LINK.sub(" ", line)
            text = ANY_LINK_TARGET.sub("]", INLINE_CODE.sub(" ", text))
            for m in FIGURE.finditer(text):
                found.append(f"{name}:{number}: '{m.group(0)}' is not a link to a row of "
                             f"docs/results.md: {line.strip()}")
    return found


def self_test() -> list:
    """The value comparison on a made-up section (run before every check, so a check that passes
    everything fails): a quoted figure passes only when its section holds it."""
    section = "| 2026-12-01 | abc | 2 cores | `seqgrad eval` | sacreBLEU 36.39, 1,020 s, 9.5% on test2016, 1.22-1.31x |"
    cases = [("36.39", []), ("36.4", ["36.4"]), ("1,020 s", []), ("1020 s", []), ("9.5%", []), ("10%", ["10"]),
             ("1.22-1.31x faster", []), ("1.3x", ["1.3"]), ("1.31 x", []),
             ("sacreBLEU 36.39 and 38.05", ["38.05"]), ("time", []), ("2016", ["2016"])]
    return [f"check_docs_numbers.py: self-test: drifted({text!r}) = {drifted(text, section)}, expected {want}"
            for text, want in cases if drifted(text, section) != want]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    found = self_test() + problems(pathlib.Path(sys.argv[1]))
    for problem in found:
        print(problem)
    print(f"check_docs_numbers: {len(found)} problem(s)" if found else
          "check_docs_numbers: every measured figure links to docs/results.md, every link resolves")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
