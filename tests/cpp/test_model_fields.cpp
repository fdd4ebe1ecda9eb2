// Tests of the declared-once tables (phalanx/model_fields.h, the workspace tables) and of what
// is derived from them: every model array is size-checked by Model::validate and carried into
// ModelView with its values; each parameter's width, count and field agree with its array; and
// every workspace's carve lays its arrays out disjoint and back to back over exactly the
// storage carved_size measures, for any counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/model.h"
#include "model_builder.h"
#include "phalanx/kernels.h"

namespace phx {
namespace {

Model humanoid() {
  return load_mjcf(std::string(PHX_MUJOCO_MODELS) + "/humanoid/humanoid.xml");
}

// the message of validate() on m, "" when it passes
std::string validate_error(const Model& m) {
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ModelFields, ValidateChecksTheSizeOfEveryArray) {
  const Model m = humanoid();
  ASSERT_EQ(validate_error(m), "");
#define PHX_CHECK_FIELD(kind, name, count, width, comment)                                   \
  {                                                                                          \
    Model bad = m;                                                                           \
    bad.name.push_back(0);                                                                   \
    std::string error = validate_error(bad);                                                 \
    EXPECT_NE(error.find("Model." #name ":"), std::string::npos) << #name << ": " << error;  \
    EXPECT_NE(error.find("expected " + std::to_string(size_t(m.count) * (width))),           \
              std::string::npos)                                                             \
        << error;                                                                            \
  }
  PHX_MODEL_ARRAYS(PHX_CHECK_FIELD)
#undef PHX_CHECK_FIELD
}

TEST(ModelFields, ViewCarriesEveryArray) {
  const Model m = humanoid();
  test::HostModel<double> hm(m);
  const ModelView<double>& v = hm.view;
#define PHX_CHECK_VIEW(kind, name, count, width, comment)                       \
  {                                                                             \
    const size_t n = size_t(m.count) * (width);                                 \
    ASSERT_EQ(m.name.size(), n) << #name;                                       \
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(double(v.name[i]), double(m.name[i])) << #name; \
  }
  PHX_MODEL_ARRAYS(PHX_CHECK_VIEW)
#undef PHX_CHECK_VIEW
  EXPECT_EQ(v.timestep, m.opt.timestep);
  EXPECT_EQ(v.lcp_iterations, m.opt.lcp_iterations);
  EXPECT_EQ(v.contact, int(m.opt.contact));
  EXPECT_EQ(v.nexclude, m.nexclude);
  // the real arrays counted for the lane broadcast: the humanoid's by hand
  long reals = 2L * m.nq + 18L * m.nbody + 9L * m.njnt + 3L * m.nv + 15L * m.ngeom + 32L * m.nu;
  EXPECT_EQ(model_reals(v), reals);
}

TEST(ModelFields, ParametersAgreeWithTheirArrays) {
  const Model m = humanoid();
  test::HostModel<double> hm(m);
  ModelView<double> v = hm.view;
  const char* expected[] = {"body_mass",           "body_inertia",     "dof_damping",
                            "dof_armature",        "jnt_stiffness",    "actuator_gear",
                            "body_ipos",           "body_pos",         "actuator_gainprm",
                            "actuator_biasprm",    "tendon_stiffness", "tendon_damping",
                            "tendon_lengthspring", "mocap_pos",        "mocap_quat",
                            "geom_friction",       "geom_restitution", "geom_size"};
  ASSERT_EQ(int(kNumParams), 18);
  for (int k = 0; k < kNumParams; ++k) {
    EXPECT_STREQ(kParamNames[k], expected[k]);
    EXPECT_EQ(m.param_field(k).size(), m.param_size(k)) << kParamNames[k];
    EXPECT_EQ(long(m.param_size(k)), param_size(v, k)) << kParamNames[k];
    if (m.param_size(k) > 0) {  // the humanoid has no tendons and no mocap bodies
      EXPECT_EQ(param_field(v, k)[0], m.param_field(k)[0]) << kParamNames[k];
    }
    EXPECT_EQ(Model::param_index(kParamNames[k]), k);
  }
  EXPECT_EQ(param_width(kParamBodyInertia), 3);
  EXPECT_EQ(param_count(m, kParamJntStiffness), m.njnt);
  // the adjoint struct of each parameter is its own array
  ModelAdjoint<double> am;
  ContactModelAdjoint<double> ac;
  std::vector<double> storage(kNumParams);
  for (int k = 0; k < kNumParams; ++k) param_adjoint(am, ac, k) = &storage[k];
  EXPECT_EQ(am.body_mass, &storage[kParamBodyMass]);
  EXPECT_EQ(am.body_ipos, &storage[kParamBodyIpos]);
  EXPECT_EQ(ac.geom_friction, &storage[kParamGeomFriction]);
  EXPECT_EQ(ac.geom_size, &storage[kParamGeomSize]);
}

// Carve W over storage of carved_size and mark every entry each of its arrays covers: the
// arrays must be disjoint and cover the storage exactly. `arrays` lists (pointer, length) of
// the carved workspace.
template <class T>
void expect_tiles(const std::vector<std::pair<const T*, long>>& arrays, const T* base,
                  long size, const char* what) {
  std::vector<int> hits(size, 0);
  for (const auto& [p, n] : arrays) {
    ASSERT_TRUE(n == 0 || (p >= base && p + n <= base + size)) << what;
    for (long i = 0; i < n; ++i) ++hits[p - base + i];
  }
  for (long i = 0; i < size; ++i) ASSERT_EQ(hits[i], 1) << what << " entry " << i;
}

TEST(ModelFields, CarveTilesItsMeasuredStorage) {
  Model m = humanoid();
  m.nconmax = 7;  // counts unlike each other, so that a wrong count shows
  test::HostModel<double> hm(m);
  const ModelView<double>& v = hm.view;
  ASSERT_GT(v.nefcmax, 0);

  {
    ScratchSize n = carved_size<Workspace<double>, double>(v);
    std::vector<double> r(n.reals);
    Arena<double> arena(r.data(), nullptr);
    Workspace<double> w = Workspace<double>::carve(v, arena);
    std::vector<std::pair<const double*, long>> arrays;
#define PHX_LIST(kind, name, size, comment) arrays.push_back({w.name, long(size)});
    const ModelView<double>& m = v;
    PHX_WORKSPACE_ARRAYS(PHX_LIST)
    expect_tiles(arrays, r.data(), n.reals, "Workspace");
    EXPECT_EQ(n.ints, 0);
  }
  {
    ScratchSize n = carved_size<ConstraintWorkspace<double>, double>(v);
    std::vector<double> r(n.reals);
    std::vector<int> q(n.ints);
    Arena<double> arena(r.data(), q.data());
    ConstraintWorkspace<double> w = ConstraintWorkspace<double>::carve(v, arena);
    std::vector<std::pair<const double*, long>> reals;
    std::vector<std::pair<const int*, long>> ints;
#define PHX_LIST2(kind, name, size, comment)                                              \
  if constexpr (std::is_same_v<kind, int>) ints.push_back({(const int*)w.name, long(size)}); \
  else reals.push_back({(const double*)w.name, long(size)});
    using real = double;
    const ModelView<double>& m = v;
    PHX_CONSTRAINT_WORKSPACE_KEPT(PHX_LIST2)
    PHX_CONSTRAINT_WORKSPACE_SCRATCH(PHX_LIST2)
    expect_tiles(reals, r.data(), n.reals, "ConstraintWorkspace reals");
    expect_tiles(ints, q.data(), n.ints, "ConstraintWorkspace ints");
  }
  {
    ScratchSize n = carved_size<ContactView<double>, double>(v);
    std::vector<double> r(n.reals);
    std::vector<int> q(n.ints);
    Arena<double> arena(r.data(), q.data());
    ContactView<double> w = ContactView<double>::carve(v, arena);
    std::vector<std::pair<const double*, long>> reals;
    std::vector<std::pair<const int*, long>> ints;
    using real = double;
    const ModelView<double>& m = v;
    PHX_CONTACT_ARRAYS(PHX_LIST2)
    expect_tiles(reals, r.data(), n.reals, "ContactView reals");
    expect_tiles(ints, q.data(), n.ints, "ContactView ints");
  }
  {
    // the adjoint constraint workspace: its tables plus adj_A's four rows
    ScratchSize n = carved_size<AdjConstraintWorkspace<double>, double>(v);
    std::vector<double> r(n.reals);
    std::vector<int> q(n.ints);
    Arena<double> arena(r.data(), q.data());
    AdjConstraintWorkspace<double> w = AdjConstraintWorkspace<double>::carve(v, arena);
    std::vector<std::pair<const double*, long>> reals;
    std::vector<std::pair<const int*, long>> ints;
    using real = double;
    const ModelView<double>& m = v;
    PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(PHX_LIST2)
    PHX_ADJ_CONSTRAINT_WORKSPACE_ROWS(PHX_LIST2)
    for (const double* p : {w.adj_A.y, w.adj_A.alpha, w.adj_A.z, w.adj_A.beta})
      reals.push_back({p, long(v.nefcmax)});
    expect_tiles(reals, r.data(), n.reals, "AdjConstraintWorkspace reals");
    expect_tiles(ints, q.data(), n.ints, "AdjConstraintWorkspace ints");
  }
#undef PHX_LIST
#undef PHX_LIST2
  // a composite: the step adjoint's scratch is its parts back to back
  ScratchSize adjoint = adjoint_scratch_size(v);
  ScratchSize parts[] = {carved_size<Workspace<double>, double>(v),
                         carved_size<ConstraintWorkspace<double>, double>(v),
                         carved_size<AdjWorkspace<double>, double>(v),
                         carved_size<AdjConstraintWorkspace<double>, double>(v)};
  long reals = 0, ints = 0;
  for (const ScratchSize& s : parts) reals += s.reals, ints += s.ints;
  EXPECT_EQ(adjoint.reals, reals);
  EXPECT_EQ(adjoint.ints, ints);
}

// A split scratch (as the CUDA backend hands a thread: its fixed reals a block of their own,
// in local memory) puts the arrays sized by the model's counts alone (the workspace, its
// adjoint, the constraint workspace's geom frames, factor and vectors, the reverse stages'
// vectors and adj_M) in the fixed block,
// tiling it, and everything sized by the capacities in the other, which it fills to
// ScratchSize::reals - fixed; an unsplit one keeps the same arrays back to back as before.
TEST(ModelFields, SplitScratchPutsTheModelSizedWorkspacesApart) {
  Model model = humanoid();
  model.nconmax = 7;
  test::HostModel<double> hm(model);
  const ModelView<double>& v = hm.view;
  ASSERT_GT(v.nefcmax, 0);
  const ScratchSize n = adjoint_scratch_size(v);
  const ModelView<double>& m = v;
  using real = double;
  long constraint_fixed = 0;
#define PHX_COUNT(kind, name, size, comment) constraint_fixed += long(size);
  PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_COUNT)
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(PHX_COUNT)
  EXPECT_EQ(constraint_fixed, 12L * v.ngeom + long(v.nv) * (v.nv + 4));
  PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(PHX_COUNT)
#undef PHX_COUNT
  // the reverse stages': 2 of nq, 15 of nv, adj_M (nv x nv) and the two scores
  EXPECT_EQ(constraint_fixed - 12L * v.ngeom - long(v.nv) * (v.nv + 4),
            2L * v.nq + long(v.nv) * (v.nv + 15) + 2);
  EXPECT_EQ(n.fixed, Workspace<double>::size(v) + AdjWorkspace<double>::size(v) + constraint_fixed);
  std::vector<double> fixed(n.fixed), reals(n.reals - n.fixed);
  std::vector<int> ints(n.ints);
  Arena<double> arena(Scratch<double>{reals.data(), ints.data(), fixed.data()});
  AdjointScratch<double> x = AdjointScratch<double>::carve(v, arena);
  EXPECT_EQ(arena.used().reals, n.reals - n.fixed);
  EXPECT_EQ(arena.used().fixed, n.fixed);
  EXPECT_EQ(arena.used().ints, n.ints);
  std::vector<std::pair<const double*, long>> in_fixed, elsewhere;
#define PHX_LIST_W(kind, name, size, comment) in_fixed.push_back({x.w.name, long(size)});
#define PHX_LIST_A(kind, name, size, comment) in_fixed.push_back({x.a.name, long(size)});
#define PHX_LIST_CF(kind, name, size, comment) in_fixed.push_back({x.c.name, long(size)});
#define PHX_LIST_SF(kind, name, size, comment) in_fixed.push_back({x.s.name, long(size)});
#define PHX_LIST_S(kind, name, size, comment) \
  if constexpr (!std::is_same_v<kind, int>)   \
    elsewhere.push_back({(const double*)x.s.name, long(size)});
#define PHX_LIST_C(kind, name, size, comment) \
  if constexpr (!std::is_same_v<kind, int>)   \
    elsewhere.push_back({(const double*)x.c.name, long(size)});
  PHX_WORKSPACE_ARRAYS(PHX_LIST_W)
  PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_LIST_CF)
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(PHX_LIST_CF)
  PHX_ADJ_WORKSPACE_ZEROED(PHX_LIST_A)
  PHX_ADJ_WORKSPACE_VECTORS(PHX_LIST_A)
  PHX_ADJ_CONSTRAINT_WORKSPACE_FIXED(PHX_LIST_SF)
  PHX_ADJ_CONSTRAINT_WORKSPACE_ROWS(PHX_LIST_S)
  PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_LIST_C)
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(PHX_LIST_C)
#undef PHX_LIST_W
#undef PHX_LIST_A
#undef PHX_LIST_CF
#undef PHX_LIST_C
#undef PHX_LIST_SF
#undef PHX_LIST_S
  expect_tiles(in_fixed, fixed.data(), n.fixed, "fixed block");
  for (const auto& [p, len] : elsewhere)
    ASSERT_TRUE(p >= reals.data() && p + len <= reals.data() + reals.size());
  // unsplit, the workspace starts the block and the constraint workspace follows it
  std::vector<double> all(n.reals);
  Arena<double> one(all.data(), ints.data());
  AdjointScratch<double> y = AdjointScratch<double>::carve(v, one);
  EXPECT_EQ(one.used().reals, n.reals);
  EXPECT_EQ(y.w.xpos, all.data());
  EXPECT_EQ(y.c.geom_xpos, all.data() + Workspace<double>::size(v));
}

// A rollout's split scratch (ForwardScratch, rollout_scratch_size) holds, besides a step's fixed
// reals, the state and the contacts it steps in its fixed blocks: the contacts' reals and
// integers tile what follows the state in the fixed reals and the whole of the fixed integers.
// A model whose contacts take more than kHeldContactsMax bytes holds only the state, and so do
// the other forward kernels (scratch_size) whatever their size.
TEST(ModelFields, ForwardScratchHoldsTheStateAndContactsApart) {
  Model model = humanoid();
  model.nconmax = 7;
  for (bool held : {true, false}) {
    SCOPED_TRACE(held);
    if (!held) model.nconmax = 200;  // 26 KB of contacts' reals in double
    test::HostModel<double> hm(model);
    const ModelView<double>& v = hm.view;
    ASSERT_GT(v.nefcmax, 0);
    const ScratchSize n = rollout_scratch_size(v);
    const ScratchSize step = carved_size<StepScratch<double>, double>(v);
    const ScratchSize con = carved_size<ContactView<double>, double>(v);
    EXPECT_EQ(con.reals, 13L * v.nconmax + v.nefcmax);
    EXPECT_EQ(con.ints, 7 + 2L * v.nconmax + 2L * v.nefcmax);
    const long state = v.nq + v.nv + v.na;
    const ScratchSize other = scratch_size(v);
    EXPECT_EQ(other.fixed, step.fixed + state);
    EXPECT_EQ(other.reals, step.reals + state);
    EXPECT_EQ(other.ints, step.ints);
    EXPECT_EQ(other.ifixed, 0);
    EXPECT_EQ(n.fixed, step.fixed + state + (held ? con.reals : 0));
    EXPECT_EQ(n.ifixed, held ? con.ints : 0);
    EXPECT_EQ(n.reals, step.reals + state + (held ? con.reals : 0));
    EXPECT_EQ(n.ints, step.ints + (held ? con.ints : 0));
    std::vector<double> reals(n.reals - n.fixed), fixed(n.fixed);
    std::vector<int> ints(n.ints - n.ifixed), ifixed(n.ifixed);
    Arena<double> arena(
        Scratch<double>{reals.data(), ints.data(), fixed.data(), nullptr, nullptr, ifixed.data()});
    const ForwardScratch<double> x = ForwardScratch<double>::carve(v, arena, true);
    EXPECT_EQ(arena.used().fixed, n.fixed);
    EXPECT_EQ(arena.used().ifixed, n.ifixed);
    EXPECT_EQ(x.qpos, fixed.data() + step.fixed);
    EXPECT_EQ(x.qvel, x.qpos + v.nq);
    if (!held) {
      EXPECT_EQ(x.contact_reals, nullptr);
      EXPECT_EQ(x.contact_ints, nullptr);
      continue;
    }
    std::vector<std::pair<const double*, long>> in_fixed{{x.qpos, v.nq}, {x.qvel, v.nv}};
    std::vector<std::pair<const int*, long>> in_ifixed;
    const ModelView<double>& m = v;
    const ContactView<double> held = x.contacts(v);
#define PHX_LIST(kind, name, size, comment)                   \
  if constexpr (std::is_same_v<kind, int>)                    \
    in_ifixed.push_back({(const int*)held.name, long(size)}); \
  else                                                        \
    in_fixed.push_back({(const double*)held.name, long(size)});
    using real = double;
    PHX_CONTACT_ARRAYS(PHX_LIST)
#undef PHX_LIST
    expect_tiles(in_fixed, x.qpos, n.fixed - step.fixed, "held state and contacts' reals");
    expect_tiles(in_ifixed, ifixed.data(), n.ifixed, "held contacts' integers");
  }
}

// The strided arrays of an Interleaved scratch (the CUDA backend's layout for the kernels that
// step forward: the rows J and Y and their spans, the LCP's A, b, bounds and friction links,
// PGS's scratch, the previous step's rows) lie every kStride entries from their environment's
// lane in its tile, the reals' and the integers': the lanes of a tile fill both tiles, each
// entry once, and the rest of the scratch is carved as a split scratch's, without them.
TEST(ModelFields, InterleavedRowsFillTheirTile) {
  Model model = humanoid();
  model.nconmax = 7;
  test::HostModel<double> hm(model);
  const ModelView<double>& v = hm.view;
  constexpr int W = Interleaved::kStride;
  const ScratchSize n = rollout_scratch_size(v);
  const ScratchSize lcp = lcp_storage(v.nefcmax);
  // J, Y, the LCP's A, b, bounds, PGS's scratch and the previous rows; the LCP solver's own
  ASSERT_EQ(n.rows, long(v.nefcmax) * (2 * v.nv + v.nefcmax + 9) + lcp.reals);
  ASSERT_EQ(n.irows, 7L * v.nefcmax + lcp.ints);  // findex, key_prev, class_prev, span; ilcp
  std::vector<double> tile(W * n.rows), reals(n.reals - n.rows);
  std::vector<int> itile(W * n.irows), ints(n.ints - n.irows);
  std::vector<int> hits(tile.size(), 0), ihits(itile.size(), 0);
  for (int lane = 0; lane < W; ++lane) {
    Arena<double, Interleaved> arena(Scratch<double, Interleaved>{
        reals.data(), ints.data(), nullptr, tile.data() + lane, itile.data() + lane});
    const ForwardScratch<double, Interleaved> x =
        ForwardScratch<double, Interleaved>::carve(v, arena, true);
    EXPECT_EQ(arena.used().rows, n.rows);
    EXPECT_EQ(arena.used().irows, n.irows);
    EXPECT_EQ(arena.used().reals, n.reals - n.rows);
    EXPECT_EQ(arena.used().ints, n.ints - n.irows);
    const ModelView<double>& m = v;
    long at = 0, iat = 0;  // the array's first entry among the environment's reals, integers
    // counts the entries of array p (size of them) in the tile of its kind, where it must
    // start at the entry after the arrays before it
    auto count = [&](auto p, long size, auto& block, std::vector<int>& counts, long& first,
                     const char* name) {
      ASSERT_EQ(&p[0], block.data() + lane + first * W) << name;
      for (long i = 0; i < size; ++i) ++counts[&p[i] - block.data()];
      first += size;
    };
    auto hit = [&](auto p, long size, const char* name) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(p[0])>, int>)
        count(p, size, itile, ihits, iat, name);
      else
        count(p, size, tile, hits, at, name);
    };
#define PHX_HITS(kind, name, size, comment) hit(x.c.name, long(size), #name);
    PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_HITS)
    PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(PHX_HITS)
