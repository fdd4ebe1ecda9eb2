// Builds small Models in code for the C++ tests: bodies with any joints, random inertias,
// damping, stiffness and armature, so that dynamics can be checked against identities and
// analytic solutions without a file.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "host/model.h"
#include "host/view_builder.h"
#include "phalanx/kernels.h"
#include "phalanx/math/quat.h"

namespace phx::test {

// A workspace W (any struct with a static carve(m, Arena<T>&)) over storage it owns, laid out
// for the model m
template <class W, class T>
struct Carved {
  std::vector<T> reals;
  std::vector<int> ints;
  W w;

  template <class M>
  explicit Carved(const M& m) {
    ScratchSize n = carved_size<W, T>(m);
    reals.resize(n.reals);
    ints.resize(n.ints);
    Arena<T> arena(reals.data(), ints.data());
    w = W::carve(m, arena);
  }
};

class ModelBuilder {
 public:
  ModelBuilder() {
    Model& m = m_;
    m.body_parentid = {0};
    m.body_pos = {0, 0, 0};
    m.body_quat = {1, 0, 0, 0};
    m.body_ipos = {0, 0, 0};
    m.body_iquat = {1, 0, 0, 0};
    m.body_mass = {0};
    m.body_inertia = {0, 0, 0};
    m.body_names = {"world"};
  }

  // a body with its frame at pos/quat in the parent; principal inertia at ipos/iquat
  int body(int parent, Vec3<double> pos, Quat<double> quat, double mass, Vec3<double> inertia,
           Vec3<double> ipos = {}, Quat<double> iquat = {}) {
    Model& m = m_;
    int id = int(m.body_parentid.size());
    m.body_parentid.push_back(parent);
    push3(m.body_pos, pos);
    push4(m.body_quat, quat);
    push3(m.body_ipos, ipos);
    push4(m.body_iquat, iquat);
    m.body_mass.push_back(mass);
    push3(m.body_inertia, inertia);
    m.body_names.push_back("body" + std::to_string(id));
    return id;
  }

  // a joint of the last body; damping and armature apply to each of its dofs
  int joint(int type, Vec3<double> pos = {}, Vec3<double> axis = {0, 0, 1}, double damping = 0,
            double stiffness = 0, double armature = 0, double ref = 0, double springref = 0) {
    Model& m = m_;
    int id = int(m.jnt_type.size());
    int b = int(m.body_parentid.size()) - 1;
    m.jnt_type.push_back(type);
    m.jnt_bodyid.push_back(b);
    push3(m.jnt_pos, pos);
    push3(m.jnt_axis, (1.0 / norm(axis)) * axis);
    m.jnt_limited.push_back(0);
    m.jnt_range.insert(m.jnt_range.end(), {0, 0});
    m.jnt_stiffness.push_back(stiffness);
    m.jnt_names.push_back("joint" + std::to_string(id));
    for (int d = 0; d < joint_nv(type); ++d) {
      m.dof_damping.push_back(damping);
      m.dof_armature.push_back(armature);
    }
    // reference configuration
    if (type == kJointFree) {
      int at = 3 * b;
      m.qpos0.insert(m.qpos0.end(), {m.body_pos[at], m.body_pos[at + 1], m.body_pos[at + 2]});
      at = 4 * b;
      m.qpos0.insert(m.qpos0.end(), {m.body_quat[at], m.body_quat[at + 1], m.body_quat[at + 2],
                                     m.body_quat[at + 3]});
    } else if (type == kJointBall) {
      m.qpos0.insert(m.qpos0.end(), {1, 0, 0, 0});
    } else {
      m.qpos0.push_back(ref);
    }
    size_t n = joint_nq(type);
    m.qpos_spring.insert(m.qpos_spring.end(), m.qpos0.end() - n, m.qpos0.end());
    if (type == kJointHinge || type == kJointSlide) m.qpos_spring.back() = springref;
    return id;
  }

  // a motor on a hinge or slide joint
  void motor(int jnt, double gear, double lo = -1, double hi = 1, bool limited = true) {
    actuator(jnt, gear, kGainFixed, {1, 0, 0}, kBiasNone, {0, 0, 0}, lo, hi, limited);
  }

  // MuJoCo's general actuator (no activation), force unlimited unless flo < fhi
  void actuator(int jnt, double gear, int gaintype, Vec3<double> gainprm, int biastype,
                Vec3<double> biasprm, double lo = -1, double hi = 1, bool limited = true,
                double flo = 0, double fhi = 0) {
    Model& m = m_;
    m.actuator_trnid.push_back(jnt);
    m.actuator_gear.push_back(gear);
    m.actuator_ctrlrange.insert(m.actuator_ctrlrange.end(), {lo, hi});
    m.actuator_ctrllimited.push_back(limited ? 1 : 0);
    m.actuator_gaintype.push_back(gaintype);
    m.actuator_biastype.push_back(biastype);
    // the affine three of the nine parameters
    m.actuator_gainprm.insert(m.actuator_gainprm.end(), {gainprm[0], gainprm[1], gainprm[2]});
    m.actuator_biasprm.insert(m.actuator_biasprm.end(), {biasprm[0], biasprm[1], biasprm[2]});
    m.actuator_gainprm.resize(m.actuator_gainprm.size() + 6, 0.0);
    m.actuator_biasprm.resize(m.actuator_biasprm.size() + 6, 0.0);
    m.actuator_forcelimited.push_back(flo < fhi ? 1 : 0);
    m.actuator_forcerange.insert(m.actuator_forcerange.end(), {flo, fhi});
    m.actuator_names.push_back("actuator" + std::to_string(m.actuator_trnid.size() - 1));
  }

