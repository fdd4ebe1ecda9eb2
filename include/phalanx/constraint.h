// Contacts, limits, friction loss and equality constraints as rows of a velocity-level boxed LCP
// (Werling et al. 2021):
//   v = A f + b,  A = J M^-1 J^T,  b = J v_free + corrections,
// with f the constraint impulses, v the constrained velocities after the step, and M the
// joint-space inertia with armature and implicit damping (M + diag(armature + dt damping)), so
// that the contact step and the contact-free step integrate the same dynamics.
//
// Rows, in this order: for each contact its normal and, when either geom has condim > 1, two
// friction rows along the tangents of contact_frame(normal) bounded by +-mu f_normal (a
// four-sided friction pyramid; torsional and rolling friction of condim 4 and 6 are not
// modelled); then one row per active joint limit (a hinge's or slide's coordinate, a ball's
// rotation angle: ball_limit_row), one per dof with friction loss, one per active tendon limit, one
// per tendon with friction loss, and the bilateral rows of the active equality constraints
// (equality.h).
//
// Corrections in b: restitution e (the larger of the two geoms') asks an approaching contact
// to leave with at least e times its approach speed (Newton's law, v+ >= -e v-); penetration
// beyond `slop` is removed at the rate erp / dt (Baumgarte stabilisation). A contact takes the
// stronger of the two, not their sum, so that the push-out of the penetration a fast impact
// leaves behind does not add energy to the bounce.
#pragma once

#include "phalanx/collision/narrowphase.h"
#include "phalanx/equality.h"
#include "phalanx/lcp.h"
#include "phalanx/math/dense.h"

namespace phx {

// One environment's contacts and constraint rows, kept in Data between steps (warm start)
// and readable by the host: X(kind, name, size, comment) as the workspace tables (workspace.h),
// sizes from the model's nconmax and nefcmax. Data (host/api.h) holds them for every
// environment; a replay carves its own (ContactView::carve), a tape's step slot too, at the
// counts it needs.
#define PHX_CONTACT_ARRAYS(X)                                                                    \
  X(int, ncon, 1, "number of contacts (1)")                                                      \
  X(int, overflow, 1, "contacts found beyond nconmax in the last step (1)")                      \
  X(int, ccd_iterations, 2, "GJK and EPA iterations of the last step's narrowphase (2)")         \
  X(real, pos, 3L * m.nconmax, "contact point in world (nconmax x 3)")                           \
  X(real, frame, 9L * m.nconmax, "normal (geom1 -> geom2), tangent 1, tangent 2 (nconmax x 9)") \
  X(real, dist, m.nconmax, "signed distance, negative when penetrating (nconmax)")               \
  X(int, geom, 2L * m.nconmax, "the two geoms, lower geom type first as in MuJoCo (nconmax x 2)") \
  X(int, nefc, 1, "number of constraint rows (1)")                                               \
  X(int, nwarm, 1, "rows warm-started from the previous step's impulse (1)")                     \
  X(int, set_hit, 1, "1 when the previous clamping set solved this step's LCP (1)")              \
  X(int, efc_class, m.nefcmax, "LcpClass of each row, stabilised solvers (nefcmax)")             \
  X(real, efc_force, m.nefcmax, "impulse of each row, N s or N m s (nefcmax)")                   \
  X(int, efc_key, m.nefcmax, "identity of a row across steps, for warm starting (nefcmax)")

template <class T>
struct ContactView {
  using real = T;
  PHX_CONTACT_ARRAYS(PHX_WORKSPACE_MEMBER)

  // (from any arena: contacts are in the environment's own block in every Layout)
  template <class M, class Layout>
  PHX_HD static ContactView carve(const M& m, Arena<T, Layout>& arena) {
    ContactView w;
    PHX_CONTACT_ARRAYS(PHX_WORKSPACE_TAKE)
    return w;
  }
  // The contacts and rows another view of the same model holds into these: its counts and
  // the entries of its first *ncon contacts and *nefc rows (those past them are not read).
  template <class M>
  PHX_HD void copy_held(const M& model, const ContactView& from) const {
    struct {
      long nconmax, nefcmax;
    } m{*from.ncon < 0               ? 0
        : *from.ncon > model.nconmax ? model.nconmax
                                     : *from.ncon,
        *from.nefc < 0               ? 0
        : *from.nefc > model.nefcmax ? model.nefcmax
                                     : *from.nefc};
#define PHX_CONTACT_COPY(kind, name, size, comment) \
  for (long i = 0; i < long(size); ++i) name[i] = from.name[i];
    PHX_CONTACT_ARRAYS(PHX_CONTACT_COPY)
#undef PHX_CONTACT_COPY
  }
  // The contacts a detection into `from` found (detect_contacts: their count, overflow and
  // narrowphase iterations, and of each its point, frame, distance, geoms and key), as the
  // step's own detection would leave them before it builds its rows
  PHX_HD void copy_detected(const ContactView& from) const {
    const int n = *from.ncon;
    *ncon = n;
    *overflow = *from.overflow;
    for (int k = 0; k < 2; ++k) ccd_iterations[k] = from.ccd_iterations[k];
    for (long i = 0; i < 3L * n; ++i) pos[i] = from.pos[i];
    for (long i = 0; i < 9L * n; ++i) frame[i] = from.frame[i];
    for (long i = 0; i < n; ++i) dist[i] = from.dist[i];
    for (long i = 0; i < 2L * n; ++i) geom[i] = from.geom[i];
    for (long i = 0; i < n; ++i) efc_key[i] = from.efc_key[i];
  }
};

// The contact arrays of all environments, env-major (each PHX_CONTACT_ARRAYS entry nenv
// times); env() gives one environment's view.
template <class T>
struct ContactData {
  using real = T;
  PHX_CONTACT_ARRAYS(PHX_WORKSPACE_MEMBER)