#undef PHX_HITS
    EXPECT_EQ(at, n.rows);
    EXPECT_EQ(iat, n.irows);
    // a row pointer offsets and subtracts in entries, as a pointer does
    ASSERT_EQ(&(x.c.J + v.nv)[2], &x.c.J[v.nv + 2]);
    ASSERT_EQ((x.c.Y + 5) - x.c.Y, 5);
    // the other arrays are where a Contiguous carve over the same blocks puts them
    Arena<double> plain(
        Scratch<double>{reals.data(), ints.data(), nullptr, tile.data(), itile.data()});
    const ForwardScratch<double> y = ForwardScratch<double>::carve(v, plain, true);
    ASSERT_EQ(x.w.qacc, y.w.qacc);
    // the held state and contacts last, after the step's workspaces
    ASSERT_EQ(x.qvel, y.qvel);
    ASSERT_EQ(x.qvel + v.nv + v.na, x.contact_reals);
    ASSERT_EQ(x.contacts(v).efc_force + v.nefcmax, reals.data() + reals.size());
    ASSERT_EQ(y.c.Y, tile.data() + long(v.nefcmax) * v.nv);
  }
  long once = 0, ionce = 0;
  for (int h : hits) once += h == 1;
  for (int h : ihits) ionce += h == 1;
  EXPECT_EQ(once, long(tile.size()));
  EXPECT_EQ(ionce, long(itile.size()));
}

