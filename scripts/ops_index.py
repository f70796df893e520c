#!/usr/bin/env python3
"""Writes docs/ops.md, the index of seqgrad's ops, from ops/ops.h (the public op API).

Each `// ---- title (file)` line of ops.h starts a section; each declaration in it becomes a row:
the op's name, its signatures (overloads together) and the first sentence of its comment (the
comment on the same line, else the comment block above it, from the line that names the op).

usage: scripts/ops_index.py [--check] [REPO_ROOT]
  without --check: (re)writes REPO_ROOT/docs/ops.md
  --check: exits 1 with a diff when docs/ops.md differs from what ops.h gives (the test command
           runs this, so the index cannot go stale)
"""
import difflib
import pathlib
import re
import sys

SECTION = re.compile(r"^//\s*----\s*(.+?)\s*$")
COMMENT = re.compile(r"^//\s?(.*)$")
NAME = re.compile(r"\b(operator\s*\S+?|[A-Za-z_]\w*)\s*\($")
HEADER = ("# Op index\n\n"
          "[README](../README.md) · [guide](guide.md) · [adding an op](adding-an-op.md)\n\n"
          "The differentiable ops of `ops/ops.h` (`#include <seqgrad/ops/ops.h>`, namespace `seqgrad`),\n"
          "by family. Generated from `ops/ops.h` by `scripts/ops_index.py`; do not edit: the test\n"
          "command regenerates it and fails on a difference. Each op's forward, backward and math\n"
          "comment live together in the file its section names.\n")


def first_sentence(text: str) -> str:
    """Up to the first '.', ';' or ':' that ends a clause outside brackets."""
    depth = 0
    for i, c in enumerate(text):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and c in ".;:" and (i + 1 == len(text) or text[i + 1] == " "):
            return text[:i + (c == ".")].strip()
    return text.strip()


def section_title(text: str) -> str:
    title = first_sentence(text).rstrip(".")
    if title.count("(") > title.count(")"):  # the comment goes on past the line
        title = title[:title.rindex("(")].strip()
    return title


def declarations(lines):
    """Yields ('section', title) and ('op', name, signature, note) in file order."""
    comments = []  # the comment block right above the current line
    pending = ""   # a declaration spanning several lines, until its ';'
    for raw in lines:
        line = raw.strip()
        if pending or ("(" in line and not line.startswith("//")):
            pending = f"{pending} {line}".strip()
            if ";" in pending.partition("//")[0]:
                if not pending.startswith(("using ", "enum ", "#")):
                    yield from finish(pending, comments)
                pending, comments = "", []
            continue
        section = SECTION.match(line)
        comment = COMMENT.match(line)
        if section:
            yield ("section", section_title(section.group(1)))
            comments = []
        elif comment:
            comments.append(comment.group(1))
        else:
            comments = []


def finish(declaration: str, comments):
    code, _, trailing = declaration.partition("//")
    code = " ".join(code.split())
    head = code.split("(", 1)[0] + "("
    m = NAME.search(head)
    if not m:
        return
    name = m.group(1).replace(" ", "")
    note = trailing.strip()
    if not note and comments:
        own = [i for i, c in enumerate(comments) if re.match(rf"{re.escape(name)}\b", c)]
        block = comments[own[0] if own else 0:]
        # prose only: an indented comment line starts a formula or a shape list
        end = next((i for i in range(1, len(block)) if block[i].startswith(" ")), len(block))
        note = " ".join(c.strip() for c in block[:end])
        if own:  # "gru_layer: one layer ..." -> "one layer ..."
            note = note[len(name):].lstrip(" :")
    yield ("op", name, code.rstrip(";").strip(), first_sentence(note) if note else "")


def render(ops_h: pathlib.Path) -> str:
    out = [HEADER]
    rows = {}
    order = []

    def flush():
        for name in order:
            signatures, note = rows[name]
            cells = "<br>".join(f"`{s.replace('|', chr(92) + '|')}`" for s in signatures)
            out.append(f"| `{name.replace('|', chr(92) + '|')}` | {cells} | {note.replace('|', chr(92) + '|')} |\n")
        rows.clear()
        order.clear()

    for item in declarations(ops_h.read_text(encoding="utf-8").splitlines()):
        if item[0] == "section":
            flush()
            out.append(f"\n## {item[1]}\n\n| op | signatures | note |\n|---|---|---|\n")
            continue
        _, name, signature, note = item
        if name not in rows:
            rows[name] = ([], note)
            order.append(name)
        rows[name][0].append(signature)
        if note and not rows[name][1]:
            rows[name] = (rows[name][0], note)
    flush()
    return "".join(out)


def main(argv) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    text = render(root / "ops" / "ops.h")
    target = root / "docs" / "ops.md"
    if not check:
        target.write_text(text, encoding="utf-8")
        return 0
    current = target.read_text(encoding="utf-8") if target.exists() else ""
    if current == text:
        print("ops_index: docs/ops.md matches ops/ops.h")
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                               "docs/ops.md", "from ops/ops.h"))
    print("ops_index: docs/ops.md is stale; run scripts/ops_index.py and commit docs/ops.md")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