  PHX_HD ContactView<T> env(const ModelView<T>& m, int e) const {
    ContactView<T> v;
#define PHX_CONTACT_ENV(kind, name, size, comment) v.name = name + e * long(size);
    PHX_CONTACT_ARRAYS(PHX_CONTACT_ENV)
#undef PHX_CONTACT_ENV
    return v;
  }
  // the arrays of nenv environments, one after the other in the blocks `reals` and `ints` of
  // nenv times ContactView's carved_size
  template <class M>
  PHX_HD static ContactData carve(const M& m, long nenv, T* reals, int* ints) {
    ContactData d{};
    struct {
      T* real;
      int* integer;
      PHX_HD T*& next(T*) { return real; }
      PHX_HD int*& next(int*) { return integer; }
    } at{reals, ints};
#define PHX_CONTACT_CARVE(kind, name, size, comment) \
  d.name = at.next(d.name);                          \
  at.next(d.name) += nenv * long(size);
    PHX_CONTACT_ARRAYS(PHX_CONTACT_CARVE)
#undef PHX_CONTACT_CARVE
    return d;
  }
};

// Scratch of the constraint pipeline, carved after the Workspace. `kept` arrays are what the
// reverse pass of a step reads of it (StepStore keeps them per step, tape.h). Of each table,
// the `fixed` arrays are sized by the model's counts alone (Arena::take_fixed), the `rows`
// arrays by the capacities, all of them `strided`: the rows J and Y and their dof ranges, the
// LCP's A, b, bounds and friction links, the scratch of its sweeps, which they reread, the
// previous step's rows for the warm start, and the exact solvers' storage (Dantzig pivoting,
// the stabilisation, and the LCP adjoint's factorisation after them), laid out by the
// workspace's Layout (Arena::take_rows).
#define PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(X)                                                  \
  X(real, geom_xpos, 3L * m.ngeom, "(ngeom x 3)")                                               \
  X(real, geom_xmat, 9L * m.ngeom, "(ngeom x 9)")                                               \
  X(real, L, long(m.nv) * m.nv, "Cholesky factor of M + diag(armature + dt damping) (nv x nv)") \
  X(real, vfree, m.nv, "velocity after the step without constraints (nv)")
#define PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(X)                                            \
  X(real, J, long(m.nefcmax) * m.nv, "row Jacobians (nefcmax x nv)")                        \
  X(real, Y, long(m.nefcmax) * m.nv, "L^-1 J^T, stored by row (nefcmax x nv)")              \
  X(real, A, long(m.nefcmax) * m.nefcmax, "Delassus matrix J M^-1 J^T (nefcmax x nefcmax)") \
  X(real, b, m.nefcmax, "(nefcmax)")                                                        \
  X(real, lo, m.nefcmax, "fixed lower bounds (nefcmax)")                                    \
  X(real, hi, m.nefcmax, "fixed upper bounds (nefcmax)")                                    \
  X(real, mu, m.nefcmax, "friction coefficient of friction rows (nefcmax)")                 \
  X(int, findex, m.nefcmax, "normal row of a friction row, -1 otherwise (nefcmax)")
#define PHX_CONSTRAINT_WORKSPACE_KEPT(X) \
  PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(X) PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(X)
#define PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(X) \
  X(real, bias, m.nv, "c(q, qvel) (nv)")          \
  X(real, tmp, m.nv, "(nv)")                      \
  X(real, gs_vel, m.nv, "Y^T f of the Gauss-Seidel sweeps in velocity form (nv)")
#define PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(X)                                          \
  X(real, pgs, 4L * m.nefcmax, "projected Gauss-Seidel's scratch (4 nefcmax, pgs)")          \
  X(real, f_prev, m.nefcmax, "impulses of the previous step (nefcmax)")                      \
  X(int, key_prev, m.nefcmax, "efc_key of the previous step (nefcmax)")                      \
  X(int, class_prev, m.nefcmax, "efc_class of the previous step (nefcmax)")                  \
  X(int, span, 4L * m.nefcmax, "the two dof ranges each Y row reaches (nefcmax x 4, lcp.h)") \
  X(real, lcp, lcp_storage(m.nefcmax).reals, "LCP solver scratch (lcp_storage)")             \
  X(int, ilcp, lcp_storage(m.nefcmax).ints, "LCP solver integer scratch (lcp_storage)")
#define PHX_CONSTRAINT_WORKSPACE_SCRATCH(X) \
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(X) PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(X)

template <class T, class Layout = Contiguous>
struct ConstraintWorkspace {
  using real = T;
  PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_WORKSPACE_MEMBER)
  PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_WORKSPACE_ROWS_MEMBER)
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(PHX_WORKSPACE_MEMBER)
  PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(PHX_WORKSPACE_ROWS_MEMBER)
  // the rank of the factorisation of the rows' classification (efc_class) that lcp and ilcp
  // hold after solve_lcp (lcp_adjoint_factor's layout), -1 when they hold none
  int factored_rank = -1;
  // Set by kernels whose steps no reverse pass or Jacobian reads (step_scratch): delassus then
  // leaves A unbuilt when the LCP solver reads only its factor (PGS sweeps in velocity form).
  bool forward_only = false;
  // whether A holds the Delassus matrix of the rows (lcp_problem passes it on only then)
  bool has_matrix = true;

  template <class M>
  PHX_HD static ConstraintWorkspace carve(const M& m, Arena<T, Layout>& arena) {
    ConstraintWorkspace w;
    PHX_CONSTRAINT_WORKSPACE_KEPT_FIXED(PHX_WORKSPACE_TAKE_FIXED)
    PHX_CONSTRAINT_WORKSPACE_KEPT_STRIDED(PHX_WORKSPACE_TAKE_ROWS)
    PHX_CONSTRAINT_WORKSPACE_SCRATCH_FIXED(PHX_WORKSPACE_TAKE_FIXED)
    PHX_CONSTRAINT_WORKSPACE_SCRATCH_STRIDED(PHX_WORKSPACE_TAKE_ROWS)
    return w;
  }
};

// What the narrowphase reads of geom g besides its frame: its type, the sizes at `size` (geom_size
// or a copy of it) and, for a mesh or height-field geom, the model's hull or elevation data.
template <class T>
PHX_HD GeomShape<T> geom_shape(const ModelView<T>& m, int g, const T* size) {
  GeomShape<T> s;
  s.type = m.geom_type[g];
  s.size = size;
  int id = m.geom_dataid[g];
  if (s.type == kGeomMesh && id >= 0) {
    int v = m.mesh_vertadr[id], f = m.mesh_polyadr[id];
    s.hull.nvert = m.mesh_vertnum[id];
    s.hull.vert = m.mesh_vert + 3 * v;
    s.hull.adjadr = m.mesh_vertadjadr + v;
    s.hull.adjnum = m.mesh_vertadjnum + v;
    s.hull.adj = m.mesh_vertadj;
    s.hull.npoly = m.mesh_polynum[id];
    s.hull.polynormal = m.mesh_polynormal + 3 * f;
    s.hull.polyvertadr = m.mesh_polyvertadr + f;
    s.hull.polyvertnum = m.mesh_polyvertnum + f;
    s.hull.polyvert = m.mesh_polyvert;
  } else if (s.type == kGeomHField && id >= 0) {
    s.hfield.nrow = m.hfield_nrow[id];
    s.hfield.ncol = m.hfield_ncol[id];
    s.hfield.size = m.hfield_size + 4 * id;
    s.hfield.data = m.hfield_data + m.hfield_adr[id];
  }
  return s;
}

// the model's convex-narrowphase budget (ccd_iterations, ccd_tolerance)
template <class T>
PHX_HD PHX_INLINE CcdSettings<T> ccd_settings(const ModelView<T>& m) {
  return {m.ccd_iterations, T(m.ccd_tolerance)};
}

