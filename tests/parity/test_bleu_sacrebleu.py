#!/usr/bin/python3
# Parity: seqgrad::text::corpus_bleu and corpus_chrf (through tests/parity/bleu_cli) against
# sacrebleu.corpus_bleu and sacrebleu.corpus_chrf (chrF2 defaults) on real corpora and on tricky
# synthetic lines, digit for digit. Usage:
#   .venv/bin/python3 tests/parity/test_bleu_sacrebleu.py BUILD/tests/parity/bleu_cli [SHARED_DATA_DIR]
# scripts/setup.sh --tests installs sacrebleu into the project's .venv (Debian bookworm has no
# python3-sacrebleu package). Without sacrebleu the script exits 77
# (meson's "skipped").
import os
import random
import subprocess
import sys
import tempfile

try:
    import sacrebleu
except ImportError:
    print("sacrebleu is not installed for this Python; skipping BLEU parity")
    sys.exit(77)


def read_lines(path):
    # Split on '\n' only, as the C++ read_lines does (str.splitlines would also split on \x85 etc.).
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def perturb(lines, seed, p_drop=0.15, p_swap=0.10, p_case=0.05):
    """Drop words, swap neighbours and flip the case of some words; uses only rng.random()."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = [w for w in line.split(" ") if rng.random() >= p_drop]
        for i in range(len(words) - 1):
            if rng.random() < p_swap:
                words[i], words[i + 1] = words[i + 1], words[i]
        words = [w.upper() if rng.random() < p_case else w for w in words]
        out.append(" ".join(words))
    return out


SYNTHETIC_HYP = [
    "The cat sat on the mat.",
    "It costs $3.50, i.e. 1,000.5 units (roughly) -- 5-4 win!",
    "&quot;Quoted&quot; &amp; &lt;tagged&gt; <skipped> text",
    "Ein Mädchen mit ÄRMELN läuft\u00a0über die Straße\u202f!",
    "L\u2019homme «\u202fparle\u202f» : vite ; non ?",
    "ŽENA hraje na KYTARU\u200b\u200b v parku.",
    "",
    "ΣΟΦΙΑ and İstanbul and ẞ with\u2009thin\u3000spaces\x0bvt\x0cff\x85nel",
    "numbers 3.14.15 and 2,3,4 and a.b,c",
    "trailing spaces and tabs \t ",
    "zero overlap entirely different words here",
]
SYNTHETIC_REF = [
    "The cat is sitting on the mat.",
    "It costs $3.50, i.e. 1,000.5 units (approximately) - a 5-4 win!",
    "\"Quoted\" & <tagged> text",
    "Ein Mädchen mit Ärmeln läuft über die Straße!",
    "L'homme « parle » : vite ; non ?",
    "Žena hraje na kytaru v parku.",
    "An empty hypothesis above.",
    "σοφια and i̇stanbul and ß with thin spaces vt ff nel",
    "numbers 3.14.15 and 2,3,4 and a.b,c",
    "trailing spaces and tabs",
    "nothing in common",
]


def run_cli(cli, hyps, refs, flags, tmp):
    hyp_path, ref_path = os.path.join(tmp, "hyp.txt"), os.path.join(tmp, "ref.txt")
    for path, lines in ((hyp_path, hyps), (ref_path, refs)):
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("".join(line + "\n" for line in lines))
    out = subprocess.run([cli, hyp_path, ref_path, *flags], capture_output=True, text=True,
                         encoding="utf-8", check=True).stdout.split("\n")
    return (out[0], out[1]), (out[2], out[3])


def main():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} BLEU_CLI [SHARED_DATA_DIR]")
    cli = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    data = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
        "SEQGRAD_SHARED_DATA", os.path.join(here, "..", "..", "..", "shared", "data"))
    m30k = os.path.join(data, "multi30k")

    sets = []
    for lang, seed in (("en", 1), ("de", 2), ("fr", 3), ("cs", 4)):
        ref = read_lines(os.path.join(m30k, f"test2016.{lang}"))
        sets.append((f"test2016.{lang} vs perturbed copy", perturb(ref, seed), ref))
    ref = read_lines(os.path.join(m30k, "test2016.en"))
    sets.append(("test2016.en vs itself", ref, ref))
    sets.append(("test2016.en, every 2nd line empty", [r if i % 2 else "" for i, r in enumerate(ref)], ref))
    val = read_lines(os.path.join(m30k, "val.de"))[:1000]
    sets.append(("val.de vs test2016.de (unrelated)", val, read_lines(os.path.join(m30k, "test2016.de"))))
    fra = [line.split("\t") for line in read_lines(os.path.join(data, "fra-eng", "fra.txt"))[50000:52001]]
    fr = [cols[1] for cols in fra]
    sets.append(("fra.txt French line i vs line i+1", fr[:-1], fr[1:]))
    sets.append(("synthetic tricky lines", SYNTHETIC_HYP, SYNTHETIC_REF))
    sets.append(("exp smoothing: no 3-gram or 4-gram match",
                 ["the cat the dog sat", "a b"], ["the cat a dog sat down", "a c"]))
    sets.append(("no overlap at all", ["a b c d"] * 3, ["e f g h"] * 3))
    sets.append(("all hypotheses empty", [""] * 3, ["e f g h"] * 3))
    sets.append(("chrF: references shorter than 6 characters, one empty", ["abc de", "x", "ab"], ["abd", "", "abcdefgh"]))
    sets.append(("chrF: repeated characters clip", ["aaaaaaa bbbb", "ééé ü"], ["aaa b", "é ü ü"]))

    configs = [([], {}), (["--lowercase"], {"lowercase": True}),
               (["--tokenize", "none"], {"tokenize": "none"}),
               (["--lowercase", "--tokenize", "none"], {"lowercase": True, "tokenize": "none"})]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, hyps, refs in sets:
            for flags, kwargs in configs:
                bleu = sacrebleu.corpus_bleu(hyps, [refs], **kwargs)
                got_bleu, got_chrf = run_cli(cli, hyps, refs, flags, tmp)
                checks = [("BLEU", (f"{bleu.score:.6f}", str(bleu)), got_bleu)]
                if "tokenize" not in kwargs:  # chrF has no tokenizer: once per case setting
                    chrf = sacrebleu.metrics.CHRF(lowercase=kwargs.get("lowercase", False)).corpus_score(hyps, [refs])
                    checks.append(("chrF", (f"{chrf.score:.6f}", str(chrf)), got_chrf))
                label = f"{name} {' '.join(flags) or '(default)'}"
                for metric, want, got in checks:
                    if got == want:
                        passed += 1
                        print(f"ok   {metric} {label}: {got[1]}")
                    else:
                        failed += 1
                        print(f"FAIL {metric} {label}:\n  sacrebleu {want}\n  seqgrad   {got}")
    print(f"sacrebleu {sacrebleu.__version__}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
