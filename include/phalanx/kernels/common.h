// What every kernel body shares: the batched arrays' rows of one environment. Kernel bodies are
// thin functors that index one environment, load, call the core's functions and store; the CPU
// backend runs them in an OpenMP loop (host/cpu_backend.h), the CUDA backend in a generic
// __global__ shell (cuda/launch.cuh). Every batched array is env-major: entry e of an
// (nenv, n) array starts at e * n. Each kernel has `using Scalar` (its real type) and
// operator()(e, Scratch<Scalar>), its private scratch of the size the host launches it with.
#pragma once

#include "phalanx/constraint_adjoint.h"

namespace phx {

// environment e's row of n entries of an (nenv x n) array, or null for a null array
template <class P>
PHX_HD P* env_row(P* p, int e, int n) {
  return p ? p + long(e) * n : nullptr;
}

// environment e's slices of per-environment parameter adjoint arrays, zeroed (null stays null)
template <class T>
PHX_HD void env_parameter_adjoints(const ModelView<T>& m, int e, const ModelAdjoint<T>& all,
                                   const ContactModelAdjoint<T>& all_contact, ModelAdjoint<T>& am,
                                   ContactModelAdjoint<T>& ac) {
  ModelAdjoint<T> all_model = all;
  ContactModelAdjoint<T> all_con = all_contact;
  for (int k = 0; k < kNumParams; ++k) {
    T* p = param_adjoint(all_model, all_con, k);
    long n = param_size(m, k);
    T*& r = param_adjoint(am, ac, k);
    r = p ? p + e * n : nullptr;
    for (long i = 0; r && i < n; ++i) r[i] = T(0);
  }
}

}  // namespace phx
