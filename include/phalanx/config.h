// Compilation switches shared by every header of the single-source core.
#pragma once

// PHX_HD marks a function that compiles for the host and, under nvcc, for the device.
// PHX_DEVICE_NOINLINE keeps a large stage a device function of its own, called by every kernel
// that uses it, so that ptxas compiles it once instead of once per kernel (no effect on the
// host, where inlining is left to the compiler). Its registers are then allocated apart from its
// caller's: inlined where the caller holds much, a stage that needs most of a thread's 255 would
// spill, and called there it makes the caller save what it holds. So the reverse passes call
// theirs where they hold least (cmake/gpu_budgets.txt).
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

// MuJoCo's numbering, so model arrays read the same in both libraries: X(Name, name, value).
#define PHX_JOINT_TYPES(X) X(Free, free, 0) X(Ball, ball, 1) X(Slide, slide, 2) X(Hinge, hinge, 3)
#define PHX_GEOM_TYPES(X)                                                                       \
  X(Plane, plane, 0) X(HField, hfield, 1) X(Sphere, sphere, 2) X(Capsule, capsule, 3)         \
  X(Ellipsoid, ellipsoid, 4) X(Cylinder, cylinder, 5) X(Box, box, 6) X(Mesh, mesh, 7)

enum JointType : int {
#define PHX_JOINT_ENUM(Name, name, value) kJoint##Name = value,
  PHX_JOINT_TYPES(PHX_JOINT_ENUM)
#undef PHX_JOINT_ENUM
};
enum GeomType : int {
#define PHX_GEOM_ENUM(Name, name, value) kGeom##Name = value,
  PHX_GEOM_TYPES(PHX_GEOM_ENUM)
#undef PHX_GEOM_ENUM
};
// the name of each type, by its number
inline constexpr const char* kJointTypeNames[] = {
#define PHX_TYPE_NAME(Name, name, value) #name,
    PHX_JOINT_TYPES(PHX_TYPE_NAME)};
inline constexpr const char* kGeomTypeNames[] = {PHX_GEOM_TYPES(PHX_TYPE_NAME)};
#undef PHX_TYPE_NAME

// An actuator's gain and bias (Model::actuator_gaintype, actuator_biastype), numbered as MuJoCo's
// mjtGain and mjtBias.
enum ActuatorGain : int { kGainFixed = 0, kGainAffine = 1, kGainMuscle = 2 };
enum ActuatorBias : int { kBiasNone = 0, kBiasAffine = 1, kBiasMuscle = 2 };
// An actuator's activation dynamics (Model::actuator_dyntype), numbered as MuJoCo's mjtDyn.
enum ActuatorDyn : int {
  kDynNone = 0,
  kDynIntegrator = 1,
  kDynFilter = 2,
  kDynFilterExact = 3,
  kDynMuscle = 4
};
// What an actuator moves (Model::actuator_trntype): a joint, a tendon, or a slider-crank (a
// crank site driving a slider site along the slider's z axis through a rod).
enum ActuatorTrn : int { kTrnJoint = 0, kTrnTendon = 1, kTrnSliderCrank = 2 };
// A tendon's kind (Model::tendon_type), numbered as MuJoCo's mjtTendon: fixed (a linear
// combination of joint coordinates) or spatial (a path through sites).
enum TendonType : int { kTendonFixed = 0, kTendonSpatial = 1 };
// What a tendon's entry is (Model::wrap_type), numbered as MuJoCo's mjtWrap: a joint with its
// coefficient (fixed tendons); a site the path passes through, a pulley that divides the
// lengths of the path's branches after it, or a sphere or cylinder geom the span between the
// sites on either side wraps over, its wrap_prm the side site (-1: none; spatial tendons).
enum WrapType : int {
  kWrapJoint = 1,
  kWrapPulley = 2,
  kWrapSite = 3,
  kWrapSphere = 4,
  kWrapCylinder = 5
};
// What an equality constraint holds (Model::eq_type), numbered as MuJoCo's mjtEq, and its rows.
enum EqType : int { kEqConnect = 0, kEqWeld = 1, kEqJoint = 2, kEqTendon = 3 };
PHX_HD constexpr int eq_rows(int type) {
  return type == kEqConnect ? 3 : type == kEqWeld ? 6 : 1;
}

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
#define PHX_LCP_SOLVERS(X) X(Pgs, pgs, 0) X(PgsStabilized, pgs_stabilized, 1) X(Dantzig, dantzig, 2)
enum LcpSolver : int {
#define PHX_LCP_SOLVER_ENUM(Name, name, value) kLcp##Name = value,
  PHX_LCP_SOLVERS(PHX_LCP_SOLVER_ENUM)
#undef PHX_LCP_SOLVER_ENUM
};
// the name of each solver, by its number (Python's model.lcp_solver)
inline constexpr const char* kLcpSolverNames[] = {
#define PHX_LCP_SOLVER_NAME(Name, name, value) #name,
    PHX_LCP_SOLVERS(PHX_LCP_SOLVER_NAME)
#undef PHX_LCP_SOLVER_NAME
};

