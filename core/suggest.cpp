#include "core/suggest.h"

#include <algorithm>

#include <fmt/core.h>

namespace seqgrad {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {  // Levenshtein, one row at a time
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& choices, const std::string& prefix) {
  const std::string* best = nullptr;
  size_t best_distance = 3;  // more than 2 edits is not a typo
  for (const std::string& c : choices) {
    size_t d = edit_distance(word, c);
    if (d < best_distance && 2 * d < std::max(word.size(), c.size())) best = &c, best_distance = d;
  }
  return best ? fmt::format(" (did you mean {}{}?)", prefix, *best) : "";
}

}  // namespace seqgrad
