// The communicator and DistributedDataParallel, run as one rank or under
// `mpirun -np N` (meson test 'dist_mpi' runs 2 ranks over loopback). Every rank computes the
// expected values itself (each rank's inputs come from seeds it can reproduce), so the same checks
// hold for any world size (`test_dist --local` runs them in one process without MPI).
// `test_dist --dead-rank` and `--silent-rank` are the failure scenarios that
// tests/test_dist_failures.py drives.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "core/rng.h"
#include "dist/communicator.h"
#include "nn/distributed.h"
#include "nn/linear.h"

using namespace seqgrad;

namespace {

constexpr TensorOptions kF64 = {.dtype = DType::f64};

dist::Communicator& comm() { return *dist::world(); }

// Rank r's tensor for a test: reproducible on every rank.
Tensor rank_values(int rank, const Shape& shape, DType dtype, uint64_t salt) {
  manual_seed(1000 * salt + rank);
  return randn(shape, {.dtype = dtype});
}

Tensor sum_over_ranks(const Shape& shape, DType dtype, uint64_t salt) {
  Tensor total = zeros(shape, {.dtype = DType::f64});
  for (int r = 0; r < comm().world_size(); ++r) total = total + rank_values(r, shape, dtype, salt).to(DType::f64);
  return total;
}

void check_close(const Tensor& actual, const Tensor& expected, double tolerance) {
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]) / (1.0 + std::abs(e[i])));
  CHECK(worst <= tolerance);
}

double tolerance_for(DType dtype) { return dtype == DType::f32 ? 1e-6 : 1e-14; }

}  // namespace

TEST_CASE("world: rank and size come from the MPI environment") {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  CHECK(comm().world_size() == (size ? std::atoi(size) : 1));
  CHECK(comm().rank() == (rank ? std::atoi(rank) : 0));
  CHECK(comm().backend() == (dist::launched_by_mpi() ? "mpi" : "local"));
}

TEST_CASE("allreduce: sum and mean on many sizes, float32 and float64") {
  uint64_t salt = 1;
  for (DType dtype : {DType::f32, DType::f64})
    for (int64_t n : {0, 1, 2, 7, 1000, 65537}) {
      CAPTURE(n);
      CAPTURE(dtype);
      Tensor t = rank_values(comm().rank(), {n}, dtype, salt);
      comm().allreduce(t);
      check_close(t, sum_over_ranks({n}, dtype, salt), tolerance_for(dtype));
      Tensor m = rank_values(comm().rank(), {n}, dtype, salt);
      comm().allreduce(m, dist::ReduceOp::mean);
      check_close(m, sum_over_ranks({n}, dtype, salt) / static_cast<double>(comm().world_size()),
                  tolerance_for(dtype));
      ++salt;
    }
}

TEST_CASE("allreduce and broadcast write through non-contiguous views") {
  const int rank = comm().rank();
  Tensor base = rank_values(rank, {6, 5}, DType::f64, 50);
  Tensor transposed = base.t();  // (5, 6), strides (1, 5)
  REQUIRE(!transposed.is_contiguous());
  comm().allreduce(transposed);
  check_close(base, sum_over_ranks({6, 5}, DType::f64, 50), 1e-14);

  Tensor strided_base = rank_values(rank, {4, 10}, DType::f32, 51);
  Tensor every_other = strided_base.slice(1, 0, 10, 2);  // (4, 5), stride 2 in the last dimension
  comm().allreduce(every_other, dist::ReduceOp::mean);
  Tensor expected = rank_values(rank, {4, 10}, DType::f32, 51).to(DType::f64);
  Tensor mean = sum_over_ranks({4, 10}, DType::f32, 51) / static_cast<double>(comm().world_size());
  check_close(strided_base.slice(1, 0, 10, 2), mean.slice(1, 0, 10, 2), 1e-6);
  check_close(strided_base.slice(1, 1, 10, 2), expected.slice(1, 1, 10, 2), 0.0);  // untouched

  const int last = comm().world_size() - 1;
  Tensor column = rank_values(rank, {3, 4}, DType::f64, 52);
  comm().broadcast(column.t(), last);
  check_close(column, rank_values(last, {3, 4}, DType::f64, 52), 0.0);
}

TEST_CASE("broadcast: every rank gets the root's values; zero and one element") {
  for (int64_t n : {0, 1, 33}) {
    for (int root = 0; root < comm().world_size(); ++root) {
      Tensor t = rank_values(comm().rank(), {n}, DType::f32, 60 + n);
      comm().broadcast(t, root);
      check_close(t, rank_values(root, {n}, DType::f32, 60 + n), 0.0);
    }
  }
}

TEST_CASE("allreduce_async: several in flight, finished in order; barrier") {
  Tensor a = rank_values(comm().rank(), {300}, DType::f64, 70);
  Tensor b = rank_values(comm().rank(), {5, 7}, DType::f64, 71);
  auto wa = comm().allreduce_async(a);
  auto wb = comm().allreduce_async(b, dist::ReduceOp::mean);
  wa->wait();
  wb->wait();
  CHECK(wa->test());
  check_close(a, sum_over_ranks({300}, DType::f64, 70), 1e-14);
  check_close(b, sum_over_ranks({5, 7}, DType::f64, 71) / static_cast<double>(comm().world_size()), 1e-14);
  comm().barrier();
}

