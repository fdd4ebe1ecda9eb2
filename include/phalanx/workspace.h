// Workspace: the intermediates of one environment's step, carved from one scratch block.
// The backend decides where the block lives (a reused per-thread buffer on the CPU, a per-env
// slice of global memory on CUDA); stages read and write it through these pointers only.
#pragma once

#include "phalanx/config.h"

namespace phx {

// how much private scratch one environment's kernel needs: scalars and integers
struct ScratchSize {
  long reals = 0;
  long ints = 0;
};

// one environment's scratch blocks, handed to a kernel by the backend
template <class T>
struct Scratch {
  T* reals;
  int* ints;
};

template <class T>
struct Workspace {
  // kinematics
  T* xpos;      // body frame position in world                (nbody x 3)
  T* xquat;     // body frame orientation in world             (nbody x 4)
  T* xquat_scale;  // 1 / |q| of the orientation q that xquat normalises, for adj_kinematics (nbody)
  T* xmat;      // body frame rotation matrix                  (nbody x 9)
  T* xanchor;   // joint anchor in world                       (njnt x 3)
  T* xaxis;     // joint axis in world                         (njnt x 3)
  T* jnt_quat_in;  // body orientation before each joint, for adj_kinematics   (njnt x 4)
  T* jnt_qloc;     // each joint's rotation (ball, hinge), for adj_kinematics  (njnt x 4)
  T* jnt_quat_out; // body orientation after each joint, for adj_kinematics     (njnt x 4)
  // com-based quantities, about the reference point of each tree (its root body's origin)
  T* xipos;     // centre of mass in world (com_pos)           (nbody x 3)
  T* ximat;     // principal inertia frame rotation in world   (nbody x 9)
  T* cinert;    // body spatial inertia                        (nbody x 10)
  T* cdof;      // dof motion subspace                         (nv x 6)
  T* cvel;      // body spatial velocity                       (nbody x 6)
  T* cdof_dot;  // time derivative of cdof                     (nv x 6)
  T* cacc;      // body spatial acceleration                   (nbody x 6)
  T* cfrc;      // body spatial force (RNEA)                   (nbody x 6)
  T* cmom;      // body spatial momentum cinert cvel (RNEA)    (nbody x 6)
  T* crb;       // composite rigid-body inertia (CRBA)         (nbody x 10)
  // articulated-body algorithm
  T* aba_IA;    // articulated inertia                         (nbody x 36)
  T* aba_pA;    // articulated bias force                      (nbody x 6)
  T* aba_U;     // IA S per dof                                (nv x 6)
  T* aba_invD;  // 1 / (S^T IA S + armature) per dof           (nv)
  T* aba_u;     // tau - S^T pA per dof                        (nv)
  // generalized vectors
  T* armature;  // armature used by the solve (+ dt * damping when implicit)  (nv)
  T* qfrc;      // applied generalized force (passive + actuation)  (nv)
  T* qacc;      // generalized acceleration                    (nv)

  // number of scalars a workspace needs for the given counts
  PHX_HD static long size(int nbody, int njnt, int nv) {
    return long(nbody) * (3 + 4 + 1 + 9 + 3 + 9 + 10 + 6 + 6 + 6 + 6 + 10 + 36 + 6) +
           long(njnt) * 18 +
           long(nv) * (6 + 6 + 6 + 1 + 1 + 1 + 1 + 1);
  }

