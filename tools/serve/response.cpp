// The server's JSON answers (tools/serve/response.h).
#include "tools/serve/response.h"

#include <algorithm>

namespace seqgrad::tools::serve {
namespace {

// The labels of a hypothesis's attention matrix (as tools/translator.cpp's heatmaps): rows are the
// output tokens, then "<eos>" when decoding ended with it (that step's row is kept); columns are the
// source tokens as encoded, then "<eos>".
std::vector<std::string> with_eos(std::vector<std::string> tokens, size_t count) {
  if (count > tokens.size()) tokens.push_back("<eos>");
  return tokens;
}

// Per output token, the source position it attends to most (ties: the first).
std::vector<size_t> hard_alignment(const models::Hypothesis& h, size_t tokens) {
  std::vector<size_t> out;
  for (size_t i = 0; i < tokens && i < h.attention.size(); ++i) {
    const std::vector<float>& row = h.attention[i];
    out.push_back(static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  return out;
}

}  // namespace

nlohmann::json sentence_json(const Translation& t, const std::string& src, const text::Vocab& tgt_vocab,
                             const ResponseOptions& options) {
  nlohmann::json nbest = nlohmann::json::array();
  for (size_t n = 0; n < t.hyps.size(); ++n)
    nbest.push_back({{"translation", tgt_vocab.detokenize(t.out_tokens[n])}, {"tokens", t.out_tokens[n]},
                     {"score", t.hyps[n].score}, {"log_prob", t.hyps[n].log_prob}, {"finished", t.hyps[n].finished}});
  const models::Hypothesis& best = t.hyps.front();
  nlohmann::json j{{"src", src},
                   {"src_tokens", t.src_tokens},
                   {"translation", nbest[0]["translation"]},
                   {"tokens", t.out_tokens.front()},
                   {"score", best.score},
                   {"log_prob", best.log_prob},
                   {"finished", best.finished},
                   {"nbest", std::move(nbest)}};
  if (options.alignment == Alignment::hard) j["alignment"] = hard_alignment(best, t.out_tokens.front().size());
  if (options.alignment == Alignment::soft) j["alignment"] = best.attention;
  if (options.attention || options.explain) {
    j["attention"] = best.attention;
    j["attention_rows"] = with_eos(t.out_tokens.front(), best.attention.size());
    j["attention_columns"] = with_eos(t.src_tokens, best.attention.empty() ? 0 : best.attention.front().size());
  }
  if (options.explain) {
    j["token_log_probs"] = best.token_log_probs;
    j["energies"] = best.energies;
  }
  return j;
}

nlohmann::json opennmt_json(const std::vector<Translation>& done, const std::vector<std::string>& src,
                            const text::Vocab& tgt_vocab) {
  size_t ranks = 0;
  for (const Translation& t : done) ranks = std::max(ranks, t.hyps.size());
  nlohmann::json out = nlohmann::json::array();
  for (size_t n = 0; n < ranks; ++n) {
    nlohmann::json rank = nlohmann::json::array();
    for (size_t i = 0; i < done.size(); ++i) {
      const size_t k = std::min(n, done[i].hyps.size() - 1);
      rank.push_back({{"src", src[i]}, {"tgt", tgt_vocab.detokenize(done[i].out_tokens[k])},
                      {"n_best", ranks}, {"pred_score", done[i].hyps[k].score}});
    }
    out.push_back(std::move(rank));
  }
  return out;
}

}  // namespace seqgrad::tools::serve