TEST_CASE("communicator errors name the op and what was expected") {
  Tensor ints = arange(0, 4);
  CHECK_THROWS_WITH_AS(comm().allreduce(ints), doctest::Contains("allreduce: expected a float32 or float64 tensor, got int64"),
                       DTypeError);
  Tensor t = zeros({2});
  CHECK_THROWS_WITH_AS(comm().broadcast(t, comm().world_size()), doctest::Contains("is not a rank of this job"), Error);
  CHECK_THROWS_WITH_AS(comm().set_timeout(std::chrono::milliseconds(0)), doctest::Contains("timeout must be > 0"), Error);
}

namespace {

// y = W2 · tanh(W1 · x + b1) + b2, plus a layer the loss never uses.
struct SmallNet : nn::Module {
  nn::Linear first{{.in_features = 4, .out_features = 8}};
  nn::Linear second{{.in_features = 8, .out_features = 3}};
  nn::Linear unused{{.in_features = 3, .out_features = 2}};
  explicit SmallNet(uint64_t seed) : nn::Module("SmallNet") {
    register_module("first", first);
    register_module("second", second);
    register_module("unused", unused);
    manual_seed(seed);
    first.reset_parameters();
    second.reset_parameters();
    unused.reset_parameters();
    to(DType::f64);
  }
  Tensor operator()(const Tensor& x) const { return second(first(x).tanh()); }
};

constexpr int64_t kGlobalBatch = 8;

// The global batch of a step: (8, 4) inputs and (8, 3) targets, the same on every rank.
std::pair<Tensor, Tensor> global_batch(int step) {
  manual_seed(500 + step);
  return {randn({kGlobalBatch, 4}, kF64), randn({kGlobalBatch, 3}, kF64)};
}

Tensor mse(const SmallNet& net, const Tensor& x, const Tensor& y) { return (net(x) - y).pow(2.0).mean(); }

// This rank's rows of the global batch.
Tensor shard(const Tensor& t) {
  const int64_t rows = kGlobalBatch / comm().world_size();
  return t.narrow(0, comm().rank() * rows, rows);
}

void sgd_step(const nn::Module& net, double lr) {
  NoGradGuard no_grad;
  for (Tensor p : net.parameters())
    if (p.grad().defined()) p.add_(p.grad(), -lr);
}

void check_same_parameters(const nn::Module& a, const nn::Module& b, double tolerance) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    check_close(pa[i].second, pb[i].second, tolerance);
  }
}

// Every bucket of the last step was launched, then seen complete, within the step; backward ended
// before the step did.
void check_timeline(const nn::DistributedDataParallel& ddp) {
  const nn::DistributedStats& s = ddp.stats();
  REQUIRE(s.last_step_buckets.size() == ddp.bucket_bytes().size());
  CHECK(0 < s.last_backward_end);
  CHECK(s.last_backward_end <= s.last_step_end);
  for (const nn::BucketTimeline& b : s.last_step_buckets) {
    CHECK(0 < b.launched);
    CHECK(b.launched <= b.completed);
    CHECK(b.completed <= s.last_step_end);
  }
}

}  // namespace

// The reference trains one model on the whole global batch; the DDP replicas each see their shard
// and average gradients. Both take the same SGD steps, so they must agree at every step up to
// float64 summation order. Rank 0's initial parameters reach the other ranks by the broadcast.
TEST_CASE("DistributedDataParallel: N ranks on shards train exactly like one rank on the global batch") {
  REQUIRE(kGlobalBatch % comm().world_size() == 0);
  // one bucket; one bucket per parameter; the same without the engine's progress calls
  const std::initializer_list<std::pair<double, int>> configs = {{25.0, 200}, {1e-6, 200}, {1e-6, 0}};
  for (auto [bucket_mb, progress_us] : configs) {
    CAPTURE(bucket_mb);
    CAPTURE(progress_us);
    SmallNet reference(7);
    SmallNet replica(comm().rank() == 0 ? 7 : 100 + comm().rank());
    nn::DistributedDataParallel ddp(replica, dist::world(),
                                    {.bucket_cap_mb = bucket_mb, .first_bucket_cap_mb = bucket_mb,
                                     .progress_interval = std::chrono::microseconds(progress_us)});
    check_same_parameters(replica, reference, 0.0);
    CHECK(ddp.bucket_parameter_names().size() == (bucket_mb > 1 ? 1u : 6u));
    CHECK(ddp.bucket_parameter_names().front().front() == "unused.bias");  // reverse registration order
    CHECK(ddp.bytes_per_step() == (4 * 8 + 8 + 8 * 3 + 3 + 3 * 2 + 2) * 8);
    for (int step = 0; step < 20; ++step) {
      CAPTURE(step);
      auto [x, y] = global_batch(step);
      Tensor reference_loss = mse(reference, x, y);
      reference.zero_grad();
      reference_loss.backward();
      sgd_step(reference, 0.1);

      Tensor loss = mse(replica, shard(x), shard(y));
      replica.zero_grad();
      if (bucket_mb > 1) {
        ddp.backward(loss);
      } else {  // the two halves, around a backward run by the caller
        ddp.prepare_for_backward(loss);
        loss.backward();
        ddp.finish_gradient_synchronization();
      }
      Tensor global_loss = loss.detach().clone();
      comm().allreduce(global_loss, dist::ReduceOp::mean);
      CHECK(global_loss.item() == doctest::Approx(reference_loss.item()).epsilon(1e-13));
      CHECK(replica.unused.weight.grad().defined());  // unused: averaged zeros, not missing
      sgd_step(replica, 0.1);
      check_same_parameters(replica, reference, 1e-13);
      check_timeline(ddp);
    }
    CHECK(ddp.stats().steps == 20);
    CHECK(ddp.stats().bytes_allreduced == 20 * ddp.bytes_per_step());
  }
}