// world poses of the geoms from the body frames
template <class T, class Layout>
PHX_HD void geom_poses(const ModelView<T>& m, const Workspace<T>& w,
                       ConstraintWorkspace<T, Layout>& c) {
  for (int g = 0; g < m.ngeom; ++g)
    body_fixed_frame(w, m.geom_bodyid[g], m.geom_pos + 3 * g, m.geom_quat + 4 * g,
                     c.geom_xpos + 3 * g, c.geom_xmat + 9 * g);
}

// Adjoint of geom_poses for geom g: from the adjoint of its frame (adj_f: position and
// rotation) to those of its body's frame in a (xpos, xmat), accumulated (nothing for a geom of
// the world, whose frame is constant).
//   geom_xpos = xpos_b + R_b geom_pos,  geom_xmat = R_b Q_g  =>
//   adj_xpos_b += adj_gpos,  adj_R_b += adj_gpos geom_pos^T + adj_gmat Q_g^T
template <class T, class S>
PHX_HD void adj_geom_pose(const ModelView<S>& m, int g, const GeomFrame<T>& adj_f,
                          AdjWorkspace<T>& a) {
  int b = m.geom_bodyid[g];
  if (b == 0) return;
  Mat3<T> Q = to_mat(Quat<T>::load(m.geom_quat + 4 * g));
  Vec3<T> gpos = Vec3<T>::load(m.geom_pos + 3 * g);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      T s = adj_f.pos[i] * gpos[j];
      for (int k = 0; k < 3; ++k) s += adj_f.rot.m[3 * i + k] * Q.m[3 * j + k];
      a.xmat[9 * b + 3 * i + j] += s;
    }
  adj_f.pos.add_to(a.xpos + 3 * b);
}

// The row key of point i of candidate pair k (rows add 0, 1, 2), and the pair a contact row's
// key names; joint-limit rows have negative keys.
PHX_HD constexpr int contact_key(int k, int i) {
  return (k * kMaxPairContacts + i) * 3;
}
PHX_HD constexpr int key_pair(int key) {
  return key / (3 * kMaxPairContacts);
}

// The geoms of candidate pair k, the lower type first (the pair functions' order)
template <class M>
PHX_HD PHX_INLINE void pair_geoms(const M& m, int k, int& g1, int& g2) {
  g1 = m.pair_geom[2 * k];
  g2 = m.pair_geom[2 * k + 1];
  if (m.geom_type[g1] > m.geom_type[g2]) {
    const int t = g1;
    g1 = g2;
    g2 = t;
  }
}

// The broadphase's verdict on the geoms g1, g2 of a candidate pair (pair_geoms): true when they
// cannot touch within the margin, their bounding spheres being apart or g2's lying wholly above
// g1's plane (a plane, infinite, has rbound 0 and its normal along its z axis). In any scalar:
// on a pack's lanes it is a mask.
template <class M, class T, class Layout>
PHX_HD PHX_INLINE Truth<T> pair_apart(const M& m, const ConstraintWorkspace<T, Layout>& c, int g1,
                                      int g2, T margin) {
  const Vec3<T> p1 = Vec3<T>::load(c.geom_xpos + 3 * g1);
  const Vec3<T> p2 = Vec3<T>::load(c.geom_xpos + 3 * g2);
  const T r1 = m.geom_rbound[g1], r2 = m.geom_rbound[g2];
  Truth<T> apart(false);
  if (r1 > T(0) && r2 > T(0)) apart = norm(p2 - p1) > r1 + r2 + margin;
  if (m.geom_type[g1] == kGeomPlane && r2 > T(0))
    apart = apart || dot(p2 - p1, Mat3<T>::load(c.geom_xmat + 9 * g1).col(2)) > r2 + margin;
  return apart;
}

// Broadphase and narrowphase: the candidate pairs in model order, a bounding-sphere test
// (pair_apart), then the pair function with the lower geom type first. Contacts beyond nconmax,
// and a height field's prism contacts beyond the kMaxPairContacts of its pair, are counted in
// *overflow and not stored. A replay that knows the step's row keys (nkeys of them, in row
// order) passes them: only the pairs they name are tested, which yields the same contacts, since
// every stored contact has rows. margin: pairs closer than it count as contacts too (dist <=
// margin; the XPBD step's look-ahead), 0 for the LCP step. apart (npair, may be null): the
// broadphase's verdicts when the caller has them already (a pack of environments runs it on its
// lanes), nonzero for a pair to skip.
//
// A detection in stages (step.h: detect_stage) tests a PairSet of the pairs at a time: the
// convex pairs first (kConvex), whose contacts (a list as the whole detection's, of those pairs
// alone) the detection of the other pairs (kOwn) is given as `convex` and merges in pair order,
// adding its iteration counts and dropped contacts. The result is the whole detection's: the
// contacts the convex stage drops for want of room come after nconmax in the merged order too.
template <class T, class Layout, PairSet Set = PairSet::kAll>
PHX_HD void detect_contacts(const ModelView<T>& m, const ConstraintWorkspace<T, Layout>& c,
                            ContactView<T>& cv, const int* keys = nullptr, int nkeys = 0,
                            T margin = T(0), const unsigned char* apart = nullptr,
                            const ContactView<T>& convex = {}) {
  int ncon = 0, overflow = 0, next = 0;
  CcdSettings<T> ccd = ccd_settings(m);
  cv.ccd_iterations[0] = cv.ccd_iterations[1] = 0;
  ccd.counts = cv.ccd_iterations;
  int merged = 0;  // kOwn: the convex pairs' contacts merged so far
  if constexpr (Set == PairSet::kOwn) {
    if (m.npair_convex > 0) {
      for (int k = 0; k < 2; ++k) cv.ccd_iterations[k] = convex.ccd_iterations[k];
      overflow = *convex.overflow;
    }
  }
  for (int k = 0; k < m.npair; ++k) {
    if (keys) {
      // contact row keys ascend with the pair, 3 kMaxPairContacts per pair; limits are < 0:
      // on to the next pair a key names, and done past the last
      while (next < nkeys && keys[next] >= 0 && key_pair(keys[next]) < k) ++next;
      if (next == nkeys || keys[next] < 0 || key_pair(keys[next]) >= m.npair) break;
      k = key_pair(keys[next]);
    }
    if (apart && apart[k] != 0) continue;  // (before the pair's geoms are looked up)
    int g1, g2;
    pair_geoms(m, k, g1, g2);
    if (!apart && pair_apart(m, c, g1, g2, margin)) continue;
    GeomFrame<T> f1{Vec3<T>::load(c.geom_xpos + 3 * g1), Mat3<T>::load(c.geom_xmat + 9 * g1)};
    GeomFrame<T> f2{Vec3<T>::load(c.geom_xpos + 3 * g2), Mat3<T>::load(c.geom_xmat + 9 * g2)};
    ContactPoint<T> pts[kMaxPairContacts];
    int n = 0;
    if (Set == PairSet::kOwn && convex_pair(m.geom_type[g1], m.geom_type[g2])) {
      for (; merged < *convex.ncon && key_pair(convex.efc_key[merged]) == k; ++merged, ++n) {
        pts[n].pos = Vec3<T>::load(convex.pos + 3 * merged);
        pts[n].normal = Vec3<T>::load(convex.frame + 9 * merged);
        pts[n].dist = convex.dist[merged];
      }
    } else {
      n = collide<T, Set>(geom_shape(m, g1, m.geom_size + 3 * g1), f1,
                          geom_shape(m, g2, m.geom_size + 3 * g2), f2, margin, ccd, pts, &overflow);
    }
    for (int i = 0; i < n; ++i) {
      if (ncon == m.nconmax) {
        overflow += n - i;
        break;
      }
      Vec3<T> t1, t2;
      contact_frame(pts[i].normal, t1, t2);
      pts[i].pos.store(cv.pos + 3 * ncon);
      pts[i].normal.store(cv.frame + 9 * ncon);
      t1.store(cv.frame + 9 * ncon + 3);
      t2.store(cv.frame + 9 * ncon + 6);
      cv.dist[ncon] = pts[i].dist;
      cv.geom[2 * ncon] = g1;
      cv.geom[2 * ncon + 1] = g2;
      cv.efc_key[ncon] = contact_key(k, i);
      ++ncon;
    }
  }
  *cv.ncon = ncon;
  *cv.overflow = overflow;
}