// The scratch of size n of three environments in lanes 0, 1 and 31 of one tile of Interleaved
// rows: their rows in the shared tiles, the rest in blocks of their own
struct TileLanes {
  static constexpr int W = Interleaved::kStride;
  static constexpr int lane[3] = {0, 1, W - 1};
  std::vector<double> tile;
  std::vector<int> itile;
  std::vector<std::vector<double>> reals;
  std::vector<std::vector<int>> ints;

  explicit TileLanes(const ScratchSize& n)
      : tile(W * n.rows),
        itile(W * n.irows),
        reals(3, std::vector<double>(n.reals - n.rows)),
        ints(3, std::vector<int>(n.ints - n.irows)) {}
  Scratch<double, Interleaved> scratch(int k) {
    return {reals[k].data(), ints[k].data(), nullptr, tile.data() + lane[k],
            itile.data() + lane[k]};
  }
};

// Steps over Interleaved scratch give the bits of steps over Contiguous scratch: the humanoid
// falling onto the floor (contacts, joint limits, the LCP) in three lanes of one tile, so that
// every stage that builds or reads the rows J and Y indexes them through their Strided pointers.
void expect_interleaved_steps_as_contiguous(const Model& model) {
  test::HostModel<double> hm(model);
  const ModelView<double>& v = hm.view;
  TileLanes tiles(scratch_size(v));
  const auto& lanes = TileLanes::lane;
  test::Carved<StepScratch<double>, double> plain(v);
  std::vector<test::Carved<ContactView<double>, double>> cv_plain, cv_tiled;
  std::vector<std::vector<double>> q(6, model.qpos0), qv(6, std::vector<double>(v.nv));
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int k = 0; k < 3; ++k) {
    cv_plain.emplace_back(v);
    cv_tiled.emplace_back(v);
    for (double& x : qv[k]) x = u(rng);
    qv[3 + k] = qv[k];
  }
  std::vector<double> ctrl(v.nu);
  int most = 0;
  for (int t = 0; t < 150; ++t) {
    for (double& c : ctrl) c = u(rng);
    for (int k = 0; k < 3; ++k) {
      StepScratch<double, Interleaved> x = step_scratch(v, tiles.scratch(k));
      ContactView<double> a = cv_plain[k].w, b = cv_tiled[k].w;
      double* act = nullptr;  // the humanoid has no activation state
      const unsigned bits_plain =
          step_env(v, q[k].data(), qv[k].data(), act, ctrl.data(), plain.w, a);
      const unsigned bits_tiled =
          step_env(v, q[3 + k].data(), qv[3 + k].data(), act, ctrl.data(), x, b);
      ASSERT_EQ(bits_plain, bits_tiled) << "lane " << lanes[k] << " step " << t;
      for (int i = 0; i < v.nq; ++i) ASSERT_EQ(q[k][i], q[3 + k][i]) << "step " << t;
      for (int i = 0; i < v.nv; ++i) ASSERT_EQ(qv[k][i], qv[3 + k][i]) << "step " << t;
      most = std::max(most, *a.nefc);
    }
  }
  EXPECT_GE(most, 12);  // the fall reached the floor: contacts' rows in the LCP
}

