// Corpus BLEU and chrF against golden numbers from the real sacreBLEU.
//
// Every expected number below was produced with sacrebleu 2.6.0 on Python 3.11
// (pip install --break-system-packages sacrebleu) as
//   b = sacrebleu.corpus_bleu(hyps, [refs], **kwargs)
//   print(repr(b.score), b.counts, b.totals, b.sys_len, b.ref_len, str(b))
// with kwargs {}, {"lowercase": True}, {"tokenize": "none"} or both, and the 13a token strings with
// sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()(line). tests/parity/test_bleu_sacrebleu.py
// reruns such comparisons live against the installed sacrebleu.
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/text/bleu.h"
#include "models/text/chrf.h"
#include "models/text/corpus.h"

using namespace seqgrad::text;
using Lines = std::vector<std::string>;
using Counts = std::array<int64_t, 4>;

namespace {

std::string data_path(const std::string& relative) {
  const char* env = std::getenv("SEQGRAD_SHARED_DATA");
  const std::string path = std::string(env ? env : "../shared/data") + "/" + relative;
  REQUIRE_MESSAGE(std::filesystem::exists(path),
                  "missing " << path << " (set SEQGRAD_SHARED_DATA)");
  return path;
}

struct Golden {
  BleuOptions options;
  double score;
  Counts correct, total;
  int64_t sys_len, ref_len;
  std::string line;  // str(BLEUScore)
};

void check_golden(const Lines& hyps, const Lines& refs, const Golden& g) {
  const BleuScore s = corpus_bleu(hyps, refs, g.options);
  CAPTURE(bleu_signature(g.options));
  CHECK(s.score == doctest::Approx(g.score).epsilon(1e-12));
  CHECK(s.correct == g.correct);
  CHECK(s.total == g.total);
  CHECK(s.sys_len == g.sys_len);
  CHECK(s.ref_len == g.ref_len);
  CHECK(s.format() == g.line);
}

constexpr BleuOptions kDefault{};
constexpr BleuOptions kLower{.lowercase = true};
constexpr BleuOptions kNone{.tokenize = BleuTokenize::none};
constexpr BleuOptions kLowerNone{.lowercase = true, .tokenize = BleuTokenize::none};

// The synthetic set of tests/parity/test_bleu_sacrebleu.py: entities, numbers, Unicode spaces
// (U+00A0, U+202F, U+2009, U+3000, VT, FF, U+0085, U+200B), upper-case Greek, İ, ẞ, an empty
// hypothesis and a hypothesis with no overlap.
const Lines kTrickyHyp = {
    "The cat sat on the mat.",
    "It costs $3.50, i.e. 1,000.5 units (roughly) -- 5-4 win!",
    "&quot;Quoted&quot; &amp; &lt;tagged&gt; <skipped> text",
    "Ein Mädchen mit ÄRMELN läuft\u00a0über die Straße\u202f!",
    "L\u2019homme «\u202fparle\u202f» : vite ; non ?",
    "ŽENA hraje na KYTARU\u200b\u200b v parku.",
    "",
    "ΣΟΦΙΑ and İstanbul and ẞ with\u2009thin\u3000spaces\x0bvt\x0c"
    "ff\u0085nel",
    "numbers 3.14.15 and 2,3,4 and a.b,c",
    "trailing spaces and tabs \t ",
    "zero overlap entirely different words here",
};
const Lines kTrickyRef = {
    "The cat is sitting on the mat.",
    "It costs $3.50, i.e. 1,000.5 units (approximately) - a 5-4 win!",
    "\"Quoted\" & <tagged> text",
    "Ein Mädchen mit Ärmeln läuft über die Straße!",
    "L'homme « parle » : vite ; non ?",
    "Žena hraje na kytaru v parku.",
    "An empty hypothesis above.",
    "σοφια and i\u0307stanbul and ß with thin spaces vt ff nel",
    "numbers 3.14.15 and 2,3,4 and a.b,c",
    "trailing spaces and tabs",
    "nothing in common",
};

}  // namespace

TEST_CASE("tokenize_13a: sacreBLEU's Tokenizer13a output") {
  CHECK(tokenize_13a("It costs $3.50, i.e. 1,000.5 units (roughly) -- 5-4 win!") ==
        "It costs $ 3.50 , i . e . 1,000.5 units ( roughly ) -- 5 - 4 win !");
  CHECK(tokenize_13a("&quot;Quoted&quot; &amp; &lt;tagged&gt; <skipped> text") ==
        "\" Quoted \" & < tagged > text");
  CHECK(tokenize_13a("L\u2019homme «\u202fparle\u202f» : vite ; non ?") ==
        "L\u2019homme « parle » : vite ; non ?");
  CHECK(tokenize_13a("numbers 3.14.15 and 2,3,4 and a.b,c") ==
        "numbers 3.14.15 and 2,3,4 and a . b , c");
  CHECK(tokenize_13a("Mädchen.Straße,x") == "Mädchen . Straße , x");
  CHECK(tokenize_13a("a..b") == "a . . b");
  CHECK(tokenize_13a("tabs\there\u00a0nbsp") == "tabs here nbsp");
}

