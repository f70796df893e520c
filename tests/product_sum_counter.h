// Counts the autograd engine's gradient-product sums (core/ops_hooks.h) while alive: how many GEMMs
// the weight gradients took, and how many terms each summed (Grads::add_product).
#pragma once
#include <span>
#include <vector>

#include "core/ops_hooks.h"

namespace seqgrad::testing {

class ProductSumCounter {
 public:
  ProductSumCounter() : saved_(ops_hooks("ProductSumCounter")) {
    calls_.clear();
    original_ = saved_.sum_of_products;
    OpsHooks counting = saved_;
    counting.sum_of_products = [](std::span<const ProductTerm> terms, const Tensor& acc) {
      calls_.push_back(terms.size());
      return original_(terms, acc);
    };
    register_ops_hooks(counting);
  }
  ~ProductSumCounter() { register_ops_hooks(saved_); }
  ProductSumCounter(const ProductSumCounter&) = delete;
  ProductSumCounter& operator=(const ProductSumCounter&) = delete;
  const std::vector<size_t>& calls() const { return calls_; }

 private:
  OpsHooks saved_;
  static inline std::vector<size_t> calls_;
  static inline Tensor (*original_)(std::span<const ProductTerm>, const Tensor&) = nullptr;
};

}  // namespace seqgrad::testing
