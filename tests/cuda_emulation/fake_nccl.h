// The test double of NCCL and of the CUDA runtime's streams and events (fake_nccl.cpp): every call
// that orders work is written to a log in words, so a test can check the order the NCCL
// communicator asks of the GPU. Events complete at once unless told otherwise.
#pragma once
#include <nccl.h>

#include <string>
#include <vector>

namespace fake_nccl {

// "record e1 on default", "comm waits e1", "allreduce of 4 on comm", ... since the last clear.
std::vector<std::string>& log();
// false: every event recorded from now on stays pending (a collective that never completes).
void set_events_complete(bool complete);
// What ncclCommGetAsyncError reports (ncclSuccess by default).
void set_async_error(ncclResult_t error);
// Events created and not destroyed.
int live_events();

}  // namespace fake_nccl
