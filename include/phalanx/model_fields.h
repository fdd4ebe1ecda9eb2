// The model's fields, declared once. Every consumer expands these tables (X-macros, as MuJoCo's
// mjxmacro.h): the host's Model (host/model.h) and the kernels' ModelView (model_view.h), the
// view's construction from a Model (host/view_builder.h), the size checks of Model::validate,
// the lane broadcast of the Jacobian's SIMD passes (host/lane_adjoint.h), the list of
// differentiable parameters with their adjoints, and the Python properties. Adding a field is
// one row here plus the physics that reads it.
#pragma once

#include "phalanx/config.h"

// Counts of the model's entities: X(name, comment). Array sizes are products of a count and a
// width (PHX_MODEL_ARRAYS), workspace sizes expressions in the counts (phalanx/workspace.h).
#define PHX_MODEL_COUNTS(X)                                                                    \
  X(nq, "number of generalized coordinates")                                                   \
  X(nv, "number of degrees of freedom")                                                        \
  X(nu, "number of actuators")                                                                 \
  X(na, "number of activation states (one per actuator with dynamics)")                        \
  X(nbody, "number of bodies, including the world body 0")                                     \
  X(njnt, "number of joints")                                                                  \
  X(ngeom, "number of geoms")                                                                  \
  X(nsite, "number of sites (frames fixed to bodies, for costs and observations)")             \
  X(npair, "number of geom pairs that may collide (after MuJoCo's filters)")                   \
  X(npair_convex, "number of those pairs that take the convex narrowphase (GJK and EPA)")      \
  X(nexclude, "number of excluded body pairs (MJCF <contact><exclude>)")                       \
  X(ntendon, "number of tendons (fixed and spatial)")                                          \
  X(nwrap, "number of entries of all tendons (joints, sites, pulleys)")                        \
  X(neq, "number of equality constraints")                                                     \
  X(nmesh, "number of meshes (each kept as its convex hull)")                                  \
  X(nmeshvert, "number of hull vertices of all meshes")                                        \
  X(nmeshadj, "number of hull-edge entries of all meshes' vertex adjacency (twice the edges)") \
  X(nmeshpoly, "number of hull faces of all meshes")                                           \
  X(nmeshpolyvert, "number of vertex entries of all hull faces")                               \
  X(nhfield, "number of height fields")                                                        \
  X(nhfielddata, "number of elevation samples of all height fields")                           \
  X(nmocap, "number of mocap bodies (their poses are per-environment inputs)")

