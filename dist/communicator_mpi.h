// The MPI communicator (OpenMPI; built with the meson option mpi): every process of `mpirun -np N`
// is one rank of MPI_COMM_WORLD.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace seqgrad::dist {

// Initialises MPI (once; finalised at exit) and returns a communicator over a duplicate of
// MPI_COMM_WORLD whose errors are returned and thrown as seqgrad::Error (MPI_ERRORS_RETURN), never
// MPI's default abort without a message. Use dist::world() rather than calling this directly.
std::shared_ptr<Communicator> make_mpi_world();

}  // namespace seqgrad::dist