namespace detail {

// adj_detect_contacts' arguments (below), which its pairs' adjoints read: it passes them on in
// memory, so that on the GPU they are not saved to spill slots around each pair's call
template <class T, class S, class Layout, class P>
struct DetectAdjoint {
  const ModelView<S>& m;
  const ConstraintWorkspace<S, Layout>& c;
  const ContactView<S>& cv;
  P adj_pos, adj_normal;
  int normal_stride;
  P adj_dist;
  AdjWorkspace<T>& a;
  T* adj_geom_size;
  S margin;
};

// adj_detect_contacts for the contacts of one geom pair, from contact i0 on; their number. On
// the GPU a device function of its own: the pair loop holds nothing beside it.
template <class T, class S, class Layout, class P>
PHX_HD PHX_DEVICE_NOINLINE int adj_pair_contacts(const DetectAdjoint<T, S, Layout, P>& d, int i0) {
  const ModelView<S>& m = d.m;
  const ContactView<S>& cv = d.cv;
  const int ncon = *cv.ncon;
  int g1 = cv.geom[2 * i0], g2 = cv.geom[2 * i0 + 1];
  int n = 1;
  while (i0 + n < ncon && n < kMaxPairContacts && cv.geom[2 * (i0 + n)] == g1 &&
         cv.geom[2 * (i0 + n) + 1] == g2)
    ++n;
  ContactPoint<T> pts[kMaxPairContacts], adj[kMaxPairContacts];
  for (int k = 0; k < n; ++k) {
    int i = i0 + k;
    pts[k].pos = Vec3<T>::load(cv.pos + 3 * i);
    pts[k].normal = Vec3<T>::load(cv.frame + 9 * i);
    pts[k].dist = cv.dist[i];
    adj[k].pos = Vec3<T>::load(d.adj_pos + 3 * i);
    adj[k].normal = Vec3<T>::load(d.adj_normal + d.normal_stride * i);
    adj[k].dist = d.adj_dist[i];
  }
  GeomFrame<T> f1{Vec3<T>::load(d.c.geom_xpos + 3 * g1), Mat3<T>::load(d.c.geom_xmat + 9 * g1)};
  GeomFrame<T> f2{Vec3<T>::load(d.c.geom_xpos + 3 * g2), Mat3<T>::load(d.c.geom_xmat + 9 * g2)};
  GeomFrame<T> adj_f1, adj_f2;
  T adj_size1[3] = {}, adj_size2[3] = {}, size1[3], size2[3];
  for (int k = 0; k < 3; ++k) {
    size1[k] = T(m.geom_size[3 * g1 + k]);
    size2[k] = T(m.geom_size[3 * g2 + k]);
  }
  if constexpr (std::is_same_v<T, S>) {
    adj_collide(geom_shape(m, g1, size1), f1, geom_shape(m, g2, size2), f2, T(d.margin),
                ccd_settings(m), n, adj, adj_f1, adj_size1, adj_f2, adj_size2);
  } else {
    // passes in another scalar (the host's SIMD lanes) read the sizes only: their callers
    // leave models with meshes or height fields to passes in the forward's scalar
    adj_collide(m.geom_type[g1], f1, size1, m.geom_type[g2], f2, size2, T(d.margin), pts, n, adj,
                adj_f1, adj_size1, adj_f2, adj_size2);
  }
  // the geoms read again from cv, so that nothing but d, i0 and n is held across the pair's call
  g1 = d.cv.geom[2 * i0], g2 = d.cv.geom[2 * i0 + 1];
  if (d.adj_geom_size)
    for (int k = 0; k < 3; ++k) {
      d.adj_geom_size[3 * g1 + k] += adj_size1[k];
      d.adj_geom_size[3 * g2 + k] += adj_size2[k];
    }
  adj_geom_pose(d.m, g1, adj_f1, d.a);
  adj_geom_pose(d.m, g2, adj_f2, d.a);
  return n;
}

}  // namespace detail

// The adjoint of detect_contacts (at the margin it was given) for the contacts it left in cv:
// from the adjoints of their points, normals and distances (adj_pos (3 ncon), the normal of
// contact i at adj_normal + normal_stride i, adj_dist (ncon)) through the pair functions
// (adj_collide, one geom pair at a time: a pair's contacts are consecutive in cv) and
// geom_poses to the body frames in a and the geom sizes (adj_geom_size, may be null), all
// accumulated. c holds the geom frames the detection read. The adjoints are reached through
// pointers of one kind (plain, or Strided for a workspace's interleaved rows).
template <class T, class S, class Layout, class P>
PHX_HD PHX_DEVICE_NOINLINE void adj_detect_contacts(const ModelView<S>& m,
                                                    const ConstraintWorkspace<S, Layout>& c,
                                                    const ContactView<S>& cv, P adj_pos,
                                                    P adj_normal, int normal_stride, P adj_dist,
                                                    AdjWorkspace<T>& a, T* adj_geom_size,
                                                    S margin = S(0)) {
  const detail::DetectAdjoint<T, S, Layout, P> d{
      m, c, cv, adj_pos, adj_normal, normal_stride, adj_dist, a, adj_geom_size, margin};
  for (int i0 = 0; i0 < *cv.ncon;) i0 += detail::adj_pair_contacts(d, i0);
}

