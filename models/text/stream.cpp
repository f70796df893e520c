// The indexing pass over a training corpus, and batches from memory or streamed from the files.
#include "models/text/stream.h"

#include <algorithm>

#include "core/error.h"

namespace seqgrad::text {

CorpusIndex index_corpus(const CorpusFiles& files, const IndexOptions& options, const PairVisitor& visit,
                         const ReadOptions& read_options) {
  SG_CHECK_VALUE(options.buffer_pairs >= 1, "index_corpus: buffer_pairs = {} must be >= 1", options.buffer_pairs);
  SG_CHECK_VALUE(options.max_pairs >= 0, "index_corpus: max_pairs = {} must be >= 0 (0 = all)", options.max_pairs);
  CorpusIndex index{.files = files, .read_options = read_options, .report = {}, .pairs = 0, .chunks = {}};
  PairReader reader(files, read_options);
  for (;;) {
    if (options.max_pairs > 0 && index.pairs == options.max_pairs) {
      reader.check_aligned_to_end();  // stopping early must not skip the line-count check
      break;
    }
    const PairReader::Position before = reader.position();
    std::optional<SentencePair> pair = reader.next();
    if (!pair) break;
    // A chunk starts where the line of its first pair starts: the lines skipped before it are read
    // again (and skipped again) when the chunk is loaded, so `before` is a valid place to seek to.
    if (index.pairs % options.buffer_pairs == 0) index.chunks.push_back({.start = before, .pairs = 0});
    ++index.chunks.back().pairs;
    ++index.pairs;
    if (visit) visit(*pair);
  }
  index.report = reader.report();
  return index;
}

// ---- PairSample ---------------------------------------------------------------------------------

PairSample::PairSample(int64_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {
  SG_CHECK_VALUE(capacity >= 1, "PairSample: capacity = {} must be >= 1", capacity);
}

void PairSample::add(const SentencePair& pair) {
  const int64_t position = seen_++;
  if (position < capacity_) {
    kept_.emplace_back(position, pair);
    return;
  }
  // Algorithm R: the n-th item (n = position + 1) replaces a random kept one with probability
  // capacity / n, which keeps every item seen so far in the sample with that same probability.
  const auto slot = static_cast<int64_t>(rng_.below(static_cast<uint64_t>(position) + 1));
  if (slot < capacity_) kept_[static_cast<std::size_t>(slot)] = {position, pair};
}

std::vector<SentencePair> PairSample::pairs() const {
  std::vector<std::pair<int64_t, SentencePair>> ordered = kept_;
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<SentencePair> out;
  out.reserve(ordered.size());
  for (auto& [position, pair] : ordered) out.push_back(std::move(pair));
  return out;
}

// ---- MemoryBatches ------------------------------------------------------------------------------

MemoryBatches::MemoryBatches(std::span<const EncodedPair> pairs, BatchOptions options)
    : pairs_(pairs), options_(options) {
  plan_ = plan_batches(pairs_, options_);  // checks the options and the pairs once
}

int64_t MemoryBatches::batches_per_epoch() const { return static_cast<int64_t>(plan_.size()); }

void MemoryBatches::start_epoch(uint64_t seed, int64_t skip) {
  options_.seed = seed;
  plan_ = plan_batches(pairs_, options_);
  SG_CHECK_VALUE(skip >= 0 && skip <= batches_per_epoch(), "batches: cannot start at batch {} of an epoch of {}",
                 skip, batches_per_epoch());
  next_ = static_cast<std::size_t>(skip);
}

std::optional<Batch> MemoryBatches::next() {
  if (next_ >= plan_.size()) return std::nullopt;
  return make_batch(pairs_, plan_[next_++]);
}

// ---- StreamingBatches ---------------------------------------------------------------------------

namespace {

// The batch seed of the chunk at `chunk` in file order: the epoch's seed for the first, so that a
// corpus in one chunk is batched exactly as make_batches(seed) batches it.
uint64_t chunk_seed(uint64_t seed, std::size_t chunk) {
  return seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(chunk);
}

}  // namespace

StreamingBatches::StreamingBatches(CorpusIndex index, PairEncoder encode, BatchOptions options)
    : index_(std::move(index)), encode_(std::move(encode)), options_(options), reader_(index_.files,
                                                                                         index_.read_options) {
  check_batch_options(options_);
  SG_CHECK_VALUE(static_cast<bool>(encode_), "StreamingBatches: no pair encoder given");
  const int64_t size = options_.batch_size;
  for (std::size_t chunk = 0; chunk < index_.chunks.size(); ++chunk) {
    const int64_t pairs = index_.chunks[chunk].pairs;
    if (options_.batch_tokens == 0) {
      chunk_batches_.push_back(options_.drop_last ? pairs / size : (pairs + size - 1) / size);
      continue;
    }
    read_chunk(chunk);
    BatchOptions sorted = options_;
    sorted.shuffle = false;  // the count is the same for every seed (plan_batches)
    chunk_batches_.push_back(static_cast<int64_t>(plan_batches(pairs_, sorted).size()));
  }
  pairs_.clear();
  pairs_.shrink_to_fit();
}

int64_t StreamingBatches::batches_per_epoch() const {
  int64_t total = 0;
  for (int64_t n : chunk_batches_) total += n;
  return total;
}

void StreamingBatches::start_epoch(uint64_t seed, int64_t skip) {
  SG_CHECK_VALUE(skip >= 0 && skip <= batches_per_epoch(), "batches: cannot start at batch {} of an epoch of {}",
                 skip, batches_per_epoch());
  seed_ = seed;
  chunk_order_.resize(index_.chunks.size());
  for (std::size_t i = 0; i < chunk_order_.size(); ++i) chunk_order_[i] = i;
  if (options_.shuffle && chunk_order_.size() > 1) {
    ShuffleRng rng(seed ^ 0xC2B2AE3D27D4EB4Full);  // not the batches' stream
    shuffle(chunk_order_, rng);
  }
  // Whole chunks before the resumed batch are skipped without reading them.
  chunk_ = 0;
  while (chunk_ < chunk_order_.size() && skip >= chunk_batches_[chunk_order_[chunk_]])
    skip -= chunk_batches_[chunk_order_[chunk_++]];
  loaded_ = false;
  pairs_.clear();
  plan_.clear();
  if (chunk_ < chunk_order_.size()) {
    load_chunk(chunk_);
    next_ = static_cast<std::size_t>(skip);
  }
}

void StreamingBatches::read_chunk(std::size_t chunk) {
  const Chunk& c = index_.chunks[chunk];
  pairs_.clear();
  pairs_.reserve(static_cast<std::size_t>(c.pairs));
  reader_.seek(c.start);
  while (static_cast<int64_t>(pairs_.size()) < c.pairs) {
    std::optional<SentencePair> pair = reader_.next();
    SG_CHECK_IO(pair.has_value(), "{} changed since it was read: chunk {} ends after {} of its {} pairs",
                index_.files.describe(), chunk, pairs_.size(), c.pairs);
    pairs_.push_back(encode_(*pair));
  }
}

void StreamingBatches::load_chunk(std::size_t position) {
  const std::size_t chunk = chunk_order_[position];
  plan_.clear();
  read_chunk(chunk);
  BatchOptions options = options_;
  options.seed = chunk_seed(seed_, chunk);
  plan_ = plan_batches(pairs_, options);
  // a resumed run counts on every chunk giving the batches counted at the start
  SG_CHECK_IO(static_cast<int64_t>(plan_.size()) == chunk_batches_[chunk],
              "{} changed since it was read: chunk {} gives {} batches, not {}", index_.files.describe(), chunk,
              plan_.size(), chunk_batches_[chunk]);
  next_ = 0;
  loaded_ = true;
}

std::optional<Batch> StreamingBatches::next() {
  while (loaded_ && next_ >= plan_.size()) {
    if (++chunk_ >= chunk_order_.size()) {
      loaded_ = false;
      pairs_.clear();
      pairs_.shrink_to_fit();
      plan_.clear();
      return std::nullopt;
    }
    load_chunk(chunk_);
  }
  if (!loaded_) return std::nullopt;
  return make_batch(pairs_, plan_[next_++]);
}

}  // namespace seqgrad::text