// How a step integrates the velocity (Options::integrator): kIntegratorEuler is MuJoCo's Euler
// (semi-implicit, joint damping implicit); kIntegratorImplicitFast is MuJoCo's implicitfast, with
// the velocity slopes of damping and actuators implicit (implicit.h).
#define PHX_INTEGRATORS(X) X(Euler, euler, 0) X(ImplicitFast, implicitfast, 1)
enum Integrator : int {
#define PHX_INTEGRATOR_ENUM(Name, name, value) kIntegrator##Name = value,
  PHX_INTEGRATORS(PHX_INTEGRATOR_ENUM)
#undef PHX_INTEGRATOR_ENUM
};
// the name of each integrator, by its number (Python's model.integrator)
inline constexpr const char* kIntegratorNames[] = {
#define PHX_INTEGRATOR_NAME(Name, name, value) #name,
    PHX_INTEGRATORS(PHX_INTEGRATOR_NAME)
#undef PHX_INTEGRATOR_NAME
};

// What a step solves (Options::solver): kSolverFeatherstone, the articulated-body dynamics in
// generalized coordinates with contacts and limits as an LCP (the default); kSolverXpbd, the
// position-based solver over the bodies in maximal coordinates (xpbd_step.h).
#define PHX_SOLVERS(X) X(Featherstone, featherstone, 0) X(Xpbd, xpbd, 1)
enum Solver : int {
#define PHX_SOLVER_ENUM(Name, name, value) kSolver##Name = value,
  PHX_SOLVERS(PHX_SOLVER_ENUM)
#undef PHX_SOLVER_ENUM
};
// the name of each solver, by its number (Python's model.solver)
inline constexpr const char* kSolverNames[] = {
#define PHX_SOLVER_NAME(Name, name, value) #name,
    PHX_SOLVERS(PHX_SOLVER_NAME)
#undef PHX_SOLVER_NAME
};

// How an XPBD iteration projects the joints (Options::xpbd_joint_solver): all at once by a
// Newton step on their linearisation over the kinematic tree (kXpbdTree, xpbd_tree.h; the
// default), or one after the other (kXpbdGaussSeidel, the seed papers' order)
#define PHX_XPBD_JOINT_SOLVERS(X) X(Tree, tree, 0) X(GaussSeidel, gauss_seidel, 1)
enum XpbdJointSolver : int {
#define PHX_XPBD_JOINT_SOLVER_ENUM(Name, name, value) kXpbd##Name = value,
  PHX_XPBD_JOINT_SOLVERS(PHX_XPBD_JOINT_SOLVER_ENUM)
#undef PHX_XPBD_JOINT_SOLVER_ENUM
};
inline constexpr const char* kXpbdJointSolverNames[] = {
#define PHX_XPBD_JOINT_SOLVER_NAME(Name, name, value) #name,
    PHX_XPBD_JOINT_SOLVERS(PHX_XPBD_JOINT_SOLVER_NAME)
#undef PHX_XPBD_JOINT_SOLVER_NAME
};
// the most points an XPBD path (xpbd_path: a cable through a limited tendon's sites) runs through
constexpr int kXpbdPathPoints = 16;