// Options (MJCF <option> and Phalanx's solver settings), scalars:
//   X(kind, name, default, comment)
// kind `real` is double on the host and the run's scalar in a view; `flag` is bool on the host
// and int in a view. gravity and wind, 3-vectors, are declared beside the table by each
// consumer.
#define PHX_MODEL_OPTIONS(X)                                                                    \
  X(real, timestep, 0.002, "integration step (s)")                                              \
  X(real, density, 0, "density of the medium (kg/m^3): quadratic drag (fluid.h)")               \
  X(real, viscosity, 0, "viscosity of the medium (Pa s): viscous drag (fluid.h)")               \
  X(int, integrator, 0, "Integrator: 0 Euler (joint damping implicit), 1 implicitfast")         \
  X(int, solver, 0, "Solver: 0 Featherstone with the LCP, 1 XPBD (maximal coordinates)")        \
  X(int, xpbd_substeps, 1, "XPBD substeps per step")                                            \
  X(int, xpbd_iterations, 4, "XPBD joint iterations per substep")                               \
  X(int, xpbd_joint_solver, 0, "XpbdJointSolver: 0 all joints at once (tree), 1 Gauss-Seidel")  \
  X(flag, contact, true, "detect and resolve contacts")                                         \
  X(flag, limit, true, "enforce joint limits")                                                  \
  X(int, lcp_solver, 0,                                                                         \
    "LcpSolver: 0 PGS, 1 PGS then Nimble's stabilisation on the clamping set, 2 Dantzig "       \
    "pivoting then stabilisation")                                                              \
  X(int, lcp_iterations, 30, "projected Gauss-Seidel sweeps per step")                          \
  X(int, lcp_max_iterations, 500,                                                               \
    "sweeps a step may take in all when lcp_iterations leave the residual above "               \
    "lcp_residual_limit (damped, in rounds of lcp_iterations)")                                 \
  X(real, lcp_tolerance, 1e-6,                                                                  \
    "velocity tolerance (m/s) of row classification and of accepting an exact re-solve")        \
  X(real, lcp_sweep_tolerance, 0,                                                               \
    "projected Gauss-Seidel stops after a sweep that changes no row's velocity by more (m/s); " \
    "0: every one of lcp_iterations")                                                           \
  X(real, lcp_residual_limit, 1e-2,                                                             \
    "largest velocity (m/s, rad/s) a step may leave a contact or limit violating; PGS works "   \
    "on past lcp_iterations above it, and a step left above it sets kStatusLcpNotConverged")    \
  X(int, contact_gradient, 0,                                                                   \
    "ContactGradient flags of the step adjoint: complementarity-aware classification, "         \
    "elastic-bounce correction")                                                                \
  X(real, erp, 0.2, "fraction of a penetration removed per step (Baumgarte)")                   \
  X(real, slop, 1e-3, "penetration (m or rad) left uncorrected, avoids jitter")                 \
  X(int, ccd_iterations, 35, "iteration bound of the convex narrowphase (GJK, EPA)")            \
  X(real, ccd_tolerance, 1e-6, "distance tolerance (m) ending the convex narrowphase")

