// Where a tensor's storage lives: the CPU, or a CUDA device when the CUDA backend is built.
#pragma once
#include <cstdint>

#include <fmt/format.h>

namespace seqgrad {

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int8_t index = 0;

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int i = 0) { return {Kind::cuda, static_cast<int8_t>(i)}; }
  constexpr bool is_cpu() const { return kind == Kind::cpu; }
  constexpr bool is_cuda() const { return kind == Kind::cuda; }
  friend constexpr bool operator==(Device, Device) = default;
};

}  // namespace seqgrad

template <>
struct fmt::formatter<seqgrad::Device> : fmt::formatter<std::string_view> {
  auto format(seqgrad::Device d, format_context& ctx) const {
    if (d.is_cpu()) return fmt::format_to(ctx.out(), "cpu");
    return fmt::format_to(ctx.out(), "cuda:{}", d.index);
  }
};