// The demand of a contact's normal row on its separating velocity after the step, given vn = J
// qvel before it: restitution's bounce e vn when approaching and Baumgarte's push-out
// erp (dist + slop) / dt when deeper than the slop; both are <= 0 and the stronger (smaller)
// is b's correction.
template <class T>
struct NormalCorrection {
  T bounce, push;
  PHX_HD bool bounces() const { return bounce < push; }
  PHX_HD T value() const { return bounces() ? bounce : push; }
};

template <class T, class S>
PHX_HD PHX_INLINE NormalCorrection<T> normal_correction(const ModelView<S>& m, T vn, T e, T dist) {
  T depth = dist + m.slop;
  return {vn < T(0) ? e * vn : T(0), depth < T(0) ? m.erp * depth / m.timestep : T(0)};
}

// Keys of the rows other than contacts, all negative: joint j's limit -1 - 2 j - side (side 1 at
// the upper bound), then dof d's friction loss, then tendon t's limit, then tendon t's friction
// loss, then the equalities' rows (eq_key, equality.h).
template <class T>
PHX_HD PHX_INLINE int friction_loss_key(const ModelView<T>& m, int d) {
  return -1 - 2 * m.njnt - d;
}
template <class T>
PHX_HD PHX_INLINE int tendon_limit_key(const ModelView<T>& m, int t, int side) {
  return -1 - 2 * m.njnt - m.nv - 2 * t - side;
}
template <class T>
PHX_HD PHX_INLINE int tendon_friction_key(const ModelView<T>& m, int t) {
  return -1 - 2 * m.njnt - m.nv - 2 * m.ntendon - t;
}

// Row r of friction loss `loss` (MuJoCo's frictionloss, as a hard boxed row): impulse within
// +-loss dt, velocity driven to zero; J zeroed, for the caller to fill
template <class T, class Layout>
PHX_HD RowsPtr<Layout, T> friction_row(const ModelView<T>& m, T loss,
                                       ConstraintWorkspace<T, Layout>& c, int r) {
  const auto J = c.J + long(r) * m.nv;
  for (int k = 0; k < m.nv; ++k) J[k] = T(0);
  c.lo[r] = -loss * m.timestep;
  c.hi[r] = loss * m.timestep;
  c.findex[r] = -1;
  c.mu[r] = T(0);
  c.b[r] = T(0);
  return J;
}

// How far a length q is inside [lo, hi] (negative: beyond a bound) and the row's sign: +1 when
// the lower bound is the nearer, -1 for the upper.
template <class T, class S>
PHX_HD PHX_INLINE T limit_distance(T q, S lo, S hi, T* sign) {
  bool lower = q - lo < hi - q;
  *sign = lower ? T(1) : T(-1);
  return lower ? q - lo : hi - q;
}

// Row r of a violated limit at distance dist < 0 (how far inside): impulse >= 0, b the Baumgarte
// push-out beyond the slop; J zeroed, for the caller to fill
template <class T, class Layout>
PHX_HD RowsPtr<Layout, T> one_sided_row(const ModelView<T>& m, T dist,
                                        ConstraintWorkspace<T, Layout>& c, int r) {
  const auto J = c.J + long(r) * m.nv;
  for (int d = 0; d < m.nv; ++d) J[d] = T(0);
  c.lo[r] = T(0);
  c.hi[r] = T(kLcpInf);
  c.findex[r] = -1;
  c.mu[r] = T(0);
  T depth = dist + m.slop;
  c.b[r] = depth < T(0) ? m.erp * depth / m.timestep : T(0);
  return J;
}

// Row r for the limits range (lo, hi) of a joint's coordinate or a tendon's length (a
// transmission: type, id) when one is violated: J = sign times the transmission's row
// (+1 at the lower bound, -1 at the upper, in *sign), one-sided. Returns whether the row was
// made.
template <class T, class Layout>
PHX_HD bool limit_row(const ModelView<T>& m, const Workspace<T>& w, int type, int id,
                      const T* range, const T* qpos, ConstraintWorkspace<T, Layout>& c, int r,
                      T* sign) {
  const T length = type == kTrnTendon ? w.ten_length[id] : qpos[m.jnt_qposadr[id]];
  T dist = limit_distance(length, range[0], range[1], sign);
  if (!(dist < T(0))) return false;
  add_transmission_row(m, w, type, id, *sign, one_sided_row(m, dist, c, r));
  return true;
}

// A ball joint j's limit (MuJoCo's): the rotation angle of its quaternion, theta
// (quat_angle_axis), at most the larger of its range's two numbers; its distance inside
// (negative beyond) and the rotation's axis u
template <class T, class S>
PHX_HD PHX_INLINE T ball_limit_distance(const ModelView<S>& m, int j, const T* qpos, Vec3<T>& u) {
  const T* q = qpos + m.jnt_qposadr[j];
  const S* range = m.jnt_range + 2 * j;
  return T(range[0] > range[1] ? range[0] : range[1]) -
         quat_angle_axis(Quat<T>{q[0], q[1], q[2], q[3]}, u);
}

// Row r for ball joint j's limit when violated: theta's rate is u . omega (omega the joint's
// qvel, in the child's frame, about which the axis u does not turn), so J = -u on its three
// dofs, one-sided. Returns whether the row was made.
template <class T, class Layout>
PHX_HD bool ball_limit_row(const ModelView<T>& m, int j, const T* qpos,
                           ConstraintWorkspace<T, Layout>& c, int r) {
  Vec3<T> u;
  const T dist = ball_limit_distance(m, j, qpos, u);
  if (!(dist < T(0))) return false;
  const auto J = one_sided_row(m, dist, c, r) + m.jnt_dofadr[j];
  J[0] = -u.x, J[1] = -u.y, J[2] = -u.z;
  return true;
}

// First dof past the tree that dof d belongs to (tree: dof_treeadr).
PHX_HD PHX_INLINE int tree_end(const int* tree, int nv, int d) {
  int s = tree[d];
  while (d < nv && tree[d] == s) ++d;
  return d;
}