// Options of the gradient through contacts (flags of Options::contact_gradient and of a
// step_vjp call; Werling et al. 2021). 0 differentiates the branch the forward step took.
enum ContactGradient : int {
  kGradComplementarityAware = 1 << 0,  // also the loss-driven row classification; keep the one
                                       // with the larger gradient (Nimble section IV-D)
  kGradBounceCorrection = 1 << 1,      // dq'/dq of a bouncing contact is -e, continuous time's
                                       // value, instead of the discrete step's +1
};

// Per-environment status bits, set by device code and read by the host: X(Name, name, bit,
// stops), in the order they are reported. A bit that stops an environment (its state is not
// trustworthy) ends its steps; the others are warnings and the environment goes on.
#define PHX_STATUS_BITS(X)                                                                     \
  /* qpos or qvel held NaN/Inf at the start of a step */                                       \
  X(NanState, nan_state, 1u << 0, true)                                                        \
  /* an input held NaN/Inf: ctrl, an added force, a mocap pose (or its quaternion was zero) */ \
  X(NanCtrl, nan_ctrl, 1u << 1, true)                                                          \
  /* the step produced NaN/Inf (divergence) */                                                 \
  X(NanResult, nan_result, 1u << 2, true)                                                      \
  /* more contacts than the capacity: the extra ones were not resolved this step */            \
  X(ContactOverflow, contact_overflow, 1u << 3, false)                                         \
  /* the LCP residual stayed above the tolerance */                                            \
  X(LcpNotConverged, lcp_not_converged, 1u << 4, false)

enum StatusBit : unsigned {
#define PHX_STATUS_ENUM(Name, name, bit, stops) kStatus##Name = bit,
  PHX_STATUS_BITS(PHX_STATUS_ENUM)
#undef PHX_STATUS_ENUM
};
// the bits after which an environment stops stepping
constexpr unsigned kStatusStopMask = 0u
#define PHX_STATUS_STOPS(Name, name, bit, stops) | ((stops) ? unsigned(bit) : 0u)
    PHX_STATUS_BITS(PHX_STATUS_STOPS);
#undef PHX_STATUS_STOPS

// Whether this compilation pass carries the XPBD solver's step and reverse pass: host code
// always; CUDA device code only when built with PHX_CUDA_XPBD. In the device code they add
// ptxas time that breaks the build's budget on two cores (the rollout adjoint's unit alone ran
// past 40 CPU minutes), so by default a CUDA model with the XPBD solver is refused on the host
// (DeviceModel) before any launch.
#if defined(__CUDA_ARCH__) && !defined(PHX_CUDA_XPBD)
constexpr bool kXpbdCompiled = false;
#else
constexpr bool kXpbdCompiled = true;
#endif
// whether the CUDA kernels were built with it (for the host's check)
#ifdef PHX_CUDA_XPBD
constexpr bool kCudaXpbd = true;
#else
constexpr bool kCudaXpbd = false;
#endif

// per-step counts a rollout can record
enum RolloutCount : int {
  kCountContacts = 0,   // contacts found
  kCountRows,           // constraint rows
  kCountWarmRows,       // rows warm-started from the previous step's impulse
  kCountSetHit,         // 1 when the previous clamping set solved the LCP (stabilised solvers)
  kCountOverflow,       // contacts beyond nconmax, not resolved
  kCountGjkIterations,  // GJK iterations of the convex narrowphase, over all pairs
  kCountEpaIterations,  // EPA expansions of the convex narrowphase, over all pairs
  kNumCounts
};

}  // namespace phx
