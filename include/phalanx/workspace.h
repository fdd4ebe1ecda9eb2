// Workspace: the intermediates of one environment's step, carved from one scratch block.
// The backend decides where the block lives (a reused per-thread buffer on the CPU, a per-env
// slice of global memory on CUDA); stages read and write it through these pointers only.
#pragma once

#include "phalanx/arena.h"
#include "phalanx/model_fields.h"
#include "phalanx/model_view.h"

// Workspace tables: X(kind, name, size, comment), `size` an expression in the counts of a
// model `m` (ModelView of any scalar), kind `real` (the workspace's scalar) or `int`. Consumers
// expand them into members (PHX_WORKSPACE_MEMBER) and into the carve routine
// (PHX_WORKSPACE_TAKE, into a workspace `w` from an Arena `arena`; PHX_WORKSPACE_TAKE_FIXED for
// tables of reals sized by the model's counts alone, Arena::take_fixed).
#define PHX_WORKSPACE_MEMBER(kind, name, size, comment) kind* name;
#define PHX_WORKSPACE_TAKE(kind, name, size, comment) \
  w.name = arena.template take<kind>(long(size));
#define PHX_WORKSPACE_TAKE_FIXED(kind, name, size, comment) w.name = arena.take_fixed(long(size));
// and for tables of capacity-sized arrays laid out by the workspace's Layout (Arena::take_rows)
#define PHX_WORKSPACE_ROWS_MEMBER(kind, name, size, comment) RowsPtr<Layout, kind> name;
#define PHX_WORKSPACE_TAKE_ROWS(kind, name, size, comment) \
  w.name = arena.template take_rows<kind>(long(size));

namespace phx {

// The counts workspace sizes are expressions in: a model's (any struct with them), or those of
// a tape's step slot, which has room for fewer contacts and rows than the model allows.
struct Counts {
#define PHX_COUNTS_MEMBER(name, comment) int name;
  PHX_MODEL_COUNTS(PHX_COUNTS_MEMBER)
#undef PHX_COUNTS_MEMBER
  int nconmax, nefcmax;  // capacities: contacts and constraint rows
  int integrator;        // the step's Integrator (its scratch depends on it)
  int solver;            // the step's Solver, and XPBD's substeps and iterations (the same)
  int xpbd_substeps, xpbd_iterations;
};
template <class M>
PHX_HD Counts counts_of(const M& m) {
  Counts c;
#define PHX_COUNTS_COPY(name, comment) c.name = m.name;
  PHX_MODEL_COUNTS(PHX_COUNTS_COPY)
#undef PHX_COUNTS_COPY
  c.nconmax = m.nconmax;
  c.nefcmax = m.nefcmax;
  c.integrator = m.integrator;
  c.solver = m.solver;
  c.xpbd_substeps = m.xpbd_substeps;
  c.xpbd_iterations = m.xpbd_iterations;
  return c;
}

// n for a model that integrates with implicitfast, else 0
template <class M>
PHX_HD long implicit_size(const M& m, long n) {
  return m.integrator == kIntegratorImplicitFast ? n : 0;
}

// the intermediates of one environment's step, in the order they are carved. The reverse
// passes read the forward quantities the stages keep here (xquat_scale, jnt_quat_in, jnt_qloc,
// jnt_quat_out, xipos, ximat, cmom, crb, ten_length, ten_J), so every caller of an adjoint has
// run the forward at the same state; the articulated-body arrays (aba_*) are read by the forward
// solve alone.
#define PHX_WORKSPACE_ARRAYS(X)                                                                  \
  /* kinematics */                                                                               \
  X(real, xpos, 3L * m.nbody, "body frame position in world (nbody x 3)")                        \
  X(real, xquat, 4L * m.nbody, "body frame orientation in world (nbody x 4)")                    \
  X(real, xquat_scale, m.nbody, "1 / |q| of the orientation q that xquat normalises (nbody)")    \
  X(real, xmat, 9L * m.nbody, "body frame rotation matrix (nbody x 9)")                          \
  X(real, xanchor, 3L * m.njnt, "joint anchor in world (njnt x 3)")                              \
  X(real, xaxis, 3L * m.njnt, "joint axis in world (njnt x 3)")                                  \
  X(real, jnt_quat_in, 4L * m.njnt, "body orientation before each joint (njnt x 4)")             \
  X(real, jnt_qloc, 4L * m.njnt, "each joint's rotation, ball and hinge (njnt x 4)")             \
  X(real, jnt_quat_out, 4L * m.njnt, "body orientation after each joint (njnt x 4)")             \
  /* com-based quantities, about the reference point of each tree (its root body's origin) */    \
  X(real, xipos, 3L * m.nbody, "centre of mass in world (nbody x 3)")                            \
  X(real, ximat, 9L * m.nbody, "principal inertia frame rotation in world (nbody x 9)")          \
  X(real, cinert, 10L * m.nbody, "body spatial inertia (nbody x 10)")                            \
  X(real, cdof, 6L * m.nv, "dof motion subspace (nv x 6)")                                       \
  X(real, cvel, 6L * m.nbody, "body spatial velocity (nbody x 6)")                               \
  X(real, cdof_dot, 6L * m.nv, "time derivative of cdof (nv x 6)")                               \
  X(real, cacc, 6L * m.nbody, "body spatial acceleration (nbody x 6)")                           \
  X(real, cfrc, 6L * m.nbody, "body spatial force, RNEA (nbody x 6)")                            \
  X(real, cmom, 6L * m.nbody, "body spatial momentum cinert cvel, RNEA (nbody x 6)")             \
  X(real, crb, 10L * m.nbody, "composite rigid-body inertia, CRBA (nbody x 10)")                 \
  /* tendons (tendon.h) */                                                                       \
  X(real, ten_length, m.ntendon, "tendon length (ntendon)")                                      \
  X(real, ten_J, long(m.ntendon) * m.nv, "tendon row dL/dqvel (ntendon x nv)")                   \
  /* articulated-body algorithm */                                                               \
  X(real, aba_IA, 36L * m.nbody, "articulated inertia (nbody x 36)")                             \
  X(real, aba_pA, 6L * m.nbody, "articulated bias force (nbody x 6)")                            \
  X(real, aba_U, 6L * m.nv, "IA S per dof (nv x 6)")                                             \
  X(real, aba_invD, m.nv, "1 / (S^T IA S + armature) per dof (nv)")                              \
  X(real, aba_u, m.nv, "tau - S^T pA per dof (nv)")                                              \
  /* generalized vectors */                                                                      \
  X(real, armature, m.nv, "armature used by the solve, + dt damping when implicit (nv)")         \
  X(real, qfrc, m.nv, "applied generalized force, passive + actuation (nv)")                     \
  X(real, qacc, m.nv, "generalized acceleration (nv)")                                           \
  /* the velocity-implicit step (implicit.h), carved for its integrator only */                  \
  X(real, implicit_H, implicit_size(m, long(m.nv) * m.nv), "M - h D, then its factor (nv x nv)") \
  X(real, implicit_row, implicit_size(m, m.nv), "a transmission row, scratch (nv)")              \
  X(real, implicit_u, implicit_size(m, m.nv), "scratch (nv)")                                    \
  X(real, implicit_v, implicit_size(m, m.nv), "scratch (nv)")

template <class T>
struct Workspace {
  using real = T;
  PHX_WORKSPACE_ARRAYS(PHX_WORKSPACE_MEMBER)