TEST_CASE("corpus_bleu: simple sentences") {
  const Lines hyps = {"The cat sat on the mat.", "It is raining today!"};
  const Lines refs = {"The cat is sitting on the mat.", "It rains today!"};
  const std::string line13a =
      "BLEU = 35.36 75.0/50.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 12 ref_len = 12)";
  check_golden(hyps, refs,
               {kDefault, 35.355339059327385, {9, 5, 2, 1}, {12, 10, 8, 6}, 12, 12, line13a});
  check_golden(hyps, refs,
               {kLower, 35.355339059327385, {9, 5, 2, 1}, {12, 10, 8, 6}, 12, 12, line13a});
  check_golden(
      hyps, refs,
      {kNone,
       27.19393264843193,
       {7, 3, 1, 0},
       {10, 8, 6, 4},
       10,
       10,
       "BLEU = 27.19 70.0/37.5/16.7/12.5 (BP = 1.000 ratio = 1.000 hyp_len = 10 ref_len = 10)"});
}

TEST_CASE("corpus_bleu: exp smoothing and brevity penalty") {
  // No 3-gram or 4-gram matches: precisions 100/(2*3) and 100/(4*2); BP = exp(1 - 8/7).
  const Lines hyps = {"the cat the dog sat", "a b"};
  const Lines refs = {"the cat a dog sat down", "a c"};
  const BleuScore s = corpus_bleu(hyps, refs);
  check_golden(
      hyps, refs,
      {kDefault,
       24.0785655451027,
       {5, 2, 0, 0},
       {7, 5, 3, 2},
       7,
       8,
       "BLEU = 24.08 71.4/40.0/16.7/12.5 (BP = 0.867 ratio = 0.875 hyp_len = 7 ref_len = 8)"});
  CHECK(s.bp == doctest::Approx(0.8668778997501817).epsilon(1e-15));
  CHECK(s.precisions[2] == doctest::Approx(100.0 / 6));
  CHECK(s.precisions[3] == doctest::Approx(12.5));
}

TEST_CASE("corpus_bleu: tricky Unicode, entities and numbers") {
  check_golden(
      kTrickyHyp, kTrickyRef,
      {kDefault,
       65.77582011148161,
       {75, 59, 46, 35},
       {91, 81, 71, 61},
       91,
       95,
       "BLEU = 65.78 82.4/72.8/64.8/57.4 (BP = 0.957 ratio = 0.958 hyp_len = 91 ref_len = 95)"});
  check_golden(
      kTrickyHyp, kTrickyRef,
      {kLower,
       76.40583439893908,
       {80, 67, 55, 44},
       {91, 81, 71, 61},
       91,
       95,
       "BLEU = 76.41 87.9/82.7/77.5/72.1 (BP = 0.957 ratio = 0.958 hyp_len = 91 ref_len = 95)"});
  check_golden(
      kTrickyHyp, kTrickyRef,
      {kNone,
       49.196953844652185,
       {50, 35, 23, 15},
       {72, 62, 52, 42},
       72,
       73,
       "BLEU = 49.20 69.4/56.5/44.2/35.7 (BP = 0.986 ratio = 0.986 hyp_len = 72 ref_len = 73)"});
  check_golden(
      kTrickyHyp, kTrickyRef,
      {kLowerNone,
       64.79209436569387,
       {55, 43, 32, 24},
       {72, 62, 52, 42},
       72,
       73,
       "BLEU = 64.79 76.4/69.4/61.5/57.1 (BP = 0.986 ratio = 0.986 hyp_len = 72 ref_len = 73)"});
}

TEST_CASE("corpus_bleu: Multi30k val.de (first 1000) against test2016.de") {
  const Lines all_val = read_lines(data_path("multi30k/val.de"));
  const Lines hyps(all_val.begin(), all_val.begin() + 1000);
  const Lines refs = read_lines(data_path("multi30k/test2016.de"));
  check_golden(
      hyps, refs,
      {kDefault,
       0.4280930288120929,
       {2230, 164, 14, 1},
       {12668, 11668, 10668, 9668},
       12668,
       12106,
       "BLEU = 0.43 17.6/1.4/0.1/0.0 (BP = 1.000 ratio = 1.046 hyp_len = 12668 ref_len = 12106)"});
  check_golden(
      hyps, refs,
      {kLowerNone,
       0.48202412335750566,
       {1347, 158, 12, 2},
       {11426, 10426, 9426, 8426},
       11426,
       10905,
       "BLEU = 0.48 11.8/1.5/0.1/0.0 (BP = 1.000 ratio = 1.048 hyp_len = 11426 ref_len = 10905)"});
}

