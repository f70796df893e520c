// The JSON answers of `seqgrad serve` (docs/serving.md): per sentence its translations, scores
// and, when asked, alignment, attention and what the explorer shows.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/text/vocab.h"
#include "tools/serve/request.h"
#include "tools/translation.h"

namespace seqgrad::tools::serve {

// One sentence's answer in POST /v1/translate's "translations".
nlohmann::json sentence_json(const Translation& t, const std::string& src, const text::Vocab& tgt_vocab,
                             const ResponseOptions& options);
// POST /translator/translate's answer, as OpenNMT-py's server gives it: a list per n-best rank of
// one {"src", "tgt", "n_best", "pred_score"} per input.
nlohmann::json opennmt_json(const std::vector<Translation>& done, const std::vector<std::string>& src,
                            const text::Vocab& tgt_vocab);

}  // namespace seqgrad::tools::serve