  template <class M, class Layout>
  PHX_HD static Workspace carve(const M& m, Arena<T, Layout>& arena) {
    Workspace w;
    PHX_WORKSPACE_ARRAYS(PHX_WORKSPACE_TAKE_FIXED)
    return w;
  }
  // scalars a workspace of m takes
  template <class M>
  PHX_HD static long size(const M& m) {
    return carved_size<Workspace, T>(m).reals;
  }
};

// Adjoints of the workspace intermediates, for the reverse pass of one environment's step:
// the arrays of the stage adjoints, zeroed by zero() before a pass, then generalized vectors.
#define PHX_ADJ_WORKSPACE_ZEROED(X)                                                              \
  X(real, xpos, 3L * m.nbody, "(nbody x 3)")                                                     \
  X(real, xquat, 4L * m.nbody, "(nbody x 4)")                                                    \
  X(real, xmat, 9L * m.nbody, "(nbody x 9)")                                                     \
  X(real, xanchor, 3L * m.njnt, "(njnt x 3)")                                                    \
  X(real, xaxis, 3L * m.njnt, "(njnt x 3)")                                                      \
  X(real, cinert, 10L * m.nbody, "(nbody x 10)")                                                 \
  X(real, cdof, 6L * m.nv, "(nv x 6)")                                                           \
  X(real, cvel, 6L * m.nbody, "(nbody x 6)")                                                     \
  X(real, cdof_dot, 6L * m.nv, "(nv x 6)")                                                       \
  X(real, cacc, 6L * m.nbody, "(nbody x 6)")                                                     \
  X(real, cfrc, 6L * m.nbody, "(nbody x 6)")                                                     \
  X(real, ten_length, m.ntendon, "(ntendon)")                                                    \
  X(real, ten_J, long(m.ntendon) * m.nv, "(ntendon x nv)")
#define PHX_ADJ_WORKSPACE_VECTORS(X)                                                             \
  X(real, qvel_next, m.nv, "velocity after the step (nv)")                                       \
  X(real, qacc, m.nv, "adjoint of qacc (nv)")                                                    \
  X(real, qvel, m.nv, "adjoint of the new velocity (nv)")                                        \
  X(real, lambda, m.nv, "(M + diag(armature))^-1 adj_qacc (nv)")                                 \
  X(real, tmp, m.nv, "scratch (nv)")

template <class T>
struct AdjWorkspace {
  using real = T;
  PHX_ADJ_WORKSPACE_ZEROED(PHX_WORKSPACE_MEMBER)
  PHX_ADJ_WORKSPACE_VECTORS(PHX_WORKSPACE_MEMBER)

  template <class M, class Layout>
  PHX_HD static AdjWorkspace carve(const M& m, Arena<T, Layout>& arena) {
    AdjWorkspace w;
    PHX_ADJ_WORKSPACE_ZEROED(PHX_WORKSPACE_TAKE_FIXED)
    PHX_ADJ_WORKSPACE_VECTORS(PHX_WORKSPACE_TAKE_FIXED)
    return w;
  }
  template <class M>
  PHX_HD static long size(const M& m) {
    return carved_size<AdjWorkspace, T>(m).reals;
  }

  // zero the stage adjoints (PHX_ADJ_WORKSPACE_ZEROED, carved one after the other up to
  // qvel_next)
  PHX_HD void zero() {
    for (T* p = xpos; p < qvel_next; ++p) *p = T(0);
  }
};

}  // namespace phx
