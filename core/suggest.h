// "Did you mean ...?" for a mistyped name (an option, a command, a config field): the closest of
// the choices by edit distance, when it is close enough to be a typo.
#pragma once
#include <string>
#include <vector>

namespace seqgrad {

// " (did you mean <prefix>X?)" when one of `choices` is a likely typo of `word` (edit distance <= 2
// and less than half its length), else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& choices,
                         const std::string& prefix = "");

}  // namespace seqgrad
