// Devices without a GPU: the errors of an unavailable device, and the device plumbing (factories,
// to(device) and its gradient, item, module.to, mixed-device errors) on a stand-in "cuda" device
// whose memory is host memory (DeviceMemory registered by the test, no kernels: only operations
// that move or check tensors run on it). The CUDA kernels themselves are tested against the CPU in
// tests/test_cuda_parity.cpp, which needs a GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/autograd.h"
#include "core/device_memory.h"
#include "core/rng.h"
#include "core/serialize.h"
#include "nn/linear.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {

// Host memory posing as a CUDA device, counting what it is asked to do.
class HostDeviceMemory final : public DeviceMemory {
 public:
  const char* name() const override { return "cuda"; }
  int device_count() override { return 1; }
  const char* unavailable_reason() override { return ""; }
  void* allocate(size_t nbytes, Device) override {
    ++allocations;
    return std::malloc(nbytes);
  }
  void deallocate(void* ptr, size_t, Device) noexcept override {
    ++frees;
    std::free(ptr);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) override {
    ++copies;
    last_copy_from = src_device;
    last_copy_to = dst_device;
    std::memcpy(dst, src, nbytes);
  }
  void fill(void* dst, Device, const void* pattern, size_t element_size, size_t count) override {
    ++fills;
    for (size_t i = 0; i < count; ++i) std::memcpy(static_cast<char*>(dst) + i * element_size, pattern, element_size);
  }
  int allocations = 0, frees = 0, copies = 0, fills = 0;
  Device last_copy_from, last_copy_to;
};

// Installs the stand-in for one test and puts back whatever the build registered (nothing in a
// CPU-only build, the CUDA caching allocator in a CUDA build).
struct StandInDevice {
  StandInDevice() : previous(device_memory(Device::Kind::cuda)) { register_device_memory(Device::Kind::cuda, &memory); }
  ~StandInDevice() { register_device_memory(Device::Kind::cuda, previous); }
  HostDeviceMemory memory;
  DeviceMemory* previous;
};

const Device kCuda = Device::cuda(0);

}  // namespace

TEST_CASE("device: a missing CUDA device is a DeviceError naming the request and the reason") {
  if (cuda_is_available()) return;  // with a GPU these calls succeed (tests/test_cuda_parity.cpp)
  CHECK(cuda_device_count() == 0);
  doctest::Contains storage("storage: cuda:0 is not available: ");
  CHECK_THROWS_WITH_AS(zeros({2, 3}, {.device = kCuda}), storage, DeviceError);
  CHECK_THROWS_WITH_AS(empty({0}, {.device = kCuda}), storage, DeviceError);  // even an empty tensor
  doctest::Contains to("to: cuda:0 is not available: ");
  CHECK_THROWS_WITH_AS(ones({2}).to(kCuda), to, DeviceError);
  // the reason says why: a CPU-only build, or no device/driver for the CUDA build
  try {
    ones({2}).to(kCuda);
  } catch (const DeviceError& e) {
    std::string what = e.what();
    bool cpu_only = device_memory(Device::Kind::cuda) == nullptr;
    INFO(what);
    CHECK(what.find(cpu_only ? "this seqgrad build has no CUDA backend" : "CUDA device") != std::string::npos);
  }
}

TEST_CASE("device: names parse as on command lines") {
  CHECK(parse_device("cpu") == Device::cpu());
  CHECK(parse_device("cuda") == Device::cuda(0));
  CHECK(parse_device("cuda:3") == Device::cuda(3));
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1x", "cuda:-1", "cuda:999", "CPU", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_device(bad), doctest::Contains("device: expected cpu, cuda or cuda:N"), ValueError);
  }
}

TEST_CASE("device: a device index beyond the devices present is refused") {
  StandInDevice device;
  CHECK_THROWS_WITH_AS(zeros({2}, {.device = Device::cuda(1)}),
                       doctest::Contains("storage: cuda:1 is not available: 1 cuda device present"), DeviceError);
}

TEST_CASE("device: factories build on the device (fill in place, or one copy of host values)") {
  StandInDevice device;
  Tensor z = zeros({2, 3}, {.dtype = DType::f64, .device = kCuda});
  CHECK(z.device() == kCuda);
  CHECK(device.memory.fills == 1);
  CHECK(device.memory.copies == 0);
  CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));  // read back through a copy
  Tensor f = full({3}, 2.5, {.device = kCuda, .requires_grad = true});
  CHECK(f.requires_grad());
  CHECK(f.to_vector<float>() == std::vector<float>{2.5f, 2.5f, 2.5f});
  Tensor r = arange(0, 4, 1, {.dtype = DType::i64, .device = kCuda});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  Tensor v = tensor({1, 2, 3, 4}, {2, 2}, {.dtype = DType::f64, .device = kCuda});
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  CHECK(v.select(0, 1).select(0, 0).item() == 3.0);  // item() of a device element: one small copy
  manual_seed(7);
  std::vector<float> on_host = rand({5}).to_vector<float>();
  manual_seed(7);
  CHECK(rand({5}, {.device = kCuda}).to_vector<float>() == on_host);  // the same stream on any device
  CHECK(to_string(v).find("device=cuda:0") != std::string::npos);
}

