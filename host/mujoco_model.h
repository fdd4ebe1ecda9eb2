// A compiled MuJoCo model (mjModel) converted into a phx::Model, the way MJX's and MuJoCo Warp's
// put_model do: what MuJoCo's compiler computed (frames, inertias, defaults, meshes and their
// convex hulls, height fields) is taken as compiled. The MJCF loader (host/mjcf.cpp) is MuJoCo's
// compiler followed by this conversion.
//
// Built only when MuJoCo's headers are found (cmake/mujoco.cmake defines PHX_HAVE_MUJOCO=1).
// The conversion reads the mjModel's fields and calls no MuJoCo function, so the mjModel must
// come from a MuJoCo of the version whose headers Phalanx was compiled against
// (kMujocoHeaderVersion; the Python binding checks mujoco.mj_version()).
#pragma once

#include "host/model.h"

// mjModel, as declared by <mujoco/mjmodel.h>
typedef struct mjModel_ mjModel;

namespace phx {

// mjVERSION_HEADER of the MuJoCo headers this conversion was compiled against (4000000 is 4.0.0)
extern const int kMujocoHeaderVersion;

// Convert a compiled MuJoCo model into a Phalanx Model, then finalize() and validate() it.
//
// Taken as compiled: counts, timestep, gravity, the medium (density, viscosity, wind: MuJoCo's
// inertia-box fluid model), ccd_iterations and ccd_tolerance; bodies,
// joints, dofs and geoms with their frames, masses, inertias, sizes, friction and contact
// filters; meshes as their convex hulls (hull vertices, vertex adjacency, faces counter-clockwise
// about their outward normals, vertex ids local to the mesh); height fields; contact exclusions;
// sites; dof friction loss; tendons, fixed (over hinges and slides) and spatial (through sites and
// pulleys), with their springs and dead band, dampers, limits, friction loss and length at qpos0;
// equality constraints (connect, weld, joint, fixed tendon) as hard rows; actuators (motor,
// position, velocity, intvelocity, damper, muscle, general with fixed, affine or muscle gain and
// no, affine or muscle bias; dyntype none, integrator, filter, filterexact or muscle with one
// activation, its time constants, actrange and actearly; joint or jointinparent transmission on
// a hinge or slide, a tendon, or a slider-crank; the gain and bias parameters their types read,
// a muscle's lengthrange and acc0 as compiled; ctrl and force ranges); names. Disable flags are
// applied (contact or constraint: contype = conaffinity = 0 and opt.contact off; limit:
// jnt_limited = tendon_limited = 0 and opt.limit off; spring, damper, gravity, clampctrl,
// frictionloss, equality: the coefficients, gravity, ctrllimited or constraints dropped).
//
// Throws std::runtime_error naming the element ("joint 'hip' (id 3)") for physics Phalanx does not
// simulate: tendon equalities of spatial tendons, tendons with armature, polynomial stiffness or
// damping or actuator force limits, actuators with dcmotor, pid or user dynamics or dcmotor, so3
// or pid gains and biases, actuator damping, armature or delay, actuators on free or ball
// joints, polynomial joint stiffness or damping, plasticity, actuator
// gravity compensation, joint actuator force limits, gravity
// compensation, explicit contact pairs, flexes, plugins, SDF geoms, surface velocity, adhesion,
// fluid shapes (the ellipsoid fluid model), disabled actuation or parent filtering, and a
// colliding geom on a mesh MuJoCo
// computed no convex hull for. std::invalid_argument for a null model or data inconsistent with
// MuJoCo's conventions.
//
// Recorded in Model::ignored (one entry per kind, with the first element and a count): what does
// not change the simulated physics: cameras, lights, sensors, keyframes, textures, materials,
// skins, custom data, the convex hull MuJoCo did not
// compute for a mesh only non-colliding geoms use (its bounding box stands in, keeping mesh and
// geom ids MuJoCo's), solref and solimp of equalities (the rows are hard), non-default contact
// and limit solver parameters (solref, solimp, solmix, priority, margin, gap), the integrators
// Phalanx lacks (implicit runs as implicitfast, RK4 as Euler), fluid forces, and flags of
// features Phalanx lacks.
Model from_mujoco(const mjModel* m);

}  // namespace phx
