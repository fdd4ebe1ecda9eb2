// ModelView: the read-only model as kernels see it, raw pointers into device (or host) arrays
// of one scalar type. Built by the host from a DeviceModel (host/view_builder.h) and passed to
// kernels by value. Its fields are the tables of model_fields.h.
#pragma once

#include "phalanx/config.h"
#include "phalanx/model_fields.h"

namespace phx {

template <class T>
struct ModelView {
  using real = T;
  using flag = int;

  // counts (PHX_MODEL_COUNTS)
#define PHX_VIEW_COUNT(name, comment) int name;
  PHX_MODEL_COUNTS(PHX_VIEW_COUNT)
#undef PHX_VIEW_COUNT

  // options (PHX_MODEL_OPTIONS)
#define PHX_VIEW_OPTION(kind, name, value, comment) kind name;
  PHX_MODEL_OPTIONS(PHX_VIEW_OPTION)
#undef PHX_VIEW_OPTION
  T gravity[3];  // gravitational acceleration (m/s^2)
  T wind[3];     // velocity of the medium (m/s), for fluid forces

  // capacities of one environment
  int nconmax;  // contacts
  int nefcmax;  // constraint rows: 3 per contact plus one per limited joint, then the rest

  // arrays (PHX_MODEL_ARRAYS)
#define PHX_VIEW_ARRAY(kind, name, count, width, comment) const kind* name;
  PHX_MODEL_ARRAYS(PHX_VIEW_ARRAY)
#undef PHX_VIEW_ARRAY

  // per-environment fields (parameters and PHX_ENV_FIELDS): field k holds param_nbatch[k]
  // copies one after the other and environment e reads copy e % param_nbatch[k] (see
  // env_view); 0 or 1: one copy shared by all environments
  int param_nbatch[kNumBatched];
};

// numbers in one copy of per-environment field k
template <class T>
PHX_HD long param_size(const ModelView<T>& m, int k) {
  return long(param_count(m, k)) * param_width(k);
}

// the array of per-environment field k
template <class T>
PHX_HD const T*& param_field(ModelView<T>& m, int k) {
  switch (k) {
#define PHX_PARAM_FIELD(Name, field_, check) \
  case kParam##Name:                         \
    return m.field_;
    PHX_BATCHED_FIELDS(PHX_PARAM_FIELD)
#undef PHX_PARAM_FIELD
    default:
      return m.body_mass;
  }
}

// the model as environment e sees it: each per-environment field points at copy
// e % param_nbatch[k]. Kernels call this first and hand the result to the stage functions.
// Written field by field, not as a loop over param_field(r, k): a member chosen at run time
// makes the whole view addressable, and a device compiler then keeps it in the thread's stack.
// env_view_in turns r, a copy of the shared model, into environment e's in place.
template <class T>
PHX_HD void env_view_in(ModelView<T>& r, int e) {
#define PHX_ENV_COPY(Name, field_, check)                \
  if (const int n = r.param_nbatch[kParam##Name]; n > 1) \
    r.field_ += (e % n) * param_size(r, kParam##Name);
  PHX_BATCHED_FIELDS(PHX_ENV_COPY)
#undef PHX_ENV_COPY
}
template <class T>
PHX_HD ModelView<T> env_view(const ModelView<T>& m, int e) {
  ModelView<T> r = m;
  env_view_in(r, e);
  return r;
}

// a state (nq, nv, na), or its adjoint, copied; the activations only when a and to_a are set
template <class T>
PHX_HD void copy_state(const ModelView<T>& m, const T* q, const T* v, const T* a, T* to_q, T* to_v,
                       T* to_a) {
  for (int i = 0; i < m.nq; ++i) to_q[i] = q[i];
  for (int i = 0; i < m.nv; ++i) to_v[i] = v[i];
  for (int i = 0; a && to_a && i < m.na; ++i) to_a[i] = a[i];
}

// numbers in the real arrays of a model (any struct with its counts)
template <class M>
PHX_HD long model_reals(const M& m) {
  long n = 0;
#define PHX_COUNT_REALS(kind, name, count, width, comment) \
  if (field::name::is_real) n += long(m.count) * width;
  PHX_MODEL_ARRAYS(PHX_COUNT_REALS)
#undef PHX_COUNT_REALS
  return n;
}

// m in scalar U: counts, options (converted), capacities, integer arrays and parameter
// batches as they are, each real array from real_array(m's array, its size, the array's
// member of ModelView<U>)
template <class U, class T, class RealArray>
ModelView<U> convert_view(const ModelView<T>& m, RealArray&& real_array) {
  ModelView<U> r;
#define PHX_CONVERT_COUNT(name, comment) r.name = m.name;
  PHX_MODEL_COUNTS(PHX_CONVERT_COUNT)
#undef PHX_CONVERT_COUNT
#define PHX_CONVERT_OPTION(kind, name, value, comment) r.name = m.name;
  PHX_MODEL_OPTIONS(PHX_CONVERT_OPTION)
#undef PHX_CONVERT_OPTION
  for (int i = 0; i < 3; ++i) r.gravity[i] = m.gravity[i], r.wind[i] = m.wind[i];
  r.nconmax = m.nconmax, r.nefcmax = m.nefcmax;
#define PHX_CONVERT_ARRAY(kind, name, count, width, comment)                         \
  if constexpr (field::name::is_real) {                                              \
    r.name = real_array(m.name, long(m.count) * width, &ModelView<U>::name);          \
  } else {                                                                           \
    r.name = m.name;                                                                 \
  }
  PHX_MODEL_ARRAYS(PHX_CONVERT_ARRAY)
#undef PHX_CONVERT_ARRAY
  for (int k = 0; k < kNumBatched; ++k) r.param_nbatch[k] = m.param_nbatch[k];
  return r;
}

// Adjoints of the model parameters, per environment; a null pointer skips that parameter:
// those of the dynamics (PHX_DYNAMICS_PARAMS) and those of contacts (PHX_CONTACT_PARAMS; of
// geom_friction only the sliding coefficient, column 0, is used; geom_size through the contact
// geometry only). Each has its field's shape.
template <class T>
struct ModelAdjoint {
#define PHX_PARAM_ADJOINT(Name, field_, check) T* field_ = nullptr;
  PHX_DYNAMICS_PARAMS(PHX_PARAM_ADJOINT)
};
template <class T>
struct ContactModelAdjoint {
  PHX_CONTACT_PARAMS(PHX_PARAM_ADJOINT)
#undef PHX_PARAM_ADJOINT
};

// the adjoint array of parameter k in am or ac
template <class T>
PHX_HD T*& param_adjoint(ModelAdjoint<T>& am, ContactModelAdjoint<T>& ac, int k) {
  switch (k) {
#define PHX_PARAM_ADJOINT_OF(Name, field_, check) \
  case kParam##Name:                              \
    return am.field_;
    PHX_DYNAMICS_PARAMS(PHX_PARAM_ADJOINT_OF)
#undef PHX_PARAM_ADJOINT_OF
#define PHX_PARAM_ADJOINT_OF(Name, field_, check) \
  case kParam##Name:                              \
    return ac.field_;
    PHX_CONTACT_PARAMS(PHX_PARAM_ADJOINT_OF)
#undef PHX_PARAM_ADJOINT_OF
    default:
      return am.body_mass;
  }
}

}  // namespace phx
