// The smallest training program: a module with registered submodules, Adam and a loop. A two-layer
// MLP learns XOR; exits 0 when the loss is small.
#include <fmt/core.h>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>
#include <seqgrad/optim/optim.h>

using namespace seqgrad;

struct MLP : nn::Module {
  MLP() : nn::Module("MLP") {}
  nn::Linear fc1 = register_module<nn::Linear>("fc1", {.in_features = 2, .out_features = 8});
  nn::Linear fc2 = register_module<nn::Linear>("fc2", {.in_features = 8, .out_features = 1});
  Tensor operator()(const Tensor& x) const { return fc2(tanh(fc1(x))); }
};

int main() {
  manual_seed(0);
  MLP model;
  Tensor x = tensor({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor y = tensor({0, 1, 1, 0}, {4, 1});
  optim::Adam opt(model.parameters(), {.lr = 0.05});
  double loss_value = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = nn::mse_loss(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_value = loss.item();
  }
  fmt::print("xor: final loss {:.2e}\n", loss_value);
  return loss_value < 1e-3 ? 0 : 1;
}
