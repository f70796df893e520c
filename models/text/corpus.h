// Parallel corpora: reading (aligned files or TSV) with cleaning and a report of what was skipped,
// tokenizing, encoding to ids, subsets, and length-bucketed batches shuffled by a portable RNG.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/text/tokenizer.h"
#include "models/text/vocab.h"

namespace seqgrad::text {

// ---- reading ------------------------------------------------------------------------------------

// The lines of a file without their '\n' (nothing else is touched: BLEU references are read raw).
// Throws IOError naming the file when it cannot be opened or read.
std::vector<std::string> read_lines(const std::string& path);

struct SentencePair {
  std::string src, tgt;
};

enum class OnBadLine { error, skip };

struct ReadOptions {
  // A sentence equal to one of these marks a missing translation and the pair is skipped
  // (Multi30k train.de lines 16510 and 16664 are "@@").
  std::vector<std::string> placeholders = {"@@"};
  int64_t columns = 0;  // TSV: expected column count; 0 = that of the first line
  OnBadLine on_bad_line = OnBadLine::error;  // TSV: a line with another column count
};

// What reading did to the corpus. Counts are of pairs (one line of each file, or one TSV line)
// except the two "sides_" counts, which count sentences.
struct ReadReport {
  static constexpr std::size_t kMaxExamples = 10;

  int64_t lines = 0;                // pairs read
  int64_t kept = 0;                 // pairs returned
  int64_t skipped_empty = 0;        // a side empty after normalisation
  int64_t skipped_placeholder = 0;  // a side is a placeholder such as "@@"
  int64_t skipped_bad_columns = 0;  // TSV lines with the wrong column count (OnBadLine::skip)
  int64_t sides_respaced = 0;       // TAB, no-break, narrow, thin or zero-width spaces, space runs
  int64_t sides_trimmed = 0;        // leading or trailing spaces removed
  int64_t carriage_returns = 0;     // a CR before the LF removed
  std::vector<std::string> examples;  // "file:line: what happened", the first kMaxExamples

  std::string summary() const;  // one line for the trainer's log
};

struct ParallelCorpus {
  std::vector<SentencePair> pairs;
  ReadReport report;
};

// Where a parallel corpus lives: two files aligned by line number, or one tab-separated file.
struct CorpusFiles {
  std::string src, tgt;              // aligned files, one sentence per line (tsv empty), or
  std::string tsv;                   // one tab-separated file,
  int64_t src_col = 0, tgt_col = 1;  // with these columns, counted from 0
  // Interleaved held-out splits (fra-eng's valid and test pairs come from the training file): with
  // period > 0, the k-th kept pair (from 0, in file order) belongs to this corpus when k % period is
  // one of `residues`, or, with exclude, when it is none of them.
  int64_t period = 0;
  std::vector<int64_t> residues;
  bool exclude = false;

  bool is_tsv() const { return !tsv.empty(); }
  bool selects(int64_t k) const;
  std::string describe() const;  // "train.de and train.en" or "pairs.tsv (columns 0 and 1)"
};

// Reads a corpus one pair at a time, holding one line of each file, with the cleaning and skip
// rules of read_parallel / read_tsv_pairs; report() counts what has been read so far. Every read
// error is an IOError naming the file and line: a missing or non-regular file, invalid UTF-8 (byte
// in the line and offset in the file), aligned files with different line counts (both counts), a
// TSV line without a tab or with another column count. position() and seek() let a reader come
// back to a point of the file (the streaming batcher re-reads its chunks every epoch).
class PairReader {
 public:
  struct Position {
    int64_t src_offset = 0, tgt_offset = 0;  // byte offsets of the next line (TSV: src_offset only)
    int64_t line = 0;                        // lines read before it
    int64_t kept = 0;                        // pairs kept before it (what CorpusFiles::selects counts)
  };

  explicit PairReader(CorpusFiles files, ReadOptions options = {});
  ~PairReader();
  PairReader(PairReader&&) noexcept;
  PairReader& operator=(PairReader&&) noexcept;

  // The next pair that survives cleaning and the selection; nullopt at the end of the corpus.
  std::optional<SentencePair> next();
  // Aligned files: reads the rest of both (lines only, nothing kept) and throws the line-count
  // IOError if they differ, then comes back to where it was. A pass that stops early (--subset)
  // calls it, so that it still refuses misaligned files. TSV: nothing to check.
  void check_aligned_to_end();
  Position position() const;
  void seek(const Position& position);
  const ReadReport& report() const;
  const CorpusFiles& files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// All the pairs of a corpus (at most max_pairs of them when > 0), through a PairReader.
ParallelCorpus read_corpus(const CorpusFiles& files, const ReadOptions& options = {}, int64_t max_pairs = 0);

// One sentence per line in each file, aligned by line number. Sentences go through
// normalize_spaces(); empty and placeholder pairs are skipped and counted. Throws IOError naming
// both files and both line counts when they differ, and file:line for invalid UTF-8.
ParallelCorpus read_parallel(const std::string& src_path, const std::string& tgt_path,
                             const ReadOptions& options = {});

// Tab-separated pairs (e.g. Tatoeba's "english<TAB>french"), columns counted from 0. A line without
// a tab, or whose column count differs from the expected one, throws IOError "file:line: ..." (or
// is skipped and counted with OnBadLine::skip).
ParallelCorpus read_tsv_pairs(const std::string& path, int64_t src_col, int64_t tgt_col,
                              const ReadOptions& options = {});

// ---- tokens and ids -----------------------------------------------------------------------------

struct TokenizedPair {
  std::vector<std::string> src, tgt;
};

std::vector<TokenizedPair> tokenize_pairs(std::span<const SentencePair> pairs,
                                          const TokenizeOptions& src_options = {},
                                          const TokenizeOptions& tgt_options = {});

std::vector<std::vector<std::string>> source_side(std::span<const TokenizedPair> pairs);
std::vector<std::vector<std::string>> target_side(std::span<const TokenizedPair> pairs);

// Ids of each side followed by <eos>.
struct EncodedPair {
  std::vector<int64_t> src, tgt;
};

struct EncodeOptions {
  int64_t max_src_tokens = 0;  // keep the first N tokens (then <eos>); 0 = no limit
  int64_t max_tgt_tokens = 0;
};

struct EncodedCorpus {
  std::vector<EncodedPair> pairs;
  int64_t truncated_src = 0, truncated_tgt = 0;  // how many sides lost tokens
};

EncodedCorpus encode_pairs(std::span<const TokenizedPair> pairs, const Vocab& src_vocab,
                           const Vocab& tgt_vocab, const EncodeOptions& options = {});

// ---- deterministic shuffling --------------------------------------------------------------------

// xoshiro256** seeded through splitmix64: the same seed gives the same stream on every platform
// and standard library (std::shuffle and std distributions do not promise that).
class ShuffleRng {
 public:
  explicit ShuffleRng(uint64_t seed);
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n) by rejection, n >= 1