// The dof ranges a row of J reaches, as LcpProblem's factor wants them (4 ints): its first tree
// and, when it reaches another, the range from the start of the second tree to the end of the
// last. Exact for rows on at most two trees (contacts, joint limits), conservative beyond. J
// points to the row and span to its 4 ints (pointers or Strided ones).
template <class P, class S>
PHX_HD void row_span(P J, int nv, const int* tree, S span) {
  using T = std::remove_cvref_t<decltype(J[0])>;
  int d = 0;
  while (d < nv && J[d] == T(0)) ++d;
  if (d == nv) {
    span[0] = span[1] = span[2] = span[3] = 0;
    return;
  }
  span[0] = tree[d];
  span[1] = tree_end(tree, nv, d);
  int k = span[1], last = nv;
  while (k < nv && J[k] == T(0)) ++k;
  while (last > k && J[last - 1] == T(0)) --last;
  span[2] = k < nv ? tree[k] : span[1];
  span[3] = k < nv ? tree_end(tree, nv, last - 1) : span[1];
}

// The dof tree body b moves with, [range[0], range[1]) (empty for a body fixed to the world).
template <class T>
PHX_HD PHX_INLINE void body_tree(const ModelView<T>& m, int b, int* range) {
  const int d = last_dof(m, b);
  range[0] = d < 0 ? 0 : m.dof_treeadr[d];
  range[1] = d < 0 ? 0 : tree_end(m.dof_treeadr, m.nv, d);
}

// row_span of a contact's rows between bodies b1 and b2, from their trees without reading J
template <class T, class S>
PHX_HD void contact_span(const ModelView<T>& m, int b1, int b2, S span) {
  int t[2][2];
  body_tree(m, b1, t[0]);
  body_tree(m, b2, t[1]);
  const int first = (t[0][0] == t[0][1] || (t[1][0] != t[1][1] && t[1][0] < t[0][0])) ? 1 : 0;
  const int* a = t[first];
  const int* b = t[1 - first];
  span[0] = a[0];
  span[1] = a[1];
  const bool second = b[0] != b[1] && b[0] != a[0];
  span[2] = second ? b[0] : a[1];
  span[3] = second ? b[1] : a[1];
}

// Rows of the contacts, active joint limits, friction losses, active tendon limits and active
// equality constraints: J, bounds, friction links, and b without the unconstrained velocity term.
// Returns the number of rows. Row keys of contacts were set by detect_contacts in efc_key[contact];
// this spreads them to the rows. c.span receives the dof ranges each row reaches (row_span).
template <class T, class Layout>
PHX_HD int build_rows(const ModelView<T>& m, const T* qpos, const T* qvel, const Workspace<T>& w,
                      ConstraintWorkspace<T, Layout>& c, ContactView<T>& cv) {
  const T inf = T(kLcpInf);
  int ncon = *cv.ncon, nv = m.nv;
  // contacts: count the rows first so that keys can be moved in place from the back
  int nrow = 0;
  for (int i = 0; i < ncon; ++i) {
    int g1 = cv.geom[2 * i], g2 = cv.geom[2 * i + 1];
    nrow += (m.geom_condim[g1] > 1 || m.geom_condim[g2] > 1) ? 3 : 1;
  }
  const int ncontact_rows = nrow;
  int row = nrow;
  for (int i = ncon - 1; i >= 0; --i) {
    int g1 = cv.geom[2 * i], g2 = cv.geom[2 * i + 1];
    int nr = (m.geom_condim[g1] > 1 || m.geom_condim[g2] > 1) ? 3 : 1;
    row -= nr;
    int key = cv.efc_key[i];
    Vec3<T> p = Vec3<T>::load(cv.pos + 3 * i);
    int b1 = m.geom_bodyid[g1], b2 = m.geom_bodyid[g2];
    T mu = m.geom_friction[3 * g1] > m.geom_friction[3 * g2] ? m.geom_friction[3 * g1]
                                                                : m.geom_friction[3 * g2];
    T e = m.geom_restitution[g1] > m.geom_restitution[g2] ? m.geom_restitution[g1]
                                                            : m.geom_restitution[g2];
    Vec3<T> u[3];
    for (int k = 0; k < nr; ++k) u[k] = Vec3<T>::load(cv.frame + 9 * i + 3 * k);
    for (long d = 0; d < long(nr) * nv; ++d) c.J[long(row) * nv + d] = T(0);
    add_point_jacobian(m, w, b2, p, u, nr, T(1), c.J + long(row) * nv);
    add_point_jacobian(m, w, b1, p, u, nr, T(-1), c.J + long(row) * nv);
    contact_span(m, b1, b2, c.span + 4 * row);
    for (int k = 1; k < nr; ++k)
      for (int h = 0; h < 4; ++h) c.span[4 * (row + k) + h] = c.span[4 * row + h];
    for (int k = 0; k < nr; ++k) {
      int r = row + k;
      const auto J = c.J + long(r) * nv;
      cv.efc_key[r] = key + k;
      if (k == 0) {
        // normal: v >= 0 after restitution and penetration corrections
        c.lo[r] = T(0);
        c.hi[r] = inf;
        c.findex[r] = -1;
        c.mu[r] = T(0);
        T vn = T(0);
        for (int d = 0; d < nv; ++d) vn += J[d] * qvel[d];
        c.b[r] = normal_correction(m, vn, e, cv.dist[i]).value();
      } else {
        c.lo[r] = -inf;
        c.hi[r] = inf;
        c.findex[r] = row;
        c.mu[r] = mu;
        c.b[r] = T(0);
      }
    }
  }

  // joint limits: one-sided rows on the dof of a hinge or slide, on a ball's rotation angle
  // (the upper side's key)
  if (m.limit) {
    for (int j = 0; j < m.njnt; ++j) {
      int type = m.jnt_type[j];
      if (!m.jnt_limited[j] || type == kJointFree) continue;
      T sign = T(-1);
      if (type == kJointBall
              ? !ball_limit_row(m, j, qpos, c, nrow)
              : !limit_row(m, w, kTrnJoint, j, m.jnt_range + 2 * j, qpos, c, nrow, &sign))
        continue;
      cv.efc_key[nrow] = -1 - 2 * j - (sign < T(0) ? 1 : 0);
      ++nrow;
    }
  }

  // friction loss: a row per dof with dry friction
  for (int d = 0; d < nv; ++d) {
    T loss = m.dof_frictionloss[d];
    if (!(loss > T(0))) continue;
    friction_row(m, loss, c, nrow)[d] = T(1);
    cv.efc_key[nrow] = friction_loss_key(m, d);
    ++nrow;
  }

  // tendon limits: one-sided rows along the tendon's row
  if (m.limit) {
    for (int t = 0; t < m.ntendon; ++t) {
      T sign;
      if (!m.tendon_limited[t] ||
          !limit_row(m, w, kTrnTendon, t, m.tendon_range + 2 * t, qpos, c, nrow, &sign))
        continue;
      cv.efc_key[nrow] = tendon_limit_key(m, t, sign < T(0) ? 1 : 0);
      ++nrow;
    }
  }

  // tendon friction loss: a row along the tendon's row
  for (int t = 0; t < m.ntendon; ++t) {
    T loss = m.tendon_frictionloss[t];
    if (!(loss > T(0))) continue;
    add_transmission_row(m, w, kTrnTendon, t, T(1), friction_row(m, loss, c, nrow));
    cv.efc_key[nrow] = tendon_friction_key(m, t);
    ++nrow;
  }

  // equality constraints: bilateral rows (equality.h)
  nrow = equality_rows(m, qpos, qvel, w, c, cv.efc_key, nrow);
  for (int r = ncontact_rows; r < nrow; ++r)
    row_span(c.J + long(r) * nv, nv, m.dof_treeadr, c.span + 4 * r);
  *cv.nefc = nrow;
  return nrow;
}

