// Training corpora larger than memory: one streamed pass that checks and indexes a corpus, and a
// batch source that reads it back through a bounded buffer, shuffling and length-bucketing each
// buffer's pairs deterministically for a seed. Validation and test sets are small and read whole.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "models/text/corpus.h"

namespace seqgrad::text {

// ---- the indexing pass --------------------------------------------------------------------------

// A run of consecutive pairs that one buffer holds: where it starts in the files, how many pairs.
struct Chunk {
  PairReader::Position start;
  int64_t pairs = 0;
};

struct CorpusIndex {
  CorpusFiles files;
  ReadOptions read_options;
  ReadReport report;           // what the pass read and skipped (up to max_pairs)
  int64_t pairs = 0;           // pairs the corpus gives (cleaned, selected, at most max_pairs)
  std::vector<Chunk> chunks;   // consecutive, each of buffer_pairs pairs (the last may be shorter)
};

struct IndexOptions {
  int64_t buffer_pairs = 200000;  // pairs per chunk: the most a StreamingBatches holds at once
  int64_t max_pairs = 0;          // stop after this many pairs (--subset); 0 = all
};

// Sees every pair of the indexing pass, in corpus order: a vocabulary's counting pass, or a
// subword trainer's bounded sample, without a second read of the corpus.
using PairVisitor = std::function<void(const SentencePair&)>;

// Reads the whole corpus once, one pair at a time: every read error (missing file, invalid UTF-8,
// different line counts, a TSV line without a tab; see PairReader) is raised here, before training
// starts. Records the start of every buffer_pairs-th pair and calls `visit` on each pair. Throws
// ValueError when buffer_pairs < 1 or max_pairs < 0. An empty corpus is not an error here: the
// caller names the split (CorpusIndex::pairs == 0).
CorpusIndex index_corpus(const CorpusFiles& files, const IndexOptions& options, const PairVisitor& visit = {},
                         const ReadOptions& read_options = {});

// A uniform random sample of at most `capacity` pairs of a stream of unknown length, in stream
// order (reservoir sampling, Algorithm R, with ShuffleRng: the same seed and stream give the same
// sample everywhere). For a trainer that needs a bounded sample of a large corpus (SentencePiece):
// pass [&](const SentencePair& p) { sample.add(p); } as index_corpus's visitor.
class PairSample {
 public:
  PairSample(int64_t capacity, uint64_t seed);
  void add(const SentencePair& pair);
  // The sampled pairs in the order the stream gave them.
  std::vector<SentencePair> pairs() const;
  int64_t seen() const { return seen_; }

 private:
  int64_t capacity_, seen_ = 0;
  ShuffleRng rng_;
  std::vector<std::pair<int64_t, SentencePair>> kept_;  // (position in the stream, pair)
};

// ---- batch sources ------------------------------------------------------------------------------

// The batches of one training epoch, produced one at a time. The order depends only on the seed
// given to start_epoch (a trainer passes config.seed + epoch), so a resumed run that starts at
// batch `skip` continues with exactly the batches it would have had.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t batches_per_epoch() const = 0;
  // Positions the source before batch `skip` (0-based) of the epoch that `seed` shuffles. Throws
  // ValueError when skip > batches_per_epoch().
  virtual void start_epoch(uint64_t seed, int64_t skip) = 0;
  virtual std::optional<Batch> next() = 0;  // nullopt after the epoch's last batch
};

// make_batches over pairs held in memory (compare's subsets, tests), with options.seed replaced by
// each epoch's.
class MemoryBatches : public BatchSource {
 public:
  MemoryBatches(std::span<const EncodedPair> pairs, BatchOptions options);
  int64_t batches_per_epoch() const override;
  void start_epoch(uint64_t seed, int64_t skip) override;
  std::optional<Batch> next() override;

 private:
  std::span<const EncodedPair> pairs_;
  BatchOptions options_;
  std::vector<std::vector<int64_t>> plan_;
  std::size_t next_ = 0;
};

// Ids of one cleaned pair, each side ending with <eos> (e.g. word tokens through a Vocab, or
// SentencePiece pieces): the caller's encoding, applied as a buffer is filled.
using PairEncoder = std::function<EncodedPair(const SentencePair&)>;

// The indexed corpus read back one chunk at a time. An epoch visits the chunks in an order the
// seed shuffles, reads and encodes one chunk's pairs (at most buffer_pairs), and cuts them into
// make_batches' batches: shuffled, bucketed by length, in shuffled order, with the seed (the first
// chunk in file order uses the epoch's seed itself, so a corpus that fits in one buffer gets
// exactly make_batches(all pairs, seed)). Only the current chunk's ids and its batch plan are
// held. Skipping to a resumed batch reads only the chunk that holds it. With options.batch_tokens a
// chunk's batch count depends on its pairs' lengths (not on the seed): the constructor reads and
// encodes each chunk once to count them.
class StreamingBatches : public BatchSource {
 public:
  StreamingBatches(CorpusIndex index, PairEncoder encode, BatchOptions options);
  int64_t batches_per_epoch() const override;
  void start_epoch(uint64_t seed, int64_t skip) override;
  std::optional<Batch> next() override;

  const CorpusIndex& index() const { return index_; }

 private:
  void read_chunk(std::size_t chunk);  // reads and encodes index_.chunks[chunk] into pairs_
  void load_chunk(std::size_t chunk);  // reads, encodes and plans chunk_order_[chunk]

  CorpusIndex index_;
  PairEncoder encode_;
  BatchOptions options_;
  PairReader reader_;
  std::vector<int64_t> chunk_batches_;  // batches of each chunk, in file order
  uint64_t seed_ = 0;
  std::vector<std::size_t> chunk_order_;
  std::size_t chunk_ = 0;  // position in chunk_order_ of the chunk loaded
  bool loaded_ = false;
  std::vector<EncodedPair> pairs_;  // the loaded chunk's
  std::vector<std::vector<int64_t>> plan_;
  std::size_t next_ = 0;            // next batch of plan_
};

}  // namespace seqgrad::text