 private:
  std::array<uint64_t, 4> s_;
};

// Fisher-Yates from the back: for i = n-1 .. 1, swap item i with item below(i + 1).
template <class T>
void shuffle(std::vector<T>& items, ShuffleRng& rng) {
  for (std::size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

// ---- subsets ------------------------------------------------------------------------------------

enum class SubsetMode { first, random };

struct SubsetOptions {
  int64_t count = 0;
  SubsetMode mode = SubsetMode::first;
  uint64_t seed = 0;  // SubsetMode::random only
};

// `count` distinct indices in [0, n), ascending so the subset keeps corpus order. Throws
// ValueError when count is negative or larger than n.
std::vector<int64_t> subset_indices(int64_t n, const SubsetOptions& options);

template <class T>
struct Split {
  std::vector<T> taken, rest;
};

template <class T>
Split<T> split_subset(const std::vector<T>& items, const SubsetOptions& options) {
  const std::vector<int64_t> chosen = subset_indices(static_cast<int64_t>(items.size()), options);
  Split<T> out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const bool take = next < chosen.size() && chosen[next] == static_cast<int64_t>(i);
    (take ? out.taken : out.rest).push_back(items[i]);
    next += take;
  }
  return out;
}

// ---- batches ------------------------------------------------------------------------------------

// Row-major padded ids: src (B, S), tgt_in and tgt_out (B, T). Teacher forcing: tgt_in is
// <bos> + target, tgt_out is target + <eos>, so tgt_out[t] is what the decoder predicts after
// reading tgt_in[..t]. Lengths count <eos>; padding is <pad> (0). index[b] is the row's position
// in the pairs given to make_batches, to put outputs back in corpus order.
struct Batch {
  int64_t batch = 0, src_len_max = 0, tgt_len_max = 0;
  std::vector<int64_t> src, tgt_in, tgt_out;
  std::vector<int64_t> src_lengths, tgt_lengths;
  std::vector<int64_t> index;
};

struct BatchOptions {
  int64_t batch_size = 32;
  // > 0: fill each batch to this many tokens instead of batch_size pairs (batch_size is then
  // unused). A batch's tokens are its padded size: rows x the longest side of any of its pairs,
  // max(source length, target length) with <eos> counted, as in fairseq's --max-tokens.
  int64_t batch_tokens = 0;
  uint64_t seed = 0;             // vary per epoch (e.g. seed + epoch) for new batches
  bool bucket_by_length = true;  // batch pairs of similar source (then target) length
  bool shuffle = true;           // random tie order inside buckets and random batch order
  bool drop_last = false;        // drop the final short batch (sentence batches only)
};

// Throws ValueError on batch_size < 1, batch_tokens < 0, or batch_tokens with drop_last or without
// bucket_by_length (a token cut of an unsorted order would give each seed another batch count).
void check_batch_options(const BatchOptions& options);

// Bucketing: shuffle the pairs (when shuffle), stable-sort by (source length, target length),
// cut into batches, then shuffle the batch order. Sentence batches hold batch_size pairs. Token
// batches are cut greedily along the sorted order: a pair joins the current batch unless that
// would make rows x longest side exceed batch_tokens; a pair longer than batch_tokens alone forms
// a batch of one. The sorted order's lengths do not depend on the seed, so neither do the batch
// count and the batch sizes: only which pairs (among equal lengths) and the order. Without shuffle
// the batches come in sorted (or, without bucketing, corpus) order. Throws ValueError on bad
// options (check_batch_options) or a pair that does not end with <eos>.
std::vector<Batch> make_batches(std::span<const EncodedPair> pairs, const BatchOptions& options);

// make_batches in two steps, so that a caller can build one batch at a time: the rows (indices
// into `pairs`) of each batch, in batch order, then one batch from its rows.
std::vector<std::vector<int64_t>> plan_batches(std::span<const EncodedPair> pairs, const BatchOptions& options);
Batch make_batch(std::span<const EncodedPair> pairs, std::span<const int64_t> rows);

}  // namespace seqgrad::text
