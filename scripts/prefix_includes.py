#!/usr/bin/env python3
"""Meson install step: make the installed headers self-contained under one -I<prefix>/include.

In the source tree the headers include each other by folder ("core/tensor.h", "nn/module.h");
installed under <includedir>/seqgrad/ they would need <includedir>/seqgrad itself on the include
path, where their core/, nn/, models/ folders could clash with a user's own. This rewrites those
includes to <seqgrad/core/tensor.h> in the installed copies (each file replaced atomically).

usage: prefix_includes.py INCLUDE_SUBDIR   (relative to the install prefix, e.g. include/seqgrad)
"""
import os
import re
import sys
import tempfile

FOLDERS = ("core", "ops", "dist", "nn", "optim", "models", "tools")
INCLUDE = re.compile(r'^(\s*#\s*include\s+)"((?:%s)/[^"]+)"' % "|".join(FOLDERS), re.M)


def rewrite(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = INCLUDE.sub(r"\1<seqgrad/\2>", text)
    if new == text:
        return False
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".prefix_includes.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(new)
    os.chmod(tmp, os.stat(path).st_mode & 0o777)
    os.replace(tmp, path)
    return True


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    prefix = os.environ.get("MESON_INSTALL_DESTDIR_PREFIX")
    if not prefix:
        print("prefix_includes.py: MESON_INSTALL_DESTDIR_PREFIX is not set (run it from meson install)",
              file=sys.stderr)
        return 2
    root = os.path.join(prefix, sys.argv[1])
    if not os.path.isdir(root):
        print(f"prefix_includes.py: no installed headers at {root}", file=sys.stderr)
        return 1
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith((".h", ".hpp")):
                rewrite(os.path.join(folder, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
