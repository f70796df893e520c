// The NCCL communicator's stream order (dist/communicator_nccl.cpp), on the emulated CUDA build's
// fake runtime and NCCL (tests/cuda_emulation/fake_nccl.*): a collective runs on the communicator's
// own stream after an event recorded on the default stream (the gradients written before it), and
// waiting makes the default stream wait for the collective's completion event. This checks the
// calls the host makes, not a GPU's execution of them: no GPU has run the overlap.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cuda_emulation/fake_nccl.h"
#include "dist/communicator_nccl.h"

using namespace seqgrad;

namespace {

using Log = std::vector<std::string>;

// "record e7 on comm" -> "e7"
std::string event_of(const std::string& record) {
  const size_t start = record.find(' ') + 1;
  return record.substr(start, record.find(' ', start) - start);
}

std::shared_ptr<dist::Communicator> one_rank_nccl() {
  return dist::make_nccl_communicator(std::make_shared<dist::LocalCommunicator>(), Device::cuda(0));
}

}  // namespace

TEST_CASE("nccl: an allreduce runs on the communicator's stream, ordered by events both ways") {
  auto nccl = one_rank_nccl();
  Tensor grads = full({4}, 2.0).to(Device::cuda(0));
  fake_nccl::log().clear();
  std::unique_ptr<dist::Work> work = nccl->allreduce_async(grads, dist::ReduceOp::sum);
  // `ready` marks what the default stream had been given (the gradients); the comm stream starts after it
  const Log started = fake_nccl::log();
  REQUIRE(started.size() == 4);
  const std::string ready = event_of(started[0]), done = event_of(started[3]);
  CHECK(started[0] == "record " + ready + " on default");
  CHECK(started[1] == "comm waits " + ready);
  CHECK(started[2] == "allreduce of 4 on comm");
  CHECK(started[3] == "record " + done + " on comm");
  CHECK(done != ready);
  work->wait();
  CHECK(fake_nccl::log() == Log{started[0], started[1], started[2], started[3], "default waits " + done});
  CHECK(grads.to(Device::cpu()).to_vector<float>() == std::vector<float>{2, 2, 2, 2});  // one rank: the sum is itself
  work.reset();
  CHECK(fake_nccl::live_events() == 0);
}

TEST_CASE("nccl: a broadcast waits for the default stream's work too") {
  auto nccl = one_rank_nccl();
  Tensor weights = full({3}, 1.0).to(Device::cuda(0));
  fake_nccl::log().clear();
  nccl->broadcast(weights, 0);
  const Log& calls = fake_nccl::log();
  REQUIRE(calls.size() == 5);
  CHECK(calls[0] == "record " + event_of(calls[0]) + " on default");
  CHECK(calls[1] == "comm waits " + event_of(calls[0]));
  CHECK(calls[2] == "broadcast of 3 on comm");
  CHECK(calls[3] == "record " + event_of(calls[3]) + " on comm");
  CHECK(calls[4] == "default waits " + event_of(calls[3]));
}

TEST_CASE("nccl: a collective that never completes times out, aborts NCCL, and keeps the default stream behind it") {
  auto nccl = one_rank_nccl();
  nccl->set_timeout(std::chrono::milliseconds(20));
  Tensor grads = full({2}, 1.0).to(Device::cuda(0));
  fake_nccl::set_events_complete(false);
  std::unique_ptr<dist::Work> work = nccl->allreduce_async(grads);
  CHECK_FALSE(work->test());
  fake_nccl::log().clear();
  CHECK_THROWS_WITH(work->wait(), doctest::Contains("nccl allreduce: rank 0 waited 0.02 s"));
  CHECK(fake_nccl::log().back() == "abort");
  fake_nccl::log().clear();
  work.reset();  // abandoned: its buffer's memory may be reused only after the collective
  REQUIRE(fake_nccl::log().size() == 1);
  CHECK(fake_nccl::log()[0].starts_with("default waits "));
  fake_nccl::set_events_complete(true);
}

TEST_CASE("nccl: an asynchronous NCCL error ends the wait with NCCL's message") {
  auto nccl = one_rank_nccl();
  Tensor grads = full({2}, 1.0).to(Device::cuda(0));
  fake_nccl::set_events_complete(false);
  fake_nccl::set_async_error(ncclSystemError);
  std::unique_ptr<dist::Work> work = nccl->allreduce_async(grads);
  CHECK_THROWS_WITH(work->wait(), doctest::Contains("fake NCCL error"));
  fake_nccl::set_async_error(ncclSuccess);
  fake_nccl::set_events_complete(true);
}
