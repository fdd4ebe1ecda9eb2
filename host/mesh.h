// Meshes: vertices read from mesh files (assimp: STL, OBJ, DAE), their convex hulls (qhull) and
// the hulls' place in the Model's mesh arrays (mesh_* of PHX_MODEL_ARRAYS). The narrowphase
// collides a mesh geom as its convex hull, as MuJoCo does, so a mesh is kept as that hull only.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "host/model.h"

namespace phx {

using Point3 = std::array<double, 3>;

// All vertices of all meshes in a mesh file, in the file's frame, times `scale` (per axis,
// applied last, as URDF's <mesh scale>). Node transforms below the scene's root are applied. A
// COLLADA file's <unit meter> scales it; its <up_axis> is not applied (assimp folds both into
// the root node, which is dropped, as Pinocchio/hpp-fcl, rviz and Gazebo do: URDF meshes are
// authored in the link's frame whatever the axis tag says). Throws std::runtime_error naming
// the file when it is missing, unreadable or holds no vertices, and, before assimp reads it, a
// COLLADA file that is malformed XML, has an index list (<p>, <vcount>, <v>, <h>) holding other
// than integers, a <p> of a length that is not a whole number of vertices, a count larger than
// the file's size in bytes, a primitive of nonzero count without <p>, an array without count,
// or an accessor beyond its array (which assimp 5.2 reads without bound on memory, or crashes
// on).
std::vector<Point3> read_mesh_vertices(const std::string& path, Point3 scale = {1, 1, 1});

// A convex hull as the kernels read it (phalanx/collision/types.h, ConvexHull): vertices, each
// vertex's neighbours along hull edges, and faces (coplanar triangles merged into polygons) with
// outward unit normals and vertices counter-clockwise about them. Ids are local to the hull.
struct Hull {
  std::vector<Point3> vertices;  // (nvert) hull vertices, in the order of the input points
  std::vector<int> point_ids;    // (nvert) index of each vertex among the input points
  std::vector<int> adjadr;       // (nvert) first neighbour of each vertex in adj
  std::vector<int> adjnum;       // (nvert) number of neighbours (hull edges) of each vertex
  std::vector<int> adj;          // (2 x edges) neighbour ids, ascending per vertex
  std::vector<Point3> normals;   // (npoly) outward unit normal of each face
  std::vector<int> polyadr;      // (npoly) first vertex of each face in polyvert
  std::vector<int> polynum;      // (npoly) number of vertices of each face
  std::vector<int> polyvert;     // face vertex ids, counter-clockwise about the face's normal

  int nvert() const { return static_cast<int>(vertices.size()); }
  int npoly() const { return static_cast<int>(normals.size()); }
  int nedge() const { return static_cast<int>(adj.size() / 2); }
};

// The convex hull of `points` by qhull (options "qhull [TAn]": no triangulation 'Qt', default
// merging 'C-0', so facets coplanar within roundoff come out merged into one polygon).
// maxhullvert, MuJoCo's <mesh maxhullvert>: -1 for no limit, else at least 4: qhull stops after
// adding maxhullvert - 4 points to its initial simplex ('TA'), so the hull has at most that many
// vertices and encloses fewer of the points. `name` names the mesh in errors. Throws
// std::invalid_argument for maxhullvert in [0, 4) or non-finite points, std::runtime_error
// for fewer than 4 points, coplanar or collinear points, or another qhull failure.
Hull convex_hull(const std::vector<Point3>& points, int maxhullvert = -1,
                 const std::string& name = "mesh");

// Appends `hull` to m's mesh arrays (mesh_vertadr ... mesh_polyvert) and counts; returns its
// mesh id, for geom_dataid.
int add_mesh(Model& m, const Hull& hull);

}  // namespace phx