// The LCP of the rows in c; with nv > 0 also A's factor Y (span as delassus left it).
template <class T, class Layout>
PHX_HD LcpProblem<T, Layout> lcp_problem(int nrow, const ConstraintWorkspace<T, Layout>& c,
                                         int nv = 0) {
  LcpProblem<T, Layout> p;
  p.n = nrow;
  p.A = c.has_matrix ? c.A : nullptr;
  p.b = c.b;
  p.lo = c.lo;
  p.hi = c.hi;
  p.mu = c.mu;
  p.findex = c.findex;
  if (nv > 0) {
    p.Y = c.Y;
    p.span = c.span;
    p.ncol = nv;
  }
  return p;
}

// Delassus matrix and free velocity term: Y = L^-1 J^T (rows), A = Y^T Y, b += J vfree. The
// mass matrix couples no two dof trees, so Y's rows are zero beyond the trees of their J rows
// (c.span, which build_rows set), and A's entries are dot products over the trees two rows share. A
// is left unbuilt (c.has_matrix false) when nothing will read it: PGS sweeping the factor
// (lcp_sweeps_on_factor) in a forward-only kernel. In three parts, which the CPU's packs of
// environments run on their lanes (host/pack_kernels.h): delassus_factor (b and Y),
// delassus_keeps_matrix (whether A is built) and delassus_matrix (A).
template <class T, class Layout>
PHX_HD PHX_INLINE void delassus_factor(const ModelView<T>& m, int nrow,
                                       ConstraintWorkspace<T, Layout>& c) {
  int nv = m.nv;
  for (int r = 0; r < nrow; ++r) {
    const auto J = c.J + long(r) * nv;
    const auto y = c.Y + long(r) * nv;
    const auto s = c.span + 4 * r;
    c.b[r] +=
        dot_n(J + s[0], c.vfree + s[0], s[1] - s[0]) + dot_n(J + s[2], c.vfree + s[2], s[3] - s[2]);
    for (int d = 0; d < nv; ++d) y[d] = J[d];
  }
  // L y_r = J_r, over the trees J_r reaches: y_r is zero on the others, as J_r is
  cholesky_solve_lower_rows(c.L, nv, c.Y, nrow, m.dof_treeadr, c.span);
}

template <class M, class T, class Layout>
PHX_HD PHX_INLINE bool delassus_keeps_matrix(const M& m, int nrow,
                                             const ConstraintWorkspace<T, Layout>& c) {
  LcpProblem<T, Layout> p = lcp_problem(nrow, c, m.nv);
  return !(c.forward_only && m.lcp_solver == kLcpPgs && lcp_sweeps_on_factor(p));
}

template <class T, class Layout>
PHX_HD PHX_INLINE void delassus_matrix(const ModelView<T>& m, int nrow,
                                       ConstraintWorkspace<T, Layout>& c) {
  LcpProblem<T, Layout> p = lcp_problem(nrow, c, m.nv);
  for (int r = 0; r < nrow; ++r)
    for (int q = 0; q <= r; ++q) {
      T s = lcp_factor_entry(p, r, q);
      c.A[r * nrow + q] = s;
      c.A[q * nrow + r] = s;
    }
}

template <class T, class Layout>
PHX_HD void delassus(const ModelView<T>& m, int nrow, ConstraintWorkspace<T, Layout>& c) {
  delassus_factor(m, nrow, c);
  c.has_matrix = delassus_keeps_matrix(m, nrow, c);
  if (c.has_matrix) delassus_matrix(m, nrow, c);
}

// The impulses and classes a step's LCP produced, handed back to a replay of that step
// (step_constrained's `known`); n rows, or force = null for none.
template <class T>
struct LcpSolution {
  const T* force = nullptr;  // (n)
  const int* cls = nullptr;  // (n) LcpClass flags
  int n = -1;
  const int* key = nullptr;  // (n) the rows' efc_key, may be null
};

// The exact finish of an iterative answer f: Nimble's stabilisation (the exact re-solve on the
// clamping set f's rows fall in, stabilize); when that set gives no exact solution and `pivot`,
// Dantzig pivoting from scratch, then stabilised. Pivoting's answer is kept only when its
// residual is below that of f (c.f_prev holds f meanwhile: free once the warm start has been
// read). tol: the residual at which a re-solve is accepted; rank_tol: lcp_rank_tol or finer;
// before: the residual of f as given. cls receives the row classes. Returns the residual of
// the f left.
template <class T, class Layout>
PHX_HD PHX_DEVICE_NOINLINE T finish_lcp(const LcpProblem<T, Layout>& p,
                                        ConstraintWorkspace<T, Layout>& c, T* f, int* cls, T tol,
                                        T rank_tol, bool pivot, T before) {
  if (stabilize(p, f, cls, tol, rank_tol, c.lcp, c.ilcp, &c.factored_rank))
    return lcp_residual(p, f);
  if (!pivot) return before;
  for (int r = 0; r < p.n; ++r) c.f_prev[r] = f[r];
  if (dantzig(p, f, tol, rank_tol, 8, c.lcp, c.ilcp)) {
    stabilize(p, f, cls, tol, rank_tol, c.lcp, c.ilcp, &c.factored_rank);
    const T after = lcp_residual(p, f);
    if (after <= before) return after;
  }
  for (int r = 0; r < p.n; ++r) f[r] = c.f_prev[r];
  return before;
}

// The most rows the finish of stalled sweeps pivots (Dantzig's passes refactor their sets and
// cost n^4 at worst: 0.1 s for a step of 150 rows); more keep the damped sweeps' answer.
constexpr int kLcpPivotRows = 64;

