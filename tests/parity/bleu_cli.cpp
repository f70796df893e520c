// bleu_cli HYP REF [--lowercase] [--tokenize 13a|none]: prints corpus BLEU with 6 decimals and its
// score line, then corpus chrF (--lowercase applies to it too) the same way, for
// tests/parity/test_bleu_sacrebleu.py to compare with sacrebleu.corpus_bleu and corpus_chrf.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "models/text/bleu.h"
#include "models/text/chrf.h"
#include "models/text/corpus.h"

namespace {

int usage() {
  std::fputs("usage: bleu_cli HYP_FILE REF_FILE [--lowercase] [--tokenize 13a|none]\n", stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace seqgrad::text;
  if (argc < 3) return usage();
  BleuOptions options;
  for (int i = 3; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--lowercase") {
      options.lowercase = true;
    } else if (arg == "--tokenize" && i + 1 < argc &&
               (std::string_view(argv[i + 1]) == "13a" ||
                std::string_view(argv[i + 1]) == "none")) {
      options.tokenize =
          std::string_view(argv[++i]) == "13a" ? BleuTokenize::v13a : BleuTokenize::none;
    } else {
      return usage();
    }
  }
  try {
    const std::vector<std::string> hyp = read_lines(argv[1]), ref = read_lines(argv[2]);
    const BleuScore s = corpus_bleu(hyp, ref, options);
    std::printf("%.6f\n", s.score);
    std::printf("%s\n", s.format().c_str());
    const ChrfScore c = corpus_chrf(hyp, ref, {.lowercase = options.lowercase});
    std::printf("%.6f\n", c.score);
    std::printf("%s\n", c.format().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bleu_cli: %s\n", e.what());
    return 1;
  }
  return 0;
}