// Arrays: X(kind, name, count, width, comment), `count` entities (one of PHX_MODEL_COUNTS) of
// `width` numbers each. kind `real` is double on the
// host and the run's scalar in a view, `int` is int. Field names and meanings are MuJoCo's
// mjModel's where it has the field. Bodies are stored parents first (body 0 is the world),
// joints and geoms grouped by body.
#define PHX_MODEL_ARRAYS(X)                                                                      \
  /* default configuration and spring reference */                                              \
  X(real, qpos0, nq, 1, "qpos at the reference configuration")                                  \
  X(real, qpos_spring, nq, 1, "reference qpos of joint springs")                                \
  /* bodies */                                                                                   \
  X(int, body_parentid, nbody, 1, "id of the parent body")                                      \
  X(int, body_rootid, nbody, 1, "id of the root of the body's tree")                            \
  X(int, body_jntnum, nbody, 1, "number of joints of the body")                                 \
  X(int, body_jntadr, nbody, 1, "first joint id, -1 if none")                                   \
  X(int, body_dofnum, nbody, 1, "number of dofs of the body")                                   \
  X(int, body_dofadr, nbody, 1, "first dof id, -1 if none")                                     \
  X(int, body_geomnum, nbody, 1, "number of geoms of the body")                                 \
  X(int, body_geomadr, nbody, 1, "first geom id, -1 if none")                                   \
  X(real, body_pos, nbody, 3, "position offset relative to the parent body")                    \
  X(real, body_quat, nbody, 4, "orientation offset relative to the parent body")                \
  X(real, body_ipos, nbody, 3, "centre of mass in the body frame")                              \
  X(real, body_iquat, nbody, 4, "principal inertia frame in the body frame")                    \
  X(real, body_mass, nbody, 1, "mass (kg)")                                                     \
  X(real, body_inertia, nbody, 3, "principal moments of inertia about the centre of mass")      \
  X(int, body_mocapid, nbody, 1, "the body's mocap pose (mocap_pos, mocap_quat), -1 if none")   \
  /* mocap bodies: children of the world without joints, whose pose relative to the world is   \
     mocap_pos and the normalised mocap_quat (MuJoCo's mjData fields) in place of body_pos and   \
     body_quat; parameters, so each environment can have its own and gradients reach them */    \
  X(real, mocap_pos, nmocap, 3, "mocap bodies' positions in world")                             \
  X(real, mocap_quat, nmocap, 4, "mocap bodies' orientations in world (normalised when read)")  \
  /* joints */                                                                                   \
  X(int, jnt_type, njnt, 1, "JointType: 0 free, 1 ball, 2 slide, 3 hinge")                      \
  X(int, jnt_bodyid, njnt, 1, "id of the joint's body")                                         \
  X(int, jnt_qposadr, njnt, 1, "start address in qpos")                                         \
  X(int, jnt_dofadr, njnt, 1, "start address in qvel")                                          \
  X(int, jnt_limited, njnt, 1, "does the joint have limits (0 or 1)")                           \
  X(real, jnt_pos, njnt, 3, "anchor position in the body frame")                                \
  X(real, jnt_axis, njnt, 3, "unit axis in the body frame (hinge, slide)")                      \
  X(real, jnt_range, njnt, 2, "joint limits (rad or m)")                                        \
  X(real, jnt_stiffness, njnt, 1, "spring stiffness about qpos_spring")                         \
  /* degrees of freedom */                                                                       \
  X(int, dof_bodyid, nv, 1, "id of the dof's body")                                             \
  X(int, dof_jntid, nv, 1, "id of the dof's joint")                                             \
  X(int, dof_parentid, nv, 1, "previous dof on the path to the root, -1 if none")               \
  X(int, dof_treeadr, nv, 1, "first dof of the dof's tree: the mass matrix couples no two trees") \
  X(real, dof_armature, nv, 1, "armature inertia added to the mass matrix's diagonal")          \
  X(real, dof_damping, nv, 1, "viscous damping coefficient")                                    \
  X(real, dof_frictionloss, nv, 1, "dry friction (N or N m): a row of impulse within +-it dt")   \
  /* geoms */                                                                                    \
  X(int, geom_type, ngeom, 1, "GeomType: 0 plane, 2 sphere, 3 capsule, 6 box, ...")             \
  X(int, geom_bodyid, ngeom, 1, "id of the geom's body")                                        \
  X(int, geom_contype, ngeom, 1, "contact type bit mask")                                       \
  X(int, geom_conaffinity, ngeom, 1, "contact affinity bit mask")                               \
  X(int, geom_condim, ngeom, 1, "contact dimensionality (1, 3, 4, 6)")                          \
  X(real, geom_size, ngeom, 3, "type-specific sizes, MuJoCo's meaning")                         \
  X(real, geom_pos, ngeom, 3, "position offset in the body frame")                              \
  X(real, geom_quat, ngeom, 4, "orientation offset in the body frame")                          \
  X(real, geom_friction, ngeom, 3, "sliding, torsional and rolling friction")                   \
  X(real, geom_rbound, ngeom, 1, "radius of a bounding sphere at geom_pos; 0: infinite")        \
  X(real, geom_restitution, ngeom, 1, "coefficient of restitution; a pair uses the larger")     \
  X(int, geom_dataid, ngeom, 1, "mesh id of a mesh geom, height-field id of an hfield, else -1") \
  X(int, geom_visible, ngeom, 1, "1 when drawn (alpha > 0): the geoms rays see")                  \
  /* sites: frames fixed to bodies */                                                             \
  X(int, site_bodyid, nsite, 1, "id of the site's body")                                          \
  X(real, site_pos, nsite, 3, "position in the body frame")                                       \
  X(real, site_quat, nsite, 4, "orientation in the body frame")                                   \
  /* meshes: each one's convex hull, in the frame of the geoms that use it (MuJoCo's mesh       \
     frame); vertex ids in mesh_vertadj and mesh_polyvert are local to the mesh */               \
  X(int, mesh_vertadr, nmesh, 1, "first hull vertex in mesh_vert")                              \
  X(int, mesh_vertnum, nmesh, 1, "number of hull vertices")                                     \
  X(int, mesh_polyadr, nmesh, 1, "first hull face in the mesh_poly arrays")                     \
  X(int, mesh_polynum, nmesh, 1, "number of hull faces")                                        \
  X(real, mesh_vert, nmeshvert, 3, "hull vertex position in the mesh frame")                    \
  X(int, mesh_vertadjadr, nmeshvert, 1, "first neighbour of the vertex in mesh_vertadj")        \
  X(int, mesh_vertadjnum, nmeshvert, 1, "number of neighbours of the vertex (its hull edges)")  \
  X(int, mesh_vertadj, nmeshadj, 1, "neighbouring hull vertex (local id)")                      \
  X(real, mesh_polynormal, nmeshpoly, 3, "outward unit normal of the hull face")                \
  X(int, mesh_polyvertadr, nmeshpoly, 1, "first vertex of the face in mesh_polyvert")           \
  X(int, mesh_polyvertnum, nmeshpoly, 1, "number of vertices of the face")                      \
  X(int, mesh_polyvert, nmeshpolyvert, 1, "face vertex (local id), counter-clockwise about the " \
    "outward normal")                                                                            \
  /* height fields (MuJoCo's hfield): elevation in [0, 1] on a nrow x ncol grid */               \
  X(real, hfield_size, nhfield, 4, "half-extents x and y, height, depth of the base")           \
  X(int, hfield_nrow, nhfield, 1, "number of rows (along y)")                                   \
  X(int, hfield_ncol, nhfield, 1, "number of columns (along x)")                                \
  X(int, hfield_adr, nhfield, 1, "first sample in hfield_data")                                 \
  X(real, hfield_data, nhfielddata, 1, "elevation, row-major, scaled by the height")            \
  /* geom pairs that may collide, in deterministic order (g1 < g2) */                            \
  X(int, pair_geom, npair, 2, "candidate collision pairs after MuJoCo's filters")               \
  X(int, exclude_bodies, nexclude, 2, "body pairs whose geoms never collide (MJCF <exclude>)")   \
  /* tendons. Fixed: length L = sum of coef q over the entries (hinge or slide joints).          \
     Spatial: L = sum over the path's segments (consecutive sites) of their lengths, each        \
     divided by the divisor of the last pulley before it. Velocity V = (dL/dq) qvel. A           \
     spring-damper -stiffness (L - clamp(L, lengthspring)) - damping V along dL/dq; limits       \
     as one-sided rows */                                                                        \
  X(int, tendon_type, ntendon, 1, "TendonType: 0 fixed, 1 spatial (MuJoCo's mjtTendon)")         \
  X(int, tendon_adr, ntendon, 1, "first entry in the wrap arrays")                               \
  X(int, tendon_num, ntendon, 1, "number of entries")                                            \
  X(int, tendon_limited, ntendon, 1, "is the length limited to tendon_range (0 or 1)")           \
  X(real, tendon_range, ntendon, 2, "length limits")                                             \
  X(real, tendon_length0, ntendon, 1, "length at qpos0 (the reference of tendon equalities)")    \
  X(real, tendon_stiffness, ntendon, 1, "spring stiffness")                                      \
  X(real, tendon_damping, ntendon, 1, "damping coefficient")                                     \
  X(real, tendon_lengthspring, ntendon, 2, "lengths between which the spring is slack")          \
  X(real, tendon_frictionloss, ntendon, 1, "dry friction (N or N m) along the tendon: a row "    \
    "of impulse within +-it dt")                                                                 \
  X(int, wrap_type, nwrap, 1, "WrapType: 1 joint, 2 pulley, 3 site (MuJoCo's mjtWrap)")          \
  X(int, wrap_objid, nwrap, 1, "the entry's joint (hinge or slide) or site; -1 for a pulley")    \
  X(real, wrap_prm, nwrap, 1, "joint: coefficient of its coordinate; pulley: divisor")           \
  /* equality constraints, held by bilateral rows: connect (3 rows, two anchor points            \
     coincide), weld (6 rows, the anchors coincide and two frames align), joint and tendon (1    \
     row: L1 - L1ref = P(L2 - L2ref), a quartic P in the second joint's coordinate or tendon's   \
     length, refs at qpos0; without a second, L1 - L1ref = P(0)) */                              \
  X(int, eq_type, neq, 1, "EqType: 0 connect, 1 weld, 2 joint, 3 tendon (MuJoCo's mjtEq)")       \
  X(int, eq_obj1id, neq, 1, "first body (connect, weld), joint (hinge or slide) or tendon")      \
  X(int, eq_obj2id, neq, 1, "second body, joint or tendon; -1: none (joint, tendon)")            \
  X(int, eq_active, neq, 1, "is the constraint enforced (0 or 1)")                                \
  X(real, eq_anchor, neq, 6, "connect, weld: point on body 1, point on body 2, each in its "      \
    "body's frame")                                                                               \
  X(real, eq_relquat, neq, 8, "weld: frames on body 1 and on body 2 (orientations in their "      \
    "bodies' frames) held aligned")                                                               \
  X(real, eq_polycoef, neq, 5, "joint, tendon: coefficients of P, constant term first")          \
  /* actuators: MuJoCo's general model on a hinge or slide joint or a tendon: length L = gear    \
     q (gear times the tendon's length), velocity V likewise, force = gain x + bias with gain    \
     = gainprm[0] (+ gainprm[1] L + gainprm[2] V when affine) and bias = 0 or biasprm[0] +       \
     biasprm[1] L + biasprm[2] V (affine), x the input: ctrl clamped where limited, or act       \
     for an actuator with dynamics (below); force clamped where limited; qfrc += gear force      \
     along the joint or the tendon's row. A motor: fixed gain 1, no bias. <position>: gain       \
     kp, bias (0, -kp, -kv). <intvelocity>: the same on an integrator's act. A muscle's gain     \
     and bias are MuJoCo's curves of (L, V) normalised by lengthrange, with gainprm = biasprm =  \
     (range[2], force, scale, lmin, lmax, vmax, fpmax, fvmax), force = scale / acc0 where it is  \
     negative (muscle.h) */                                                                      \
  X(int, actuator_trntype, nu, 1, "ActuatorTrn: 0 joint, 1 tendon, 2 slider-crank")             \
  X(int, actuator_trnid, nu, 1, "id of the transmission joint (hinge or slide), tendon, or "     \
    "crank site")                                                                                \
  X(int, actuator_slidersite, nu, 1, "slider-crank: the slider site (its z axis the slider's); " \
    "-1 otherwise")                                                                              \
  X(real, actuator_cranklength, nu, 1, "slider-crank: the rod's length")                        \
  X(int, actuator_ctrllimited, nu, 1, "is ctrl clamped to ctrlrange (0 or 1)")                  \
  X(real, actuator_gear, nu, 1, "scalar gear ratio")                                            \
  X(real, actuator_ctrlrange, nu, 2, "ctrl limits")                                             \
  X(int, actuator_gaintype, nu, 1, "ActuatorGain: 0 fixed, 1 affine, 2 muscle (mjtGain)")       \
  X(int, actuator_biastype, nu, 1, "ActuatorBias: 0 none, 1 affine, 2 muscle (mjtBias)")        \
  X(real, actuator_gainprm, nu, 9, "gain: constant, length and velocity coefficients (affine), " \
    "or the muscle's nine")                                                                      \
  X(real, actuator_biasprm, nu, 9, "bias: constant, length and velocity coefficients (affine), " \
    "or the muscle's nine")                                                                      \
  X(int, actuator_forcelimited, nu, 1, "is the force clamped to forcerange (0 or 1)")           \
  X(real, actuator_forcerange, nu, 2, "force limits")                                            \
  X(real, actuator_lengthrange, nu, 2, "muscle: the range of L over the joints' ranges")         \
  X(real, actuator_acc0, nu, 1, "muscle: the norm of M^-1 times the moment at qpos0")           \
  /* activation dynamics (MuJoCo's dyntype): an actuator with dynamics has one state act (its    \
     entry actuator_actadr of the batched act), whose rate is ctrl (integrator), (ctrl - act) /  \
     tau (filter; filterexact integrates it exactly over the step) or a muscle's, whose time     \
     constant depends on act and on the sign of ctrl - act, clamped to actrange where limited    \
     after each step; its force reads act (the next step's act with actearly) where a stateless  \
     actuator reads ctrl */                                                                      \
  X(int, actuator_dyntype, nu, 1, "ActuatorDyn: 0 none, 1 integrator, 2 filter, 3 filterexact, " \
    "4 muscle")                                                                                  \
  X(real, actuator_dynprm, nu, 3, "filter: time constant tau (s); muscle: activation and "       \
    "deactivation time constants (s), smoothing width")                                          \
  X(int, actuator_actadr, nu, 1, "the actuator's entry in act, -1 without dynamics")             \
  X(int, actuator_actlimited, nu, 1, "is act clamped to actrange after each step (0 or 1)")      \
  X(real, actuator_actrange, nu, 2, "activation limits")                                         \
  X(int, actuator_actearly, nu, 1, "does the force read the next step's act (0 or 1)")

