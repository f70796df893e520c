// Text pipeline: UTF-8 helpers, tokenizer on real Multi30k / Tatoeba lines, vocab, corpus reading
// and its report, encoding, subsets, deterministic bucketed batching, and the streamed reading of
// training corpora (PairReader, index_corpus, StreamingBatches) with its bad-input errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "models/text/tokenizer.h"
#include "models/text/vocab.h"
#include "temp_dir.h"

using namespace seqgrad::text;
using Tokens = std::vector<std::string>;

namespace {

// meson sets SEQGRAD_SHARED_DATA; by hand, run from the repository root next to shared/.
std::string data_path(const std::string& relative) {
  const char* env = std::getenv("SEQGRAD_SHARED_DATA");
  const std::string path = std::string(env ? env : "../shared/data") + "/" + relative;
  REQUIRE_MESSAGE(std::filesystem::exists(path),
                  "missing " << path << " (set SEQGRAD_SHARED_DATA)");
  return path;
}

std::string line_of(const std::string& relative, std::size_t line) {
  return read_lines(data_path(relative)).at(line - 1);
}

// A file under the temp directory, removed when the test ends.
struct TempFile {
  explicit TempFile(const std::string& name, const std::string& contents)
      : path(seqgrad::testing::temp_path(name)) {
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

EncodedPair pair_of(std::vector<int64_t> src, std::vector<int64_t> tgt) {
  src.push_back(Vocab::kEos);
  tgt.push_back(Vocab::kEos);
  return {src, tgt};
}

}  // namespace

TEST_CASE("utf8: round trip and strict decoding") {
  const std::string s = "aß€😀";  // 1, 2, 3 and 4 bytes
  const auto cps = decode_utf8(s);
  CHECK(cps == std::vector<char32_t>{U'a', U'ß', U'€', U'😀'});
  CHECK(encode_utf8(cps) == s);
  CHECK_FALSE(find_invalid_utf8(s).has_value());
  CHECK(find_invalid_utf8("ab\xC3") == 2u);         // truncated
  CHECK(find_invalid_utf8("\xC0\xAF") == 0u);       // overlong '/'
  CHECK(find_invalid_utf8("x\xED\xA0\x80") == 1u);  // surrogate
  CHECK_THROWS_WITH_AS(tokenize("ok \xFF"), doctest::Contains("invalid UTF-8 sequence at byte 3"),
                       seqgrad::ValueError);
}

TEST_CASE("to_lower: German, French, Czech and beyond, as Python's str.lower()") {
  CHECK(to_lower("ÄÖÜ äöü ß ẞ STRASSE") == "äöü äöü ß ß strasse");
  CHECK(to_lower("ÉLÈVE À ÇA ŒUVRE ÊTRE ÎLE ÔTER ÙÛÜŸ") == "élève à ça œuvre être île ôter ùûüÿ");
  CHECK(to_lower("ŽLUŤOUČKÝ KŮŇ ÚPĚL ĎÁBELSKÉ ÓDY Ř") == "žluťoučký kůň úpěl ďábelské ódy ř");
  CHECK(to_lower("ΑΘΗΝΑ МОСКВА") == "αθηνα москва");
  CHECK(to_lower("İ") == "i\u0307");  // Python: 'İ'.lower() == 'i̇'
  CHECK(to_lower(U'×') == U'×');      // U+00D7 is not a letter
}

TEST_CASE("normalize_spaces: TAB, no-break, narrow, thin and zero-width spaces") {
  CHECK(normalize_spaces("  a\t\tb\u00A0c\u202Fd\u2009e\u200B\u200Bf   ") == "a b c d e f");
  CHECK(normalize_spaces("\u200B\u00A0") == "");
  CHECK(normalize_spaces("soft\u00ADhyphen") == "softhyphen");
}

TEST_CASE("tokenize: real Multi30k and Tatoeba lines") {
  // train.de line 7366 has a TAB inside the sentence.
  const std::string tab_line = line_of("multi30k/train.de", 7366);
  REQUIRE(tab_line.find('\t') != std::string::npos);
  CHECK(tokenize(tab_line) == Tokens{"\"", "zwei", "männliche", "und", "eine", "weibliche",
                                     "person", "spielen", "in", "einer", "wasserfontäne", ".",
                                     "\""});
  CHECK(line_of("multi30k/train.de", 16510) == "@@");
  CHECK(tokenize("@@") == Tokens{"@", "@"});
  // train.cs line 12811 has two U+200B before a word.
  CHECK(tokenize(line_of("multi30k/train.cs", 12811)) ==
        Tokens{"žena", ",", "která", "hraje", "softball", ",", "chytila", "míč", "a", "padá", "."});
  // Tatoeba French puts U+202F before "!" and U+00A0 before "?".
  CHECK(line_of("fra-eng/fra.txt", 1) == "Go.\tVa !");
  CHECK(tokenize("Cours\u202F!") == Tokens{"cours", "!"});
  CHECK(tokenize("Qui\u00A0?") == Tokens{"qui", "?"});
}

TEST_CASE("tokenize: punctuation, quotes, numbers and apostrophes") {
  CHECK(tokenize("« Bonjour », dit-il… “Oui” — ¿Qué? ¡Sí!") ==
        Tokens{"«", "bonjour", "»", ",", "dit-il", "…", "“", "oui", "”", "—", "¿", "qué", "?", "¡",
               "sí", "!"});
  CHECK(tokenize("It costs $3.50 (i.e. 1,000 units) at 10:30... U.S. 5-4") ==
        Tokens{"it", "costs", "$", "3.50", "(", "i.e", ".", "1,000", "units", ")", "at", "10:30",
               "...", "u.s", ".", "5-4"});
  CHECK(tokenize("A T-Shirt", {.lowercase = false}) == Tokens{"A", "T-Shirt"});
  CHECK(tokenize("l'homme d’aujourd'hui") == Tokens{"l'", "homme", "d'", "aujourd'", "hui"});
  CHECK(tokenize("the man's dog", {.apostrophe = Apostrophe::attach_right}) ==
        Tokens{"the", "man", "'s", "dog"});
  CHECK(tokenize("l’homme", {.apostrophe = Apostrophe::keep}) == Tokens{"l'homme"});
  CHECK(tokenize("'quoted'") == Tokens{"'", "quoted", "'"});
  CHECK(tokenize(" \t ").empty());
}

TEST_CASE("detokenize: readable text") {
  CHECK(detokenize(tokenize("A dog, a cat (and a bird) run!")) == "a dog, a cat (and a bird) run!");
  CHECK(detokenize(Tokens{"\"", "zwei", "hunde", ".", "\"", "sagt", "er"}) ==
        "\"zwei hunde.\" sagt er");
  CHECK(detokenize(Tokens{"l'", "homme", "«", "parle", "»", "?"}) == "l'homme «parle»?");
  CHECK(detokenize(Tokens{"the", "man", "'s", "dog", "..."}) == "the man's dog...");
  CHECK(detokenize(Tokens{}).empty());
}

TEST_CASE("vocab: deterministic order, min_freq, max_size, encode/decode") {
  const std::vector<Tokens> sentences = {
      {"b", "a", "c", "a"}, {"c", "b", "d"}, {"a", "e", "<unk>"}};
  const Vocab v = Vocab::build(sentences);
  // a:3, then b and c (2, lexicographic), then d and e (1); "<unk>" is not added twice.
  CHECK(v.tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e"});
  CHECK(Vocab::build(sentences, {.min_freq = 2}).tokens() ==
        Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"});
  CHECK(Vocab::build(sentences, {.max_size = 6}).size() == 6);
  CHECK(v.encode(Tokens{"a", "zzz", "e"}) == std::vector<int64_t>{4, Vocab::kUnk, 8});
  const std::vector<int64_t> ids = {Vocab::kBos, 4, 3, 5, Vocab::kEos, 6, Vocab::kPad};
  CHECK(v.decode(ids) == Tokens{"a", "<unk>", "b"});
  CHECK(v.decode(ids, {.stop_at_eos = false, .skip_special = false}).size() == ids.size());
  CHECK_THROWS_AS(v.token(9), seqgrad::IndexError);
  CHECK(Vocab().size() == Vocab::kNumSpecial);
  CHECK(Vocab().id("a") == Vocab::kUnk);
  CHECK_THROWS_WITH_AS(Vocab::build(sentences, {.min_freq = 0}), doctest::Contains("min_freq = 0"),
                       seqgrad::ValueError);
}

TEST_CASE("vocab: JSON round trip and validation") {
  const Vocab v = Vocab::build(std::vector<Tokens>{{"über", "straße", "über"}});
  const nlohmann::json j = nlohmann::json::parse(v.to_json().dump());
  const Vocab back = Vocab::from_json(j);
  CHECK(back.tokens() == v.tokens());
  CHECK(back.id("straße") == v.id("straße"));

  nlohmann::json bad = j;
  bad["tokens"][0] = "<bos>";
  CHECK_THROWS_WITH_AS(Vocab::from_json(bad), doctest::Contains("token 0 must be \"<pad>\""),
                       seqgrad::ValueError);
  bad = j;
  bad["tokens"].push_back("über");
  CHECK_THROWS_WITH_AS(Vocab::from_json(bad), doctest::Contains("\"über\" appears twice"),
                       seqgrad::ValueError);
  CHECK_THROWS_AS(Vocab::from_json(nlohmann::json{{"tokens", 3}}), seqgrad::ValueError);
}

TEST_CASE("read_parallel: Multi30k train en-de, cleaning report") {
  const ParallelCorpus c =
      read_parallel(data_path("multi30k/train.en"), data_path("multi30k/train.de"));
  const ReadReport& r = c.report;
  CHECK(r.lines == 29000);
  CHECK(r.skipped_placeholder == 2);  // train.de lines 16510 and 16664 are "@@"
  CHECK(r.kept == 28998);
  CHECK(c.pairs.size() == 28998u);
  CHECK(r.sides_trimmed == 40);  // the 40 trailing spaces of train.de
  CHECK(r.sides_respaced > 0);   // the TAB of line 7366, U+00A0 spaces
  REQUIRE(r.examples.size() == 2);
  CHECK(r.examples[0].ends_with("train.de:16510: placeholder \"@@\", pair skipped"));
  CHECK(r.summary().starts_with("read 29000 pairs, kept 28998; skipped 2 placeholder"));
  // Line 7366 is pair 7365 (0-based, nothing skipped before it), its TAB now a space.
  CHECK(c.pairs[7365].tgt.find('\t') == std::string::npos);
  CHECK(c.pairs[7365].tgt.find("einer Wasserfontäne") != std::string::npos);
}

TEST_CASE("read_parallel: test2016.fr leading and trailing spaces are trimmed") {
  const ParallelCorpus c =
      read_parallel(data_path("multi30k/test2016.en"), data_path("multi30k/test2016.fr"));
  CHECK(c.report.kept == 1000);
  CHECK(c.report.sides_trimmed == 5);  // 4 leading + 1 trailing, per the data README
  for (const auto& p : c.pairs) CHECK((p.tgt.front() != ' ' && p.tgt.back() != ' '));
}

TEST_CASE("read_parallel: mismatched line counts and missing files") {
  const std::string en = data_path("multi30k/train.en"), de = data_path("multi30k/val.de");
  try {
    read_parallel(en, de);
    FAIL("no error");
  } catch (const seqgrad::IOError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(en) != std::string::npos);
    CHECK(msg.find(de) != std::string::npos);
    CHECK(msg.find("has 29000 lines but") != std::string::npos);
    CHECK(msg.find("has 1014") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(read_lines("/nonexistent/seqgrad.txt"),
                       doctest::Contains("cannot open '/nonexistent/seqgrad.txt'"),
                       seqgrad::IOError);
}

TEST_CASE("read_parallel: empty lines, CR and invalid UTF-8") {
  const TempFile src("src.txt", "one\r\n\n  three  \nfour\n");
  const TempFile tgt("tgt.txt", "eins\r\nzwei\ndrei\n@@\n");
  const ParallelCorpus c = read_parallel(src.path, tgt.path);
  CHECK(c.report.kept == 2);
  CHECK(c.report.skipped_empty == 1);
  CHECK(c.report.skipped_placeholder == 1);
  CHECK(c.report.carriage_returns == 2);
  CHECK(c.report.sides_trimmed == 1);
  CHECK(c.pairs[0].src == "one");
  CHECK(c.pairs[1].src == "three");
  const TempFile bad("bad.txt", "fine\nnot \xC3( fine\nfine\nfine\n");
  CHECK_THROWS_WITH_AS(read_parallel(src.path, bad.path),
                       doctest::Contains("bad.txt:2: invalid UTF-8 at byte 4"), seqgrad::IOError);
}

TEST_CASE("read_tsv_pairs: Tatoeba fra.txt and bad column counts") {
  const ParallelCorpus fra = read_tsv_pairs(data_path("fra-eng/fra.txt"), 0, 1);
  CHECK(fra.report.lines == 167130);
  CHECK(fra.report.kept == 167130);
  CHECK(fra.pairs[0].src == "Go.");
  CHECK(fra.pairs[0].tgt == "Va !");  // U+202F became a plain space

  const TempFile tsv("pairs.tsv", "a\tb\nc\td\te\n\nf\tg\n");
  CHECK_THROWS_WITH_AS(read_tsv_pairs(tsv.path, 0, 1),
                       doctest::Contains("pairs.tsv:2: expected 2 tab-separated columns, found 3"),
                       seqgrad::IOError);
  const ParallelCorpus skipped = read_tsv_pairs(tsv.path, 1, 0, {.on_bad_line = OnBadLine::skip});
  CHECK(skipped.report.skipped_bad_columns == 1);
  CHECK(skipped.report.skipped_empty == 1);
  REQUIRE(skipped.pairs.size() == 2u);
  CHECK(skipped.pairs[1].src == "g");
  CHECK_THROWS_WITH_AS(read_tsv_pairs(tsv.path, 0, 2), doctest::Contains("tgt_col = 2"),
                       seqgrad::ValueError);
}

TEST_CASE("encode_pairs: <eos> appended, truncation counted") {
  const std::vector<TokenizedPair> pairs = {{{"a", "b", "c"}, {"x"}}, {{"a"}, {"x", "y", "z"}}};
  const Vocab src = Vocab::build(source_side(pairs));
  const Vocab tgt = Vocab::build(target_side(pairs));
  const EncodedCorpus e = encode_pairs(pairs, src, tgt, {.max_src_tokens = 2, .max_tgt_tokens = 2});
  CHECK(e.pairs[0].src == std::vector<int64_t>{src.id("a"), src.id("b"), Vocab::kEos});
  CHECK(e.pairs[1].tgt == std::vector<int64_t>{tgt.id("x"), tgt.id("y"), Vocab::kEos});
  CHECK(e.truncated_src == 1);
  CHECK(e.truncated_tgt == 1);
}

TEST_CASE("ShuffleRng: the same numbers on every platform") {
  // Reference values from an independent Python transcription of splitmix64 + xoshiro256**.
  ShuffleRng rng(42);
  CHECK(rng.next() == 0x15780b2e0c2ec716ull);
  CHECK(rng.next() == 0x6104d9866d113a7eull);
  CHECK(rng.next() == 0xae17533239e499a1ull);
  ShuffleRng seven(7);
  std::vector<int> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  shuffle(v, seven);
  CHECK(v == std::vector<int>{8, 3, 9, 0, 7, 2, 1, 6, 5, 4});
}

TEST_CASE("subsets: first N, random N with a seed, and the rest") {
  const std::vector<int> items = {10, 11, 12, 13, 14, 15, 16, 17};
  const Split<int> first = split_subset(items, {.count = 3});
  CHECK(first.taken == std::vector<int>{10, 11, 12});
  CHECK(first.rest == std::vector<int>{13, 14, 15, 16, 17});
  const Split<int> a = split_subset(items, {.count = 4, .mode = SubsetMode::random, .seed = 5});
  const Split<int> b = split_subset(items, {.count = 4, .mode = SubsetMode::random, .seed = 5});
  CHECK(a.taken == b.taken);
  CHECK(a.taken.size() == 4u);
  CHECK(a.rest.size() == 4u);
  CHECK(std::is_sorted(a.taken.begin(), a.taken.end()));
  CHECK(split_subset(items, {.count = 4, .mode = SubsetMode::random, .seed = 6}).taken != a.taken);
  CHECK_THROWS_WITH_AS(subset_indices(8, {.count = 9}), doctest::Contains("count = 9"),
                       seqgrad::ValueError);
}

TEST_CASE("make_batches: padding, teacher forcing and lengths") {
  const std::vector<EncodedPair> pairs = {pair_of({5, 6, 7}, {8}), pair_of({5}, {8, 9, 10})};
  const auto batches =
      make_batches(pairs, {.batch_size = 2, .bucket_by_length = false, .shuffle = false});
  REQUIRE(batches.size() == 1u);
  const Batch& b = batches[0];
  CHECK(b.batch == 2);
  CHECK(b.src_len_max == 4);
  CHECK(b.tgt_len_max == 4);
  CHECK(b.src == std::vector<int64_t>{5, 6, 7, 2, 5, 2, 0, 0});
  CHECK(b.tgt_in == std::vector<int64_t>{1, 8, 0, 0, 1, 8, 9, 10});
  CHECK(b.tgt_out == std::vector<int64_t>{8, 2, 0, 0, 8, 9, 10, 2});
  CHECK(b.src_lengths == std::vector<int64_t>{4, 2});
  CHECK(b.tgt_lengths == std::vector<int64_t>{2, 4});
  CHECK(b.index == std::vector<int64_t>{0, 1});
  CHECK_THROWS_WITH_AS(make_batches(pairs, {.batch_size = 0}), doctest::Contains("batch_size = 0"),
                       seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(make_batches(std::vector<EncodedPair>{{{4}, {2}}}, {}),
                       doctest::Contains("must end both sides with <eos>"), seqgrad::ValueError);
}

TEST_CASE("make_batches: bucketing is deterministic per seed and covers every pair once") {
  std::vector<EncodedPair> pairs;
  ShuffleRng lengths(1);
  for (int i = 0; i < 103; ++i)
    pairs.push_back(pair_of(std::vector<int64_t>(1 + lengths.below(20), 4 + i % 7),
                            std::vector<int64_t>(1 + lengths.below(20), 5)));
  const BatchOptions options{.batch_size = 8, .seed = 11};
  const auto a = make_batches(pairs, options);
  const auto b = make_batches(pairs, options);
  auto other = options;
  other.seed = 12;
  const auto c = make_batches(pairs, other);
  REQUIRE(a.size() == 13u);  // 12 full batches and one of 7
  std::vector<int64_t> order_a, order_b, order_c;
  std::multiset<int64_t> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    order_a.insert(order_a.end(), a[i].index.begin(), a[i].index.end());
    order_b.insert(order_b.end(), b[i].index.begin(), b[i].index.end());
    order_c.insert(order_c.end(), c[i].index.begin(), c[i].index.end());
    seen.insert(a[i].index.begin(), a[i].index.end());
    CHECK(std::is_sorted(a[i].src_lengths.begin(), a[i].src_lengths.end()));
    CHECK(a[i].src.size() == static_cast<std::size_t>(a[i].batch * a[i].src_len_max));
  }
  // Buckets are consecutive slices of the length-sorted corpus: ordered by their shortest source,
  // each batch ends no longer than the next one starts.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Batch& batch : a)
    ranges.emplace_back(batch.src_lengths.front(), batch.src_lengths.back());
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 0; i + 1 < ranges.size(); ++i)
    CHECK(ranges[i].second <= ranges[i + 1].first);
  CHECK(order_a == order_b);
  CHECK(order_a != order_c);
  CHECK(seen.size() == 103u);
  CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 103u);
  CHECK(make_batches(pairs, {.batch_size = 8, .drop_last = true}).size() == 12u);
}

TEST_CASE("pipeline: Multi30k val en-de from text to batches") {
  const ParallelCorpus c =
      read_parallel(data_path("multi30k/val.en"), data_path("multi30k/val.de"));
  const auto tokens = tokenize_pairs(c.pairs);
  const Vocab src = Vocab::build(source_side(tokens), {.min_freq = 2});
  const Vocab tgt = Vocab::build(target_side(tokens), {.min_freq = 2});
  const EncodedCorpus enc =
      encode_pairs(tokens, src, tgt, {.max_src_tokens = 40, .max_tgt_tokens = 40});
  const auto batches = make_batches(enc.pairs, {.batch_size = 64, .seed = 3});
  int64_t rows = 0;
  for (const Batch& b : batches) rows += b.batch;
  CHECK(rows == 1014);
  const Batch& b = batches.front();
  const int64_t row = b.index[0];
  CHECK(src.decode(std::vector<int64_t>(b.src.begin(), b.src.begin() + b.src_len_max)) ==
        src.decode(enc.pairs[static_cast<std::size_t>(row)].src));
}

// ---- streaming ----------------------------------------------------------------------------------

namespace {

CorpusFiles aligned(const std::string& src, const std::string& tgt) {
  CorpusFiles f;
  f.src = src, f.tgt = tgt;
  return f;
}

// A stand-in for the word encoder: ids from the sentence's characters, so that lengths vary.
EncodedPair char_ids(const SentencePair& p) {
  EncodedPair e;
  for (unsigned char c : p.src) e.src.push_back(4 + c % 50);
  for (unsigned char c : p.tgt) e.tgt.push_back(4 + c % 50);
  e.src.push_back(Vocab::kEos);
  e.tgt.push_back(Vocab::kEos);
  return e;
}

// Every batch of one epoch, each as the list of its rows' source ids.
std::vector<std::vector<std::vector<int64_t>>> epoch_rows(BatchSource& source, uint64_t seed, int64_t skip = 0) {
  source.start_epoch(seed, skip);
  std::vector<std::vector<std::vector<int64_t>>> out;
  while (std::optional<Batch> b = source.next()) {
    std::vector<std::vector<int64_t>> rows;
    for (int64_t r = 0; r < b->batch; ++r) {
      const auto first = b->src.begin() + r * b->src_len_max;
      rows.emplace_back(first, first + b->src_lengths[static_cast<std::size_t>(r)]);
    }
    out.push_back(rows);
  }
  return out;
}

}  // namespace

TEST_CASE("PairReader: streams what read_parallel reads, and seeks back") {
  const std::string de = data_path("multi30k/train.de"), en = data_path("multi30k/train.en");
  const ParallelCorpus whole = read_parallel(de, en);
  PairReader reader(aligned(de, en));
  std::vector<PairReader::Position> at;
  int64_t n = 0;
  for (std::optional<SentencePair> p; at.push_back(reader.position()), (p = reader.next()); ++n) {
    REQUIRE(n < static_cast<int64_t>(whole.pairs.size()));
    CHECK(p->src == whole.pairs[static_cast<std::size_t>(n)].src);
    CHECK(p->tgt == whole.pairs[static_cast<std::size_t>(n)].tgt);
  }
  CHECK(n == 28998);
  CHECK(reader.report().summary() == whole.report.summary());
  reader.seek(at[16508]);  // the position before pair 16508; line 16510 (a placeholder) is skipped after it
  CHECK(reader.next()->src == whole.pairs[16508].src);
  CHECK(reader.next()->src == whole.pairs[16509].src);
}

TEST_CASE("PairReader: bad input names the file, the line and what was expected") {
  const TempFile ok("ok.txt", "one\ntwo\nthree\n");
  SUBCASE("invalid UTF-8: line, byte in the line and offset in the file") {
    const TempFile bad("bad_utf8.txt", "fine\nalso fine\nnot \xC3( fine\n");
    CHECK_THROWS_WITH_AS(read_corpus(aligned(ok.path, bad.path)),
                         doctest::Contains("bad_utf8.txt:3: invalid UTF-8 at byte 4 of the line (byte offset 19 in "
                                           "the file)"),
                         seqgrad::IOError);
  }
  SUBCASE("different line counts: both counts, whichever file is longer") {
    const TempFile longer("longer.txt", "a\nb\nc\nd\ne\n");
    CHECK_THROWS_WITH_AS(read_corpus(aligned(ok.path, longer.path)),
                         doctest::Contains(("ok.txt' has 3 lines but '" + longer.path + "' has 5").c_str()), seqgrad::IOError);
    CHECK_THROWS_WITH_AS(read_corpus(aligned(longer.path, ok.path)),
                         doctest::Contains(("longer.txt' has 5 lines but '" + ok.path + "' has 3").c_str()), seqgrad::IOError);
  }
  SUBCASE("a TSV line without a tab: file:line") {
    const TempFile tsv("notab.tsv", "a\tb\n\nno tab here\n");
    CorpusFiles f;
    f.tsv = tsv.path;
    CHECK_THROWS_WITH_AS(read_corpus(f), doctest::Contains("notab.tsv:3: no tab in the line"), seqgrad::IOError);
    const ParallelCorpus skipped = read_corpus(f, {.on_bad_line = OnBadLine::skip});
    CHECK(skipped.report.skipped_bad_columns == 1);
    CHECK(skipped.report.skipped_empty == 1);
    CHECK(skipped.pairs.size() == 1u);
  }
  SUBCASE("a missing file, a directory") {
    CHECK_THROWS_WITH_AS(read_corpus(aligned(ok.path, "/nonexistent/seqgrad.de")),
                         doctest::Contains("cannot open '/nonexistent/seqgrad.de': no such file"), seqgrad::IOError);
    const std::string dir = std::filesystem::temp_directory_path().string();
    CHECK_THROWS_WITH_AS(read_corpus(aligned(dir, ok.path)), doctest::Contains("is a directory, expected a regular file"),
                         seqgrad::IOError);
  }
  SUBCASE("empty lines are skipped and counted; a corpus of nothing else is empty") {
    const TempFile src("blank_src.txt", "\n  \n\t\n"), tgt("blank_tgt.txt", "x\ny\n\n");
    const CorpusIndex index = index_corpus(aligned(src.path, tgt.path), {});
    CHECK(index.pairs == 0);
    CHECK(index.report.skipped_empty == 3);
    CHECK(index.chunks.empty());
  }
}

TEST_CASE("index_corpus: chunks of buffer_pairs pairs, the visitor sees every pair, max_pairs stops") {
  const TempFile src("ix_src.txt", "a\nb\n\nc\nd\ne\nf\n"), tgt("ix_tgt.txt", "1\n2\n3\n4\n5\n6\n7\n");
  std::vector<std::string> seen;
  const CorpusIndex index =
      index_corpus(aligned(src.path, tgt.path), {.buffer_pairs = 2}, [&](const SentencePair& p) { seen.push_back(p.src); });
  CHECK(index.pairs == 6);  // line 3 is empty on the source side
  CHECK(seen == std::vector<std::string>{"a", "b", "c", "d", "e", "f"});
  REQUIRE(index.chunks.size() == 3u);
  CHECK(index.chunks[1].pairs == 2);
  CHECK(index.chunks[1].start.line == 2);  // after line 2: line 3 (skipped) is read again with the chunk
  PairReader reader(index.files);
  reader.seek(index.chunks[2].start);
  CHECK(reader.next()->src == "e");
  const CorpusIndex first = index_corpus(aligned(src.path, tgt.path), {.buffer_pairs = 4, .max_pairs = 5});
  CHECK(first.pairs == 5);
  CHECK(first.chunks.back().pairs == 1);
  CHECK_THROWS_WITH_AS(index_corpus(index.files, {.buffer_pairs = 0}), doctest::Contains("buffer_pairs = 0"),
                       seqgrad::ValueError);
}

TEST_CASE("StreamingBatches: one buffer batches exactly as make_batches; more buffers cover every pair once") {
  const std::string de = data_path("multi30k/val.de"), en = data_path("multi30k/val.en");
  const CorpusFiles files = aligned(de, en);
  const ParallelCorpus whole = read_corpus(files);
  std::vector<EncodedPair> encoded;
  for (const SentencePair& p : whole.pairs) encoded.push_back(char_ids(p));
  MemoryBatches memory(encoded, {.batch_size = 16});

  StreamingBatches one(index_corpus(files, {.buffer_pairs = 5000}), char_ids, {.batch_size = 16});
  CHECK(one.batches_per_epoch() == memory.batches_per_epoch());
  CHECK(epoch_rows(one, 7) == epoch_rows(memory, 7));  // a corpus in one buffer: today's batches exactly

  StreamingBatches chunked(index_corpus(files, {.buffer_pairs = 300}), char_ids, {.batch_size = 16});
  CHECK(chunked.batches_per_epoch() == 19 + 19 + 19 + 8);  // 300, 300, 300 and 114 pairs, 16 a batch
  const auto a = epoch_rows(chunked, 7), b = epoch_rows(chunked, 7), c = epoch_rows(chunked, 8);
  CHECK(a == b);  // deterministic for a seed
  CHECK(a != c);  // another epoch, another order
  std::multiset<std::vector<int64_t>> rows, expected;
  for (const auto& batch : a) rows.insert(batch.begin(), batch.end());
  for (const EncodedPair& p : encoded) expected.insert(p.src);
  CHECK(rows == expected);
  // Resuming at batch 25 (inside the second chunk visited) continues with the same batches.
  const auto resumed = epoch_rows(chunked, 7, 25);
  CHECK(resumed == std::vector(a.begin() + 25, a.end()));
  CHECK(epoch_rows(chunked, 7, chunked.batches_per_epoch()).empty());
  CHECK_THROWS_WITH_AS(chunked.start_epoch(7, 66), doctest::Contains("cannot start at batch 66 of an epoch of 65"),
                       seqgrad::ValueError);
}

TEST_CASE("PairSample: a bounded, deterministic, roughly uniform sample in stream order") {
  auto sample_of = [](int64_t n, int64_t capacity, uint64_t seed) {
    PairSample sample(capacity, seed);
    for (int64_t i = 0; i < n; ++i) sample.add({std::to_string(i), "x"});
    std::vector<int64_t> out;
    for (const SentencePair& p : sample.pairs()) out.push_back(std::stoll(p.src));
    return out;
  };
  CHECK(sample_of(5, 10, 1) == std::vector<int64_t>{0, 1, 2, 3, 4});  // fewer than the capacity: all
  const std::vector<int64_t> a = sample_of(10000, 100, 7);
  CHECK(a.size() == 100u);
  CHECK(std::is_sorted(a.begin(), a.end()));
  CHECK(std::set<int64_t>(a.begin(), a.end()).size() == 100u);
  CHECK(a == sample_of(10000, 100, 7));
  CHECK(a != sample_of(10000, 100, 8));
  // Uniform: each of 10 blocks of 1000 holds 10 of the 100 on average; over 200 seeds every block
  // gets 2000 +- a few percent (the binomial's standard deviation is about 42).
  std::vector<int64_t> per_block(10, 0);
  for (uint64_t seed = 0; seed < 200; ++seed)
    for (int64_t i : sample_of(10000, 100, seed)) ++per_block[static_cast<std::size_t>(i / 1000)];
  for (int64_t count : per_block) CHECK((count > 1800 && count < 2200));
  CHECK_THROWS_WITH_AS(PairSample(0, 1), doctest::Contains("capacity = 0"), seqgrad::ValueError);
}
