// The NCCL communicator for CUDA tensors (built with the CUDA backend when NCCL is found; meson
// option nccl): the same collectives as dist/communicator.h over NVLink/InfiniBand/sockets, with
// the ranks and NCCL's unique id taken from a bootstrap communicator (MPI under mpirun).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace seqgrad::dist {

// Collective over every rank of `bootstrap`: each rank passes its own CUDA device (one per rank).
// Use dist::nccl_world(device) rather than calling this directly.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, Device device);

}  // namespace seqgrad::dist