TEST_CASE("device: to(device) copies across devices, contiguously, and the gradient comes back") {
  StandInDevice device;
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor xt = x.t();  // a non-contiguous view: copied dense on the CPU first
  Tensor y = xt.to(kCuda);
  CHECK(y.device() == kCuda);
  CHECK(y.is_contiguous());
  CHECK(y.requires_grad());
  CHECK(device.memory.last_copy_from == Device::cpu());
  CHECK(device.memory.last_copy_to == kCuda);
  CHECK(y.cpu().to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(device.memory.last_copy_from == kCuda);
  CHECK(y.to(kCuda).impl() == y.impl());  // already there: no copy
  // backward: the seed gradient is built on the device, then copied back through "to"
  y.backward(ones_like(y));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == Device::cpu());
  CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 1.0));
  // integer tensors move too, without history
  Tensor ids = tensor({3, 1}, {.dtype = DType::i64}).to(kCuda);
  CHECK(ids.dtype() == DType::i64);
  CHECK(ids.cpu().to_vector<int64_t>() == std::vector<int64_t>{3, 1});
}

TEST_CASE("device: ops refuse operands on different devices, naming the op and both devices") {
  StandInDevice device;
  Tensor a = ones({2, 3}, {.dtype = DType::f64});
  Tensor b = ones({2, 3}, {.dtype = DType::f64, .device = kCuda});
  CHECK_THROWS_WITH_AS(add(a, b), "add: operands on different devices: (2, 3) on cpu, (2, 3) on cuda:0", DeviceError);
  CHECK_THROWS_WITH_AS(matmul(a, b.t()), doctest::Contains("matmul: operands on different devices"), DeviceError);
  CHECK_THROWS_WITH_AS(where(gt(a, 0.0), b, b),
                       "where: condition (2, 3) is on cpu, but the input (2, 3) is on cuda:0", DeviceError);
  Tensor ids = tensor({0, 1}, {.dtype = DType::i64});
  CHECK_THROWS_WITH_AS(embedding(b, ids), "embedding: ids (2,) is on cpu, but the input (2, 3) is on cuda:0",
                       DeviceError);
  CHECK_THROWS_WITH_AS(index_select(b, 0, ids), doctest::Contains("index_select: index (2,) is on cpu"), DeviceError);
  CHECK_THROWS_WITH_AS(gather(b, 1, zeros({2, 1}, {.dtype = DType::i64})),
                       doctest::Contains("gather: index (2, 1) is on cpu, but the input (2, 3) is on cuda:0"),
                       DeviceError);
}

TEST_CASE("device: Module::to moves parameters (with their gradients) and keeps them trainable") {
  StandInDevice device;
  nn::Linear layer({.in_features = 3, .out_features = 2});
  layer.to(DType::f64);
  std::vector<double> weight = layer.parameters()[0].to_vector<double>();
  layer.parameters()[0].set_grad(ones({2, 3}, {.dtype = DType::f64}));
  Tensor held = layer.weight;  // as an optimizer holds it: the move is in place
  layer.to(kCuda);
  CHECK(held.device() == kCuda);
  CHECK(held.impl() == layer.weight.impl());
  for (const auto& [name, p] : layer.named_parameters()) {
    CAPTURE(name);
    CHECK(p.device() == kCuda);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  Tensor w = layer.parameters()[0];
  CHECK(w.to_vector<double>() == weight);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().device() == kCuda);
  layer.to(Device::cpu());
  CHECK(layer.parameters()[0].device() == Device::cpu());
  CHECK(layer.parameters()[0].to_vector<double>() == weight);
}

TEST_CASE("device: device tensors are saved through a copy to the CPU") {
  StandInDevice device;
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f64}).to(kCuda);
  const std::string path = "test_core_device_save.safetensors";
  save_tensors(path, {{"x", x}});
  TensorFile loaded = load_tensors(path);
  std::remove(path.c_str());
  CHECK(loaded.tensors.at("x").device() == Device::cpu());
  CHECK(loaded.tensors.at("x").to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("device: device memory is returned when the last tensor of a storage goes") {
  StandInDevice device;
  {
    Tensor t = zeros({4}, {.device = kCuda});
    Tensor view = t.narrow(0, 1, 2);  // shares the storage
    t = Tensor();
    CHECK(device.memory.frees == 0);
  }
  CHECK(device.memory.allocations == 1);
  CHECK(device.memory.frees == 1);
}