  Model build(double timestep = 0.002) {
    m_.opt.timestep = timestep;
    m_.finalize();
    m_.validate();
    return m_;
  }

 private:
  static void push3(std::vector<double>& v, Vec3<double> a) { v.insert(v.end(), {a.x, a.y, a.z}); }
  static void push4(std::vector<double>& v, Quat<double> q) {
    v.insert(v.end(), {q.w, q.x, q.y, q.z});
  }
  Model m_;
};

// A mechanism exercising every joint type and multi-joint bodies, with random parameters:
// a free base; a child with three hinges at one anchor (hip-like); a slide then a hinge; a
// ball joint; and a second, fixed-base tree.
inline Model random_mechanism(unsigned seed, double timestep = 0.002) {
  std::mt19937 rng(seed);
  auto u = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto v3 = [&](double s) { return Vec3<double>{u(-s, s), u(-s, s), u(-s, s)}; };
  auto quat = [&] { return normalize(Quat<double>{u(-1, 1), u(-1, 1), u(-1, 1), u(-1, 1)}); };
  auto inertia = [&] { return Vec3<double>{u(0.02, 0.1), u(0.02, 0.1), u(0.02, 0.1)}; };
  ModelBuilder b;
  int base = b.body(0, {0.1, -0.2, 1.0}, quat(), u(2, 4), inertia(), v3(0.1), quat());
  b.joint(kJointFree, {}, {0, 0, 1}, 0, 0, 0);
  b.body(base, v3(0.3), quat(), u(0.5, 2), inertia(), v3(0.1), quat());
  int j0 = b.joint(kJointHinge, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05), u(-0.3, 0.3), u(-0.3, 0.3));
  b.joint(kJointHinge, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05));
  b.joint(kJointHinge, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05));
  int c = b.body(base, v3(0.3), quat(), u(0.5, 2), inertia(), v3(0.1), quat());
  int j1 = b.joint(kJointSlide, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05), u(-0.1, 0.1));
  b.joint(kJointHinge, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05));
  b.body(c, v3(0.3), quat(), u(0.5, 2), inertia(), v3(0.1), quat());
  b.joint(kJointBall, v3(0.05), {0, 0, 1}, u(0, 1), u(0, 5), u(0, 0.05));
  int f = b.body(0, {1, 0, 0.5}, quat(), u(0.5, 2), inertia(), v3(0.1), quat());
  int j2 = b.joint(kJointHinge, v3(0.05), v3(1), u(0, 1), u(0, 5), u(0, 0.05));
  b.body(f, v3(0.3), quat(), u(0.5, 2), inertia(), v3(0.1), quat());
  b.motor(j0, u(1, 10));
  b.motor(j1, u(1, 10), -2, 2);
  b.motor(j2, u(1, 10), -1, 1, false);
  // a position servo (gain kp, bias -kp q - kv qvel) with a force range wide enough to stay
  // inactive, and a general actuator with affine gain and bias
  double kp = u(5, 20);
  b.actuator(j1, u(0.5, 2), kGainFixed, {kp, 0, 0}, kBiasAffine, {0, -kp, -u(0.5, 2)}, -1, 1, true,
             -1e3, 1e3);
  b.actuator(j0, u(0.5, 2), kGainAffine, {u(1, 3), u(-1, 1), u(-1, 1)}, kBiasAffine,
             {u(-1, 1), u(-2, 2), u(-2, 2)}, -1, 1, false);
  return b.build(timestep);
}

// A model view over host vectors of any scalar (double, float, Dual), with one workspace.
template <class T>
struct HostModel {
  std::vector<std::vector<T>> reals;
  std::vector<std::vector<int>> ints;
  ModelView<T> view;
  std::vector<T> scratch;
  Workspace<T> w;

  explicit HostModel(const Model& m) {
    auto real = [&](const std::vector<double>& v) -> const T* {
      reals.emplace_back(v.begin(), v.end());
      return reals.back().data();
    };
    auto integer = [&](const std::vector<int>& v) -> const int* {
      ints.push_back(v);
      return ints.back().data();
    };
    view = build_view<T>(m, real, integer);
    scratch.resize(Workspace<T>::size(view));
    Arena<T> arena(scratch.data(), nullptr);
    w = Workspace<T>::carve(view, arena);
  }
};

}  // namespace phx::test
