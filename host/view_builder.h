// Builds a ModelView<T> from a Model by the tables of phalanx/model_fields.h, given how to
// place a real array and an int array (on a device, or in host vectors of any scalar such as a
// Dual number for tests).
#pragma once

#include <type_traits>

#include "host/model.h"
#include "phalanx/model_view.h"

namespace phx {

// constraint rows one environment can hold: 3 per contact (normal and two friction
// directions) plus one per limited joint. The XPBD solver projects its limits and
// contacts itself and builds no rows; with contacts it takes one per contact, so that the
// kernels carve the contact arrays and geom frames it detects them in (they do for nefcmax > 0)
// and detect_contacts has room for each contact's key (efc_key).
inline int constraint_capacity(const Model& m) {
  if (m.opt.solver == kSolverXpbd) return m.opt.contact ? m.nconmax : 0;
  int nlimit = 0;
  for (int j = 0; j < m.njnt; ++j) {
    nlimit += m.opt.limit && m.jnt_type[j] != kJointFree && m.jnt_limited[j];
  }
  for (int t = 0; t < m.ntendon; ++t) nlimit += m.opt.limit && m.tendon_limited[t];
  int nfriction = 0;
  for (int d = 0; d < m.nv; ++d) nfriction += m.dof_frictionloss[d] > 0;
  for (int t = 0; t < m.ntendon; ++t) nfriction += m.tendon_frictionloss[t] > 0;
  int nequality = 0;
  for (int i = 0; i < m.neq; ++i) nequality += eq_rows(m.eq_type[i]);
  return 3 * (m.opt.contact ? m.nconmax : 0) + nlimit + nfriction + nequality;
}

// real(const std::vector<double>&) -> const T*, integer(const std::vector<int>&) -> const int*
template <class T, class Real, class Integer>
ModelView<T> build_view(const Model& m, Real&& real, Integer&& integer) {
  ModelView<T> w{};
#define PHX_BUILD_COUNT(name, comment) w.name = m.name;
  PHX_MODEL_COUNTS(PHX_BUILD_COUNT)
#undef PHX_BUILD_COUNT
#define PHX_BUILD_OPTION(kind, name, value, comment) w.name = decltype(w.name)(m.opt.name);
  PHX_MODEL_OPTIONS(PHX_BUILD_OPTION)
#undef PHX_BUILD_OPTION
  for (int i = 0; i < 3; ++i) w.gravity[i] = T(m.opt.gravity[i]), w.wind[i] = T(m.opt.wind[i]);
  w.nconmax = m.opt.contact ? m.nconmax : 0;
  w.nefcmax = constraint_capacity(m);
  auto place = [&](const auto& v) {
    if constexpr (std::is_same_v<typename std::decay_t<decltype(v)>::value_type, int>) {
      return integer(v);
    } else {
      return real(v);
    }
  };
#define PHX_BUILD_ARRAY(kind, name, count, width, comment) w.name = place(m.name);
  PHX_MODEL_ARRAYS(PHX_BUILD_ARRAY)
#undef PHX_BUILD_ARRAY
  return w;
}

}  // namespace phx