// with PGS, and with Dantzig pivoting and the stabilisation, whose storage is laid out as the
// rows too
TEST(ModelFields, InterleavedRowsStepAsContiguousOnes) {
  for (int solver : {kLcpPgs, kLcpDantzig}) {
    SCOPED_TRACE(solver);
    Model model = humanoid();
    model.opt.lcp_solver = solver;
    expect_interleaved_steps_as_contiguous(model);
  }
}

// The vector-Jacobian product of a step over a scratch whose constraint rows are interleaved
// (the CUDA backend's layout for StepAdjointKernel) gives the same bits as over one contiguous
// block: lanes 0, 1 and 31 of a tile, from states of the humanoid's fall with contacts, with
// the contact parameters' adjoints. Counts into *bounced the states whose restitutions received
// a gradient; at least min_checked of the 36 states must give the contact parameters one.
void expect_interleaved_reverse_as_contiguous(const Model& model, int min_checked, int* bounced) {
  test::HostModel<double> hm(model);
  const ModelView<double>& v = hm.view;
  const ScratchSize n = adjoint_scratch_size(v);
  // the rows of the step it replays, and its own: adj_J, ten more reals and two integers per
  // row (the adjoints of f, b and mu, the bounces, dl/dv, f's copy, adj_A's four factors; the
  // two classifications), and the contacts' adjoints (13 per contact)
  ASSERT_EQ(n.rows, scratch_size(v).rows + long(v.nefcmax) * (v.nv + 10) + 13L * v.nconmax);
  ASSERT_EQ(n.irows, scratch_size(v).irows + 2L * v.nefcmax);
  TileLanes tiles(n);
  const auto& lanes = TileLanes::lane;
  test::Carved<StepScratch<double>, double> fwd(v);
  test::Carved<AdjointScratch<double>, double> plain(v);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> ctrl(v.nu), gq_next(v.nq), gv_next(v.nv);
  double* none = nullptr;  // the humanoid has no activation state
  int checked = 0;
  for (int k = 0; k < 3; ++k) {
    test::Carved<ContactView<double>, double> cv(v);
    std::vector<double> q(model.qpos0), qv(v.nv);
    for (double& x : qv) x = u(rng);
    for (int t = 0; t < 120; ++t) {
      for (double& c : ctrl) c = u(rng);
      if (t % 10 == 9) {
        for (double& x : gq_next) x = u(rng);
        for (double& x : gv_next) x = u(rng);
        // gradients of the step from (q, qv), warm-started from cv, over each layout
        struct Grads {
          std::vector<double> q, v, c, friction, restitution, size;
        } g[2];
        for (int layout = 0; layout < 2; ++layout) {
          Grads& gi = g[layout];
          gi = {std::vector<double>(v.nq),    std::vector<double>(v.nv),
                std::vector<double>(v.nu),    std::vector<double>(3 * v.ngeom),
                std::vector<double>(v.ngeom), std::vector<double>(3 * v.ngeom)};
          ContactModelAdjoint<double> ac;
          ac.geom_friction = gi.friction.data();
          ac.geom_restitution = gi.restitution.data();
          ac.geom_size = gi.size.data();
          test::Carved<ContactView<double>, double> warm = cv;
          Arena<double> copy(warm.reals.data(), warm.ints.data());
          warm.w = ContactView<double>::carve(v, copy);
          const ModelAdjoint<double> am;
          const StepEnvAdjoint<double> args{
              q.data(),       qv.data(), none,        ctrl.data(), gq_next.data(),
              gv_next.data(), none,      gi.q.data(), gi.v.data(), none,
              gi.c.data(),    &am,       &ac};
          unsigned bits;
          if (layout == 0) {
            bits = adj_step_env(v, plain.w, warm.w, args);
          } else {
            Arena<double, Interleaved> arena(tiles.scratch(k));
            auto x = AdjointScratch<double, Interleaved>::carve(v, arena);
            bits = adj_step_env(v, x, warm.w, args);
          }
          ASSERT_EQ(bits & kStatusStopMask, 0u) << "step " << t;
        }
        EXPECT_EQ(g[0].q, g[1].q) << "lane " << lanes[k] << " step " << t;
        EXPECT_EQ(g[0].v, g[1].v) << "lane " << lanes[k] << " step " << t;
        EXPECT_EQ(g[0].c, g[1].c) << "lane " << lanes[k] << " step " << t;
        EXPECT_EQ(g[0].friction, g[1].friction) << "lane " << lanes[k] << " step " << t;
        EXPECT_EQ(g[0].restitution, g[1].restitution) << "lane " << lanes[k] << " step " << t;
        EXPECT_EQ(g[0].size, g[1].size) << "lane " << lanes[k] << " step " << t;
        // the contacts' parameters received gradients through the rows
        double sum = 0;
        for (const auto* a : {&g[0].friction, &g[0].restitution, &g[0].size})
          for (double x : *a) sum += std::abs(x);
        checked += sum > 0;
        for (double x : g[0].restitution) *bounced += x != 0;
      }
      const unsigned bits = step_env(v, q.data(), qv.data(), none, ctrl.data(), fwd.w, cv.w);
      ASSERT_EQ(bits & kStatusStopMask, 0u);
    }
  }
  EXPECT_GE(checked, min_checked);  // of the 36 states, those whose step had rows in the LCP
}