// solve_lcp's kLcpPgs after sweeps that stalled at residual r above lcp_residual_limit (see
// there); apart, so that the kernels that inline the step carry only its call
template <class T, class Layout>
PHX_HD PHX_DEVICE_NOINLINE T finish_stalled_pgs(const ModelView<T>& m, int nrow,
                                                ConstraintWorkspace<T, Layout>& c, T* f, int* cls,
                                                T r) {
  LcpProblem<T, Layout> p = lcp_problem(nrow, c, m.nv);
  if (!c.has_matrix) {
    delassus_matrix(m, nrow, c);
    c.has_matrix = true;
    p.A = c.A;
  }
  // exact answers are accepted two orders below the limit: at the limit itself, sets that
  // leave contacts approaching at nearly the limit would pass, and steps would take turns
  // between such answers and the sweeps' own
  const T limit = m.lcp_residual_limit;
  const T accept = T(0.01) * limit, rank_tol = lcp_stall_rank_tol<T>();
  r = finish_lcp(p, c, f, cls, accept, rank_tol, false, r);
  for (int done = m.lcp_iterations; done < m.lcp_max_iterations && r > limit;
       done += m.lcp_iterations) {
    const int left = m.lcp_max_iterations - done;
    const int sweeps = left < m.lcp_iterations ? left : m.lcp_iterations;
    r = pgs(p, f, sweeps, T(kLcpStallOmega), c.pgs, c.gs_vel, T(m.lcp_sweep_tolerance));
  }
  if (!(r > limit)) return r;
  return finish_lcp(p, c, f, cls, accept, rank_tol, nrow <= kLcpPivotRows, r);
}

// solve_lcp's kLcpPgs once its sweeps left f and its residual res: the finish of sweeps that
// stalled above lcp_residual_limit; the residual
template <class T, class Layout>
PHX_HD PHX_INLINE T finish_pgs(const ModelView<T>& m, int nrow, ConstraintWorkspace<T, Layout>& c,
                               T* f, int* cls, T res) {
  return res > T(m.lcp_residual_limit) ? finish_stalled_pgs(m, nrow, c, f, cls, res) : res;
}

// solve_lcp's kLcpPgs for sweeps that ran elsewhere from its warm start (pgs_lanes, on a pack
// of environments' lanes: the dense sweeps, pgs's bit for bit) and left their impulses in f:
// what solve_lcp leaves besides them, the residual and the finish (finish_pgs)
template <class T, class Layout>
PHX_HD T solve_lcp_swept(const ModelView<T>& m, int nrow, ConstraintWorkspace<T, Layout>& c, T* f,
                         int* cls, int* hit) {
  *hit = 0;
  c.factored_rank = -1;
  for (int r = 0; r < nrow; ++r) c.f_prev[r] = f[r];  // (where solve_lcp's sweeps ran)
  return finish_pgs(m, nrow, c, f, cls, lcp_residual(lcp_problem(nrow, c, m.nv), f));
}

// Solve the LCP of the rows from the warm start in f, as m.lcp_solver says:
// - kLcpPgs: projected Gauss-Seidel, up to lcp_iterations sweeps, fewer once a sweep changes no
//   row's velocity by more than lcp_sweep_tolerance (when it is positive). Where the sweeps
//   stall above lcp_residual_limit (impacts on rows that nearly constrain the same motion: a
//   hand's contact and the elbow's limit, say), the exact re-solve on the clamping set of
//   their answer follows (stabilize, accepted at lcp_residual_limit / 100) on A, built for it when
//   the sweeps ran on the factor alone; where that set is wrong, damped sweeps
//   (kLcpStallOmega) in rounds of lcp_iterations, each ended by a residual check, up to
//   lcp_max_iterations sweeps in all; then the exact finish with pivoting (finish_lcp, up to
//   kLcpPivotRows rows). Only those steps pay for it.
// - kLcpPgsStabilized / kLcpDantzig: first the previous step's clamping set (classes of the rows
//   with the same key in class_prev, new rows clamping) solved exactly and accepted when
//   feasible (Nimble's warm start, *hit = 1); otherwise PGS or Dantzig pivoting, then the exact
//   re-solve on the clamping set they found (stabilisation). When PGS's set gives no exact
//   solution, Dantzig pivoting follows. cls receives the row classes.
// Returns the residual (lcp_residual) for the convergence status bit.
template <class T, class Layout>
PHX_HD T solve_lcp(const ModelView<T>& m, int nrow, int nprev, ConstraintWorkspace<T, Layout>& c,
                   const int* key, T* f, int* cls, int* hit) {
  LcpProblem<T, Layout> p = lcp_problem(nrow, c, m.nv);
  *hit = 0;
  c.factored_rank = -1;
  if (m.lcp_solver == kLcpPgs) {
    // the sweeps read and write the rows' impulses on every row: on c.f_prev, laid out as the
    // rows (free once the warm start has been read), and back into f after
    const auto sweeping = c.f_prev;
    for (int r = 0; r < nrow; ++r) sweeping[r] = f[r];
    const T res =
        pgs(p, sweeping, m.lcp_iterations, T(1), c.pgs, c.gs_vel, T(m.lcp_sweep_tolerance));
    for (int r = 0; r < nrow; ++r) f[r] = sweeping[r];
    return finish_pgs(m, nrow, c, f, cls, res);
  }
  const T tol = m.lcp_tolerance, rank_tol = lcp_rank_tol<T>();
  if (nprev > 0) {
    for (int r = 0; r < nrow; ++r) {
      cls[r] = kLcpClamping;
      for (int k = 0; k < nprev; ++k) {
        if (c.key_prev[k] == key[r]) {
          cls[r] = c.class_prev[k] & kLcpClassMask;
          break;
        }
      }
    }
    if (lcp_solve_on_set_repaired(p, cls, f, tol, rank_tol, c.lcp, c.ilcp, &c.factored_rank)) {
      *hit = 1;
      return lcp_residual(p, f);
    }
  }
  bool pivot_first = m.lcp_solver == kLcpDantzig;
  bool solved = pivot_first && dantzig(p, f, tol, rank_tol, 4, c.lcp, c.ilcp);
  if (!solved) pgs(p, f, m.lcp_iterations, T(1), c.pgs, c.gs_vel, T(m.lcp_sweep_tolerance));
  if (stabilize(p, f, cls, tol, rank_tol, c.lcp, c.ilcp, &c.factored_rank) || pivot_first)
    return lcp_residual(p, f);
  // PGS's classification did not give an exact solution (too few sweeps on an ill-conditioned
  // or degenerate set): Dantzig pivoting, keeping PGS's impulses if it fails (c.f_prev is free
  // once the warm start has been read). Written out rather than through finish_lcp: with the
  // call, StepJacobianKernel spilled 2.4 KB more per CUDA thread (ptxas, sm_80).
  for (int r = 0; r < nrow; ++r) c.f_prev[r] = f[r];
  if (dantzig(p, f, tol, rank_tol, 4, c.lcp, c.ilcp)) {
    stabilize(p, f, cls, tol, rank_tol, c.lcp, c.ilcp, &c.factored_rank);
  } else {
    for (int r = 0; r < nrow; ++r) f[r] = c.f_prev[r];
  }
  return lcp_residual(p, f);
}

}  // namespace phx
