// Source snippet: a VisualAttention module whose forward returns (context, weights) so the weights can be
// plotted as a heatmap. Demonstrates that module in C++ (a Module wrapping scaled dot-product
// attention; every seqgrad attention keeps its last weights, last_weights()), and a heatmap of the
// weights written as an SVG file (a small writer below: the plots of the `seqgrad attention`
// command are not part of the installed library).
// The input is self-attention over a toy sentence whose keys are its token embeddings, so the
// picture has a known shape: each word attends most to itself, and a repeated word ("the") splits
// its weight equally between its occurrences. Both are checked, and the SVG is checked to hold
// one cell per weight. Usage: 06_visual_attention [out.svg] (default visual_attention.svg).
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;

struct VisualAttention : nn::Module {
  VisualAttention() : nn::Module("VisualAttention") {}
  nn::ScaledDotProductAttention attention = register_module<nn::ScaledDotProductAttention>("attention");
  // queries (B, Q, D), keys (B, K, D), values (B, K, Dv) -> {context (B, Q, Dv), weights (B, Q, K)}.
  // The weights are detached: they are for looking at, not for the loss.
  std::pair<Tensor, Tensor> operator()(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                       const Tensor& mask = {}) const {
    Tensor context = attention(queries, keys, values, mask);
    return {context, attention.last_weights()};
  }
};

// A heatmap of weights (Q, K): rows are queries, columns keys, darker = more weight, each cell
// labelled with its value. Written to a temporary file and renamed, so a reader never sees half.
void write_heatmap_svg(const std::string& path, const Tensor& weights, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols) {
  const int cell = 44, left = 60, top = 60;
  std::vector<double> w = weights.to_vector<double>();
  std::string svg = fmt::format(R"s(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)s" "\n",
                                left + cell * cols.size() + 10, top + cell * rows.size() + 10);
  for (size_t j = 0; j < cols.size(); ++j)
    svg += fmt::format(R"s(<text x="{}" y="{}" text-anchor="middle">{}</text>)s" "\n", left + cell * j + cell / 2, top - 10, cols[j]);
  for (size_t i = 0; i < rows.size(); ++i) {
    svg += fmt::format(R"s(<text x="{}" y="{}" text-anchor="end">{}</text>)s" "\n", left - 6, top + cell * i + cell / 2 + 4, rows[i]);
    for (size_t j = 0; j < cols.size(); ++j) {
      double v = w[i * cols.size() + j];
      int shade = static_cast<int>(255 * (1 - v));  // white (0) to blue (1)
      svg += fmt::format(R"s(<rect class="cell" x="{}" y="{}" width="{}" height="{}" fill="rgb({},{},255)"/>)s"
                         R"s(<text x="{}" y="{}" text-anchor="middle" fill="{}">{:.2f}</text>)s" "\n",
                         left + cell * j, top + cell * i, cell, cell, shade, shade, left + cell * j + cell / 2,
                         top + cell * i + cell / 2 + 4, v > 0.5 ? "white" : "black", v);
    }
  }
  svg += "</svg>\n";
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << svg;
  std::filesystem::rename(tmp, path);
}

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : "visual_attention.svg";
  manual_seed(0);
  std::vector<std::string> words = {"the", "cat", "sat", "on", "the", "mat"};
  Tensor ids = from_vector<int64_t>({0, 1, 2, 3, 0, 4}, {1, 6});  // "the" twice
  nn::Embedding embed({.num_embeddings = 5, .embedding_dim = 16});
  Tensor x = embed(ids).detach();  // (1, 6, 16) keys = queries = values

  VisualAttention visual;
  auto [context, weights] = visual(x, x, x);
  Tensor map = weights.select(0, 0);  // (Q, K)
  fmt::print("weights\n{}\n", to_string(map));
  expect(context.shape() == Shape{1, 6, 16} && weights.shape() == Shape{1, 6, 6},
         "forward returns the context (B, Q, D) and the weights (B, Q, K)");

  std::vector<int64_t> best = argmax(map, 1).to_vector<int64_t>();
  std::vector<int64_t> id = ids.select(0, 0).to_vector<int64_t>();
  bool attends_to_itself = true;
  for (size_t i = 0; i < best.size(); ++i) attends_to_itself = attends_to_itself && id[best[i]] == id[i];
  expect(attends_to_itself, "each word's strongest key is the same word");
  std::vector<double> the = map.select(0, 0).to_vector<double>();
  expect(the[0] == the[4], "\"the\" gives its two occurrences exactly equal weight (identical keys)");

  write_heatmap_svg(path, map, words, words);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t cells = 0;
  for (size_t at = text.find("class=\"cell\""); at != std::string::npos; at = text.find("class=\"cell\"", at + 1)) ++cells;
  fmt::print("wrote {} ({} bytes)\n", path, text.size());
  expect(text.rfind("<svg", 0) == 0 && text.find("</svg>") != std::string::npos && cells == 36,
         "the SVG heatmap has one cell per weight (6 x 6)");
  return examples::exit_code();
}