TEST_CASE("corpus_bleu: degenerate corpora and errors") {
  const BleuScore empty = corpus_bleu(Lines{"", ""}, Lines{"a b", "c"});
  CHECK(empty.score == 0.0);
  CHECK(empty.bp == 0.0);
  CHECK(empty.format() ==
        "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 3)");
  CHECK(corpus_bleu(Lines{"same words here ok"}, Lines{"same words here ok"}).score ==
        doctest::Approx(100.0));
  CHECK_THROWS_WITH_AS(corpus_bleu(Lines{"a"}, Lines{"a", "b"}),
                       doctest::Contains("1 hypotheses but 2 references"), seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(corpus_bleu(Lines{}, Lines{}), doctest::Contains("no sentences"),
                       seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(corpus_bleu(Lines{"ok", "bad \xE2\x82"}, Lines{"ok", "ok"}),
                       doctest::Contains("hypothesis 1 is not valid UTF-8 (byte 4)"),
                       seqgrad::ValueError);
}

TEST_CASE("corpus_bleu_tokens: tokenized BLEU on our tokenizer's output") {
  const std::vector<std::vector<std::string>> hyps = {{"a", "dog", "runs", "."},
                                                      {"l'", "homme", "parle"}};
  const std::vector<std::vector<std::string>> refs = {{"a", "dog", "is", "running", "."},
                                                      {"l'", "homme", "parle", "."}};
  const BleuScore s = corpus_bleu_tokens(hyps, refs);
  const BleuScore joined = corpus_bleu(Lines{"a dog runs .", "l' homme parle"},
                                       Lines{"a dog is running .", "l' homme parle ."}, kNone);
  CHECK(s.score == joined.score);
  CHECK(s.sys_len == 7);
  CHECK(s.ref_len == 9);
  CHECK(bleu_signature(kLowerNone) == "nrefs:1|case:lc|eff:no|tok:none|smooth:exp");
}

// ---- chrF ---------------------------------------------------------------------------------------

TEST_CASE("corpus_chrf: hand-derived and sacreBLEU golden scores") {
  // "abc" vs "abd": 1-grams match 2 of 3 each way, 2-grams 1 of 2 (ab), 3-grams 0 of 1; orders 4..6
  // have no n-grams and do not count. Precision = recall = (2/3 + 1/2 + 0) / 3 = 7/18, so
  // F2 = 5 P R / (4 P + R) = P = 38.89 (sacrebleu 2.6.0: 38.888888888888886).
  const ChrfScore s = corpus_chrf(Lines{"abc"}, Lines{"abd"});
  CHECK(s.score == doctest::Approx(100.0 * 7 / 18).epsilon(1e-15));
  CHECK(s.hyp_ngrams == std::vector<int64_t>{3, 2, 1, 0, 0, 0});
  CHECK(s.matches == std::vector<int64_t>{2, 1, 0, 0, 0, 0});
  CHECK(s.format() == "chrF2 = 38.89");
  // Whitespace is dropped and characters are code points (ä, ß are one each); an empty hypothesis
  // still adds its reference's n-grams. sacrebleu 2.6.0: 54.400086187046895.
  const Lines hyp = {"Ein Mädchen läuft über die Straße!", "The cat sat.", ""};
  const Lines ref = {"Ein Mädchen geht über die Straße.", "The cat is sitting.", "Nothing"};
  CHECK(corpus_chrf(hyp, ref).score == doctest::Approx(54.400086187046895).epsilon(1e-14));
  CHECK(corpus_chrf(Lines{"THE Cat"}, Lines{"the cat"}, {.lowercase = true}).score == 100.0);
  CHECK(corpus_chrf(Lines{"x"}, Lines{"y"}).score == 0.0);
  CHECK(chrf_signature() == "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no");
}

TEST_CASE("corpus_chrf: bad input is a ValueError") {
  CHECK_THROWS_WITH_AS(corpus_chrf(Lines{"a"}, Lines{}), doctest::Contains("1 hypotheses but 0 references"),
                       seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(corpus_chrf(Lines{}, Lines{}), doctest::Contains("no sentences"), seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(corpus_chrf(Lines{"ok", "bad \xff"}, Lines{"a", "b"}),
                       doctest::Contains("hypothesis 1 is not valid UTF-8 (byte 4)"), seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(corpus_chrf(Lines{"a"}, Lines{"a"}, {.char_order = 0}), doctest::Contains("char_order = 0"),
                       seqgrad::ValueError);
}