// The differentiable parameters, in the order of every parameter list (gradients,
// parameter-Jacobian columns, per-environment values): X(Name, field, check), `field` a real
// array of PHX_MODEL_ARRAYS and `check` the ParamCheck its values pass. The dynamics
// parameters come first, then those of contacts (their adjoints are ModelAdjoint's and
// ContactModelAdjoint's).
#define PHX_DYNAMICS_PARAMS(X)                                                                   \
  X(BodyMass, body_mass, kCheckNonNegative)                                                      \
  X(BodyInertia, body_inertia, kCheckNonNegative)                                                \
  X(DofDamping, dof_damping, kCheckFinite)                                                       \
  X(DofArmature, dof_armature, kCheckFinite)                                                     \
  X(JntStiffness, jnt_stiffness, kCheckFinite)                                                   \
  X(ActuatorGear, actuator_gear, kCheckFinite)                                                   \
  X(BodyIpos, body_ipos, kCheckFinite)                                                           \
  X(BodyPos, body_pos, kCheckFinite)                                                             \
  X(ActuatorGainprm, actuator_gainprm, kCheckFinite)                                             \
  X(ActuatorBiasprm, actuator_biasprm, kCheckFinite)                                             \
  X(TendonStiffness, tendon_stiffness, kCheckFinite)                                             \
  X(TendonDamping, tendon_damping, kCheckFinite)                                                 \
  X(TendonLengthspring, tendon_lengthspring, kCheckFinite)                                       \
  X(MocapPos, mocap_pos, kCheckFinite)                                                           \
  X(MocapQuat, mocap_quat, kCheckQuaternion)
