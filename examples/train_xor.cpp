// The smallest training program: data, a module, Adam, the loop, evaluation and a checkpoint.
// A two-layer MLP learns XOR; exits 0 when it classifies all four points.
#include <fmt/core.h>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>
#include <seqgrad/optim/optim.h>

using namespace seqgrad;

struct MLP : nn::Module {  // a module is what it registers: declare and register in one statement
  MLP() : nn::Module("MLP") {}
  nn::Linear fc1 = register_module<nn::Linear>("fc1", {.in_features = 2, .out_features = 8});
  nn::Linear fc2 = register_module<nn::Linear>("fc2", {.in_features = 8, .out_features = 2});
  Tensor operator()(const Tensor& x) const { return fc2(tanh(fc1(x))); }  // (N, 2) -> logits (N, 2)
};

int main() {
  manual_seed(0);                                                 // reproducible initial weights
  Tensor x = tensor({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});            // four points, float32
  Tensor y = tensor({0, 1, 1, 0}, {4}, {.dtype = DType::i64});    // their classes
  MLP model;
  optim::Adam opt(model.parameters(), {.lr = 0.05});
  for (int step = 0; step < 300; ++step) {
    Tensor loss = nn::cross_entropy(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  model.eval();           // inference behaviour (dropout off, were there any)
  NoGradGuard no_grad;    // evaluation records no graph
  const double right = sum(to_dtype(eq(model(x).argmax(1), y), DType::f32)).item();
  nn::save_checkpoint("xor.safetensors", model);  // nn::load_checkpoint reads it back
  fmt::print("xor: {} of 4 points right\n", right);
  return right == 4 ? 0 : 1;
}
