// The JSON answers of `seqgrad serve` (docs/serving.md). A sentence's object is
// tools::translation_json's, the shape `translate --json` prints (docs/outputs.md); serve adds
// only what the explorer asks for.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/text/vocab.h"
#include "tools/serve/request.h"
#include "tools/translator.h"

namespace seqgrad::tools::serve {

// One sentence's answer in POST /v1/translate's "translations": translation_json's object; with
// "explain", also "energies" (the attention's pre-softmax rows, where the kind has them) and
// "alternatives" (per produced token, its step's most probable tokens with their probabilities),
// "beam_tree" (beam search's nodes: docs/serving.md) and "internals" (the attention's terms:
// models::AttentionInternals; a Transformer's: the cross-attention's queries, keys and scores per
// layer and head, models::TransformerInternals, beside attention.heads, its every layer and head).
nlohmann::json sentence_json(const Translation& t, const std::string& src, const text::Vocab& tgt_vocab,
                             const ResponseOptions& options);
// POST /translator/translate's answer, as OpenNMT-py's server gives it: a list per n-best rank of
// one {"src", "tgt", "n_best", "pred_score"} per input.
nlohmann::json opennmt_json(const std::vector<Translation>& done, const std::vector<std::string>& src,
                            const text::Vocab& tgt_vocab);

}  // namespace seqgrad::tools::serve