TEST_CASE("DistributedDataParallel: no_sync accumulates locally; the next backward averages the sum") {
  SmallNet reference(11);
  SmallNet replica(11);
  nn::DistributedDataParallel ddp(replica, dist::world());
  auto [x1, y1] = global_batch(40);
  auto [x2, y2] = global_batch(41);
  (mse(reference, x1, y1) + mse(reference, x2, y2)).backward();
  {
    auto guard = ddp.no_sync();
    ddp.backward(mse(replica, shard(x1), shard(y1)));
  }
  CHECK(ddp.stats().steps == 0);
  ddp.backward(mse(replica, shard(x2), shard(y2)));
  CHECK(ddp.stats().steps == 1);
  auto pr = reference.named_parameters(), pd = replica.named_parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    CAPTURE(pr[i].first);
    if (pr[i].first.starts_with("unused")) continue;
    check_close(pd[i].second.grad(), pr[i].second.grad(), 1e-13);
  }
}

// Rank 0 holds the whole batch and the others none (a last batch smaller than the job): the
// token-weighted loss and the empty ranks' undefined loss still give the global batch's gradient.
TEST_CASE("DistributedDataParallel + global_mean_loss: ranks without examples contribute nothing") {
  SmallNet reference(13);
  SmallNet replica(13);
  nn::DistributedDataParallel ddp(replica, dist::world());
  auto [x, y] = global_batch(60);
  Tensor reference_loss = mse(reference, x, y);
  reference_loss.backward();
  const bool has_rows = comm().rank() == 0;
  Tensor local = has_rows ? mse(replica, x, y) : Tensor();
  nn::GlobalMeanLoss global = nn::global_mean_loss(comm(), local, has_rows ? kGlobalBatch : 0);
  CHECK(global.count == kGlobalBatch);
  CHECK(global.mean == doctest::Approx(reference_loss.item()).epsilon(1e-14));
  CHECK(global.local.defined() == has_rows);
  ddp.prepare_for_backward(global.local);
  if (global.local.defined()) global.local.backward();
  ddp.finish_gradient_synchronization();
  auto pr = reference.named_parameters(), pd = replica.named_parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    CAPTURE(pr[i].first);
    if (!pr[i].first.starts_with("unused")) check_close(pd[i].second.grad(), pr[i].second.grad(), 1e-13);
  }
}

TEST_CASE("DistributedDataParallel: without find_unused_parameters an unused parameter is a clear error") {
  SmallNet replica(3);
  nn::DistributedDataParallel ddp(replica, dist::world(), {.find_unused_parameters = false});
  auto [x, y] = global_batch(0);
  // Every rank fails the same way before any collective of the step completes.
  CHECK_THROWS_WITH_AS(ddp.backward(mse(replica, shard(x), shard(y))),
                       doctest::Contains("received no gradient on rank"), Error);
  // refused before any collective, on every rank alike
  const nn::DistributedDataParallelOptions negative{.progress_interval = std::chrono::microseconds(-1)};
  CHECK_THROWS_WITH_AS(nn::DistributedDataParallel(replica, dist::world(), negative),
                       doctest::Contains("progress_interval (-1 us) must be >= 0"), Error);
}

namespace {

// Rank 1 dies (SIGKILL) while rank 0 waits in an allreduce: mpirun must end the job.
int dead_rank_scenario() {
  Tensor t = zeros({10});
  if (comm().rank() == 1) std::raise(SIGKILL);
  comm().allreduce(t);
  return 0;
}

// Rank 1 stops calling collectives (alive, but stuck elsewhere): rank 0's allreduce times out
// after SEQGRAD_DIST_TIMEOUT seconds and the job ends with the message.
int silent_rank_scenario() {
  Tensor t = zeros({10});
  if (comm().rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  try {
    comm().allreduce(t);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--dead-rank") return dead_rank_scenario();
  if (mode == "--silent-rank") return silent_rank_scenario();
  if (mode == "--local") {  // one process, no MPI: the same checks with the local communicator
    --argc;
    ++argv;
  } else if (!dist::mpi_available()) {
    std::printf("SKIP: seqgrad was built without MPI (meson option mpi)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
