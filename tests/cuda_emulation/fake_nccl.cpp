// NCCL and the runtime's streams and events for the emulated CUDA build (fake_nccl.h): one rank, so
// a sum over ranks leaves the buffer as it is; what the test checks is the log of ordering calls.
#include "fake_nccl.h"

#include <cuda_runtime.h>


namespace {
struct FakeEvent {
  int id;
  bool complete;
};
std::vector<std::string> calls;
bool events_complete = true;
ncclResult_t async_error = ncclSuccess;
int next_event = 0, events_alive = 0;
int comm_stream_marker = 0;  // a created stream's address

std::string name_of(cudaStream_t s) { return s == nullptr ? "default" : "comm"; }
std::string name_of(cudaEvent_t e) { return "e" + std::to_string(reinterpret_cast<FakeEvent*>(e)->id); }
}  // namespace

namespace fake_nccl {
std::vector<std::string>& log() { return calls; }
void set_events_complete(bool complete) { events_complete = complete; }
void set_async_error(ncclResult_t error) { async_error = error; }
int live_events() { return events_alive; }
}  // namespace fake_nccl

extern "C" {
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(&comm_stream_marker);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(new FakeEvent{++next_event, false});
  ++events_alive;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<FakeEvent*>(e);
  --events_alive;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  reinterpret_cast<FakeEvent*>(e)->complete = events_complete;
  calls.push_back("record " + name_of(e) + " on " + name_of(s));
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  return reinterpret_cast<FakeEvent*>(e)->complete ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  calls.push_back(name_of(s) + " waits " + name_of(e));
  return cudaSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId{};
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  *comm = reinterpret_cast<ncclComm_t>(&comm_stream_marker);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t) {
  calls.push_back("abort");
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* error) {
  *error = async_error;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "fake NCCL error"; }
ncclResult_t ncclAllReduce(const void*, void*, size_t count, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           cudaStream_t s) {
  calls.push_back("allreduce of " + std::to_string(count) + " on " + name_of(s));
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void*, void*, size_t count, ncclDataType_t, int, ncclComm_t, cudaStream_t s) {
  calls.push_back("broadcast of " + std::to_string(count) + " on " + name_of(s));
  return ncclSuccess;
}
}