  // carve a workspace from a block of at least size() scalars
  PHX_HD static Workspace carve(T* p, int nbody, int njnt, int nv) {
    Workspace w;
    auto take = [&p](long n) { T* r = p; p += n; return r; };
    w.xpos = take(3L * nbody);
    w.xquat = take(4L * nbody);
    w.xquat_scale = take(nbody);
    w.xmat = take(9L * nbody);
    w.xanchor = take(3L * njnt);
    w.xaxis = take(3L * njnt);
    w.jnt_quat_in = take(4L * njnt);
    w.jnt_qloc = take(4L * njnt);
    w.jnt_quat_out = take(4L * njnt);
    w.xipos = take(3L * nbody);
    w.ximat = take(9L * nbody);
    w.cinert = take(10L * nbody);
    w.cdof = take(6L * nv);
    w.cvel = take(6L * nbody);
    w.cdof_dot = take(6L * nv);
    w.cacc = take(6L * nbody);
    w.cfrc = take(6L * nbody);
    w.cmom = take(6L * nbody);
    w.crb = take(10L * nbody);
    w.aba_IA = take(36L * nbody);
    w.aba_pA = take(6L * nbody);
    w.aba_U = take(6L * nv);
    w.aba_invD = take(nv);
    w.aba_u = take(nv);
    w.armature = take(nv);
    w.qfrc = take(nv);
    w.qacc = take(nv);
    return w;
  }
};

// Adjoints of the workspace intermediates, for the reverse pass of one environment's step.
template <class T>
struct AdjWorkspace {
  T* xpos;         // (nbody x 3)
  T* xquat;        // (nbody x 4)
  T* xmat;         // (nbody x 9)
  T* xanchor;      // (njnt x 3)
  T* xaxis;        // (njnt x 3)
  T* cinert;       // (nbody x 10)
  T* cdof;         // (nv x 6)
  T* cvel;         // (nbody x 6)
  T* cdof_dot;     // (nv x 6)
  T* cacc;         // (nbody x 6)
  T* cfrc;         // (nbody x 6)
  // generalized adjoints
  T* qvel_next;    // velocity after the step                                    (nv)
  T* qacc;         // adjoint of qacc                                            (nv)
  T* qvel;         // adjoint of the new velocity                                (nv)
  T* lambda;       // (M + diag(armature))^-1 adj_qacc                           (nv)
  T* tmp;          // scratch                                                    (nv)

  PHX_HD static long size(int nbody, int njnt, int nv) {
    return long(nbody) * (3 + 4 + 9 + 10 + 6 + 6 + 6) + long(njnt) * (3 + 3) +
           long(nv) * (6 + 6 + 5);
  }

  PHX_HD static AdjWorkspace carve(T* p, int nbody, int njnt, int nv) {
    AdjWorkspace a;
    auto take = [&p](long n) { T* r = p; p += n; return r; };
    a.xpos = take(3L * nbody);
    a.xquat = take(4L * nbody);
    a.xmat = take(9L * nbody);
    a.xanchor = take(3L * njnt);
    a.xaxis = take(3L * njnt);
    a.cinert = take(10L * nbody);
    a.cdof = take(6L * nv);
    a.cvel = take(6L * nbody);
    a.cdof_dot = take(6L * nv);
    a.cacc = take(6L * nbody);
    a.cfrc = take(6L * nbody);
    a.qvel_next = take(nv);
    a.qacc = take(nv);
    a.qvel = take(nv);
    a.lambda = take(nv);
    a.tmp = take(nv);
    return a;
  }

  // zero the adjoint arrays (everything up to the generalized ones)
  PHX_HD void zero(int nbody, int njnt, int nv) {
    long n = long(nbody) * (3 + 4 + 9 + 10 + 6 + 6 + 6) + long(njnt) * (3 + 3) + long(nv) * 12;
    T* p = xpos;
    for (long i = 0; i < n; ++i) p[i] = T(0);
  }
};

// Adjoints of model parameters, per environment; a null pointer skips that parameter.
template <class T>
struct ModelAdjoint {
  T* body_mass = nullptr;      // (nbody)
  T* body_inertia = nullptr;   // (nbody x 3)
  T* dof_damping = nullptr;    // (nv)
  T* dof_armature = nullptr;   // (nv)
  T* jnt_stiffness = nullptr;  // (njnt)
  T* actuator_gear = nullptr;  // (nu)
  T* body_ipos = nullptr;      // (nbody x 3)
};

}  // namespace phx