// as the step's vjp runs by default; and after Dantzig pivoting with the complementarity-aware
// classification and the bounce correction (restitution 0.5), whose factorisations and
// systems are laid out as the rows too
TEST(ModelFields, InterleavedRowsReverseAsContiguousOnes) {
  int bounced = 0;
  expect_interleaved_reverse_as_contiguous(humanoid(), 12, &bounced);
  Model model = humanoid();
  model.opt.lcp_solver = kLcpDantzig;
  model.opt.contact_gradient = kGradComplementarityAware | kGradBounceCorrection;
  for (double& e : model.geom_restitution) e = 0.5;
  bounced = 0;
  // at restitution 0.5 fewer of the fall's 36 states have rows in the LCP than without
  expect_interleaved_reverse_as_contiguous(model, 8, &bounced);
  EXPECT_GT(bounced, 0);
}

// A tape's step slot has room for the contacts and rows it was sized for: a step within it is
// kept and reads back as saved, a larger one is refused (holds() false).
TEST(ModelFields, StepSlotKeepsWhatFitsItsRoom) {
  Model m = humanoid();
  test::HostModel<double> hm(m);
  const ModelView<double>& v = hm.view;
  const int ncon = 3, nrow = 9;
  ScratchSize slot = StepStore<double>::slot_size(v, ncon, nrow);
  std::vector<double> r(2 * slot.reals);
  // each slot's integers after its head
  const long ints = StepStore<double>::kHead + slot.ints;
  std::vector<int> q(2 * ints);
  Arena<double> arena(r.data(), q.data());
  const StepStore<double> store = StepStore<double>::carve(v, arena, 2, ncon, nrow);
  ASSERT_EQ(arena.used().reals, 2 * slot.reals);
  ASSERT_EQ(arena.used().ints, 2 * ints);
  test::Carved<StepScratch<double>, double> x(v);
  test::Carved<ContactView<double>, double> cv(v);
  std::vector<double> qpos(m.qpos0), qvel(v.nv, 0.25);
  for (size_t i = 0; i < x.reals.size(); ++i) x.reals[i] = double(i % 97);
  for (size_t i = 0; i < cv.reals.size(); ++i) cv.reals[i] = -double(i % 89);
  for (size_t i = 0; i < cv.ints.size(); ++i) cv.ints[i] = int(i % 5);
  *cv.w.ncon = ncon;
  *cv.w.nefc = nrow;
  store.save(v, 0, x.w.w, x.w.c, cv.w, qpos.data(), qvel.data());
  ASSERT_TRUE(store.holds(v, 0));
  StepStore<double>::Slot s = store.slot(v, 0);
  for (int i = 0; i < v.nq; ++i) EXPECT_EQ(s.qpos_next[i], qpos[i]);
  for (long i = 0; i < long(nrow) * v.nv; ++i) EXPECT_EQ(s.c.J[i], x.w.c.J[i]);
  for (long i = 0; i < long(nrow) * nrow; ++i) EXPECT_EQ(s.c.A[i], x.w.c.A[i]);
  for (long i = 0; i < 9L * ncon; ++i) EXPECT_EQ(s.cv.frame[i], cv.w.frame[i]);
  for (int i = 0; i < nrow; ++i) EXPECT_EQ(s.cv.efc_key[i], cv.w.efc_key[i]);
  EXPECT_EQ(*s.cv.ncon, ncon);
  EXPECT_EQ(s.w.crb[7], x.w.w.crb[7]);
  *cv.w.nefc = nrow + 1;
  store.save(v, 1, x.w.w, x.w.c, cv.w, qpos.data(), qvel.data());
  EXPECT_FALSE(store.holds(v, 1));
  EXPECT_TRUE(store.holds(v, 0));
}

}  // namespace
}  // namespace phx
