// The server's JSON answers (tools/serve/response.h).
#include "tools/serve/response.h"

#include <algorithm>

namespace seqgrad::tools::serve {
namespace {

nlohmann::json beam_tree_json(const models::BeamTree& tree, const text::Vocab& tgt_vocab) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const models::BeamNode& n : tree.nodes)
    nodes.push_back({{"parent", n.parent}, {"step", n.step}, {"token", tgt_vocab.token(n.token)},
                     {"token_log_prob", n.token_log_prob}, {"log_prob", n.log_prob}, {"score", n.score},
                     {"fate", models::beam_fate_name(n.fate)}});
  return nodes;
}

nlohmann::json internals_json(const models::AttentionInternals& in) {
  return {{"kind", models::attention_kind_name(in.kind)}, {"query_terms", in.query_terms},
          {"key_terms", in.key_terms}, {"v", in.v}, {"contexts", in.contexts}};
}

// A Transformer's cross-attention scores and their factors, per layer and head: the score of step
// t on source position i is queries[l][h][t] · keys[l][h][i] / √head_dim.
nlohmann::json internals_json(const models::TransformerInternals& in) {
  nlohmann::json queries = nlohmann::json::array(), keys = nlohmann::json::array(), scores = nlohmann::json::array();
  for (const models::TransformerInternals::Layer& layer : in.layers) {
    queries.push_back(head_rows_json(layer.cross_queries));
    keys.push_back(head_rows_json(layer.cross_keys));
    scores.push_back(head_rows_json(layer.cross_scores));
  }
  return {{"kind", "multihead"}, {"head_dim", in.head_dim}, {"queries", std::move(queries)},
          {"keys", std::move(keys)}, {"scores", std::move(scores)}};
}

}  // namespace

nlohmann::json sentence_json(const Translation& t, const std::string& src, const text::Vocab& tgt_vocab,
                             const ResponseOptions& options) {
  nlohmann::json j = translation_json(t, src, tgt_vocab, {.hard_alignment = options.alignment == Alignment::hard,
                                                          .weights = options.alignment == Alignment::soft ||
                                                                     options.attention || options.explain,
                                                          .heads = options.explain});
  if (!options.explain || t.hyps.empty()) return j;
  const models::Hypothesis& best = t.hyps.front();
  j["energies"] = best.energies;
  nlohmann::json steps = nlohmann::json::array();
  for (const std::vector<models::Alternative>& step : best.alternatives) {
    nlohmann::json alternatives = nlohmann::json::array();
    for (const models::Alternative& a : step)
      alternatives.push_back({{"token", tgt_vocab.token(a.token)}, {"probability", a.probability}});
    steps.push_back(std::move(alternatives));
  }
  j["alternatives"] = std::move(steps);
  if (t.beam_tree) j["beam_tree"] = beam_tree_json(*t.beam_tree, tgt_vocab);
  if (t.internals) j["internals"] = internals_json(*t.internals);
  if (t.heads) j["internals"] = internals_json(*t.heads);
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