#define PHX_CONTACT_PARAMS(X)                                                                    \
  X(GeomFriction, geom_friction, kCheckNonNegative)                                              \
  X(GeomRestitution, geom_restitution, kCheckUnitInterval)                                       \
  X(GeomSize, geom_size, kCheckGeomSize)
#define PHX_PARAMS(X) PHX_DYNAMICS_PARAMS(X) PHX_CONTACT_PARAMS(X)

// Arrays that each environment may hold its own copy of, as it may a parameter's, but without
// gradients: data a task redraws per episode, such as a height field's terrain. They follow the
// parameters in every per-environment list (set_parameter, param_nbatch, env_view) and take no
// part in gradients: X(Name, field, check) as above.
#define PHX_ENV_FIELDS(X) X(HfieldData, hfield_data, kCheckFinite)
// every field set_parameter may give per-environment copies: the parameters, then the rest
#define PHX_BATCHED_FIELDS(X) PHX_PARAMS(X) PHX_ENV_FIELDS(X)

namespace phx {

// One descriptor per array of PHX_MODEL_ARRAYS: its width, and its count in any struct with
// the model's counts (Model, ModelView).
namespace field {
#define PHX_FIELD_IS_REAL_real true
#define PHX_FIELD_IS_REAL_int false
#define PHX_FIELD_DESCRIPTOR(kind, name, count_, width_, comment)                              \
  struct name {                                                                                  \
    static constexpr bool is_real = PHX_FIELD_IS_REAL_##kind;                                    \
    static constexpr int width = width_;                                                         \
    template <class M>                                                                           \
    PHX_HD static int count(const M& m) {                                                        \
      return m.count_;                                                                           \
    }                                                                                            \
  };
PHX_MODEL_ARRAYS(PHX_FIELD_DESCRIPTOR)
#undef PHX_FIELD_DESCRIPTOR
#undef PHX_FIELD_IS_REAL_real
#undef PHX_FIELD_IS_REAL_int
}  // namespace field

// What a parameter's values must be (Model::set_parameter and validate check them): finite
// always; nonnegative (masses, inertias, friction); in [0, 1] (restitution); positive where the
// geom type uses the size (sphere: radius; capsule: radius and half-length; box: half-sizes).
// Negative damping, armature or stiffness only make a system unstable, and gradient checks
// perturb them about 0, so they are only required to be finite. A quaternion (mocap_quat) must
// not be zero: it is normalised where it is read.
enum ParamCheck : int {
  kCheckFinite,
  kCheckNonNegative,
  kCheckUnitInterval,
  kCheckGeomSize,
  kCheckQuaternion
};

// Indices of the per-environment fields: the parameters (0 .. kNumParams - 1, those of
// gradients), then the other fields (up to kNumBatched).
enum Param : int {
#define PHX_PARAM_ENUM(Name, field_, check) kParam##Name,
  PHX_BATCHED_FIELDS(PHX_PARAM_ENUM)
#undef PHX_PARAM_ENUM
  kNumBatched
};
#define PHX_PARAM_ONE(Name, field_, check) +1
inline constexpr int kNumParams = 0 PHX_PARAMS(PHX_PARAM_ONE);
#undef PHX_PARAM_ONE

inline constexpr const char* kParamNames[kNumBatched] = {
#define PHX_PARAM_NAME(Name, field_, check) #field_,
    PHX_BATCHED_FIELDS(PHX_PARAM_NAME)
#undef PHX_PARAM_NAME
};

inline constexpr ParamCheck kParamChecks[kNumBatched] = {
#define PHX_PARAM_CHECK(Name, field_, check) check,
    PHX_BATCHED_FIELDS(PHX_PARAM_CHECK)
#undef PHX_PARAM_CHECK
};

// numbers per entity (body, dof, joint, actuator or geom) of per-environment field k
PHX_HD constexpr int param_width(int k) {
  switch (k) {
#define PHX_PARAM_WIDTH(Name, field_, check) \
  case kParam##Name:                         \
    return field::field_::width;
    PHX_BATCHED_FIELDS(PHX_PARAM_WIDTH)
#undef PHX_PARAM_WIDTH
    default:
      return 0;
  }
}

// the entities per-environment field k has one entry (of param_width(k) numbers) for, in any
// struct with the counts (ModelView, the host's Model)
template <class M>
PHX_HD int param_count(const M& m, int k) {
  switch (k) {
#define PHX_PARAM_COUNT(Name, field_, check) \
  case kParam##Name:                         \
    return field::field_::count(m);
    PHX_BATCHED_FIELDS(PHX_PARAM_COUNT)
#undef PHX_PARAM_COUNT
    default:
      return 0;
  }
}

}  // namespace phx
