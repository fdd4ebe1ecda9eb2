// Compilation switches shared by every header of the single-source core.
#pragma once

// PHX_HD marks a function that compiles for the host and, under nvcc, for the device.
// PHX_DEVICE_NOINLINE keeps a large stage a device function of its own, called by every kernel
// that uses it, so that ptxas compiles it once instead of once per kernel (no effect on the
// host, where inlining is left to the compiler).
#if defined(__CUDACC__)
#define PHX_HD __host__ __device__
#define PHX_INLINE __forceinline__
#define PHX_DEVICE_NOINLINE __noinline__
#else
#define PHX_HD
#define PHX_INLINE inline __attribute__((always_inline))
#define PHX_DEVICE_NOINLINE
#endif

// PHX_RESTRICT on a local pointer promises the compiler that what it points to is reached through
// no other pointer in its scope, so that loops over it vectorize (gcc, clang and nvcc).
#define PHX_RESTRICT __restrict__

namespace phx {

// MuJoCo's numbering, so model arrays read the same in both libraries.
enum JointType : int { kJointFree = 0, kJointBall = 1, kJointSlide = 2, kJointHinge = 3 };

enum GeomType : int {
  kGeomPlane = 0,
  kGeomHField = 1,
  kGeomSphere = 2,
  kGeomCapsule = 3,
  kGeomEllipsoid = 4,
  kGeomCylinder = 5,
  kGeomBox = 6,
  kGeomMesh = 7,
};

// number of qpos and qvel coordinates of each joint type
PHX_HD constexpr int joint_nq(int type) {
  return type == kJointFree ? 7 : type == kJointBall ? 4 : 1;
}
PHX_HD constexpr int joint_nv(int type) {
  return type == kJointFree ? 6 : type == kJointBall ? 3 : 1;
}

// How a step solves its LCP (Options::lcp_solver). The stabilised modes re-solve exactly on the
// clamping set (Nimble), first trying the previous step's set as a warm start, and keep the row
// classification that the LCP adjoint needs.
enum LcpSolver : int { kLcpPgs = 0, kLcpPgsStabilized = 1, kLcpDantzig = 2 };

// Options of the gradient through contacts (flags of Options::contact_gradient and of a
// step_vjp call; Werling et al. 2021). 0 differentiates the branch the forward step took.
enum ContactGradient : int {
  kGradComplementarityAware = 1 << 0,  // also the loss-driven row classification; keep the one
                                       // with the larger gradient (Nimble section IV-D)
  kGradBounceCorrection = 1 << 1,      // dq'/dq of a bouncing contact is -e, continuous time's
                                       // value, instead of the discrete step's +1
};

// Per-environment status bits, set by device code and read by the host.
enum StatusBit : unsigned {
  kStatusNanState = 1u << 0,  // qpos or qvel held NaN/Inf at the start of a step
  kStatusNanCtrl = 1u << 1,   // ctrl held NaN/Inf
  kStatusNanResult = 1u << 2, // the step produced NaN/Inf (divergence)
  kStatusContactOverflow = 1u << 3,  // more contacts than the capacity: the extra ones were
                                     // not resolved this step (Data counts them)
  kStatusLcpNotConverged = 1u << 4,  // the LCP residual stayed above the tolerance
};
// bits after which an environment stops stepping (its state is not trustworthy); overflow and
// convergence bits are warnings and the environment goes on
constexpr unsigned kStatusStopMask = kStatusNanState | kStatusNanCtrl | kStatusNanResult;

// per-step counts a rollout can record
enum RolloutCount : int {
  kCountContacts = 0,  // contacts found
  kCountRows,          // constraint rows
  kCountWarmRows,      // rows warm-started from the previous step's impulse
  kCountSetHit,        // 1 when the previous clamping set solved the LCP (stabilised solvers)
  kCountOverflow,      // contacts beyond nconmax, not resolved
  kNumCounts
};

}  // namespace phx
