// Meshes: vertices from mesh files through assimp, convex hulls through qhull (reentrant C API),
// and their rows in the Model's mesh arrays.
#include "host/mesh.h"

#include <assimp/postprocess.h>
#include <assimp/scene.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

extern "C" {
#include <libqhull_r/qhull_ra.h>
}

#include "host/xml_source.h"

namespace phx {
namespace {

//------------------------------------------------------------------ mesh files

// an affine map x -> R x + t in double (assimp's matrices are float)
struct Affine {
  double R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  double t[3] = {0, 0, 0};
};

Affine to_affine(const aiMatrix4x4& m) {
  Affine a;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) a.R[3 * i + j] = m[i][j];
    a.t[i] = m[i][3];
  }
  return a;
}

// a b: apply b, then a
Affine compose(const Affine& a, const Affine& b) {
  Affine c;
  for (int i = 0; i < 3; i++) {
    c.t[i] = a.t[i];
    for (int j = 0; j < 3; j++) {
      c.R[3 * i + j] = 0;
      for (int k = 0; k < 3; k++) c.R[3 * i + j] += a.R[3 * i + k] * b.R[3 * k + j];
      c.t[i] += a.R[3 * i + j] * b.t[j];
    }
  }
  return c;
}

// appends the vertices of node's meshes and of its descendants', mapped by `to_file` (node frame
// to file frame) and scaled per axis
void collect_vertices(const aiScene& scene, const aiNode& node, const Affine& to_file,
                      const Point3& scale, std::vector<Point3>& out) {
  for (unsigned i = 0; i < node.mNumMeshes; i++) {
    const aiMesh& mesh = *scene.mMeshes[node.mMeshes[i]];
    for (unsigned v = 0; v < mesh.mNumVertices; v++) {
      const aiVector3D& p = mesh.mVertices[v];
      double x[3] = {p.x, p.y, p.z};
      Point3 q;
      for (int k = 0; k < 3; k++) {
        const double* r = &to_file.R[3 * k];
        q[k] = (r[0] * x[0] + r[1] * x[1] + r[2] * x[2] + to_file.t[k]) * scale[k];
      }
      out.push_back(q);
    }
  }
  for (unsigned c = 0; c < node.mNumChildren; c++) {
    const aiNode& child = *node.mChildren[c];
    collect_vertices(scene, child, compose(to_file, to_affine(child.mTransformation)), scale, out);
  }
}

bool is_collada(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".dae";
}

// COLLADA's index lists (<p>, <vcount>, <v>, <h>) hold integers, each count names things the
// file holds, and primitives of a nonzero count list their indices in <p>. assimp 5.2's COLLADA
// parser loops without bound on a list with another token ("x", "inf", "1e5": it does not move
// past it), reserves a count's entries before reading them, so a few bytes can take all memory,
// dereferences a null pointer for <triangles>, <polylist> or <polygons> without <p>, loops on a
// <p> whose length is not a whole number of vertices (one index per input offset each), reads on
// in malformed XML, and dereferences a null pointer for an array without count or an accessor
// beyond its array: such a file is refused first, naming the element or the XML error.
void check_collada(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  size_t start = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
  if (start == std::string::npos || text[start] != '<') return;  // not XML
  XmlSource src;
  src.path = path;
  try {
    src.parse(text);
  } catch (const std::runtime_error& e) {
    if (text.find("<COLLADA") == std::string::npos) return;  // another format: assimp's to read
    // "<path>:<line>: malformed XML: ..."
    throw std::runtime_error("cannot read mesh file '" + path + "': line " +
                             std::string(e.what()).substr(path.size() + 1));
  }
  if (std::string_view(src.doc.document_element().name()) != "COLLADA") return;
  // every node, without recursion (pugixml's walker)
  struct Check : pugi::xml_tree_walker {
    const XmlSource& src;
    size_t size;
    explicit Check(const XmlSource& s, size_t n) : src(s), size(n) {}
    [[noreturn]] void fail(pugi::xml_node node, const std::string& why) const {
      throw std::runtime_error("cannot read mesh file '" + src.path + "': <" + node.name() +
                               "> (line " + std::to_string(src.line(node.offset_debug())) + ") " +
                               why);
    }
    std::unordered_map<std::string, unsigned long long> arrays;  // id -> count
    std::vector<pugi::xml_node> accessors;
    bool for_each(pugi::xml_node& node) override {
      std::string_view kind = node.name();
      if (kind.size() > 6 && kind.substr(kind.size() - 6) == "_array") {
        if (!node.attribute("count")) fail(node, "has no count");
        arrays[node.attribute("id").value()] = node.attribute("count").as_ullong();
      }
      if (kind == "accessor") accessors.push_back(node);
      if (pugi::xml_attribute count = node.attribute("count"); count && count.as_ullong() > size)
        fail(node, std::string("has count ") + count.value() + ", more than its file of " +
                       std::to_string(size) + " bytes holds");
      std::string_view name = kind;
      bool primitive = name == "triangles" || name == "polylist" || name == "polygons" ||
                       name == "lines" || name == "linestrips" || name == "tristrips" ||
                       name == "trifans";
      if (primitive && node.attribute("count").as_ullong() > 0 && !node.child("p"))
        fail(node, std::string("has count ") + node.attribute("count").value() + " but no <p>");
      if (name == "p") {
        // whole vertices: each takes one index per input offset
        unsigned stride = 1;
        for (pugi::xml_node input : node.parent().children("input"))
          stride = std::max(stride, input.attribute("offset").as_uint() + 1);
        size_t n = 0;
        for (pugi::xml_node c : node.children()) {
          std::istringstream tokens(c.value());
          for (std::string t; tokens >> t;) n++;
        }
        if (n % stride != 0)
          fail(node, "holds " + std::to_string(n) + " indices, not a multiple of the " +
                         std::to_string(stride) + " per vertex that its inputs' offsets take");
      }
      std::string_view tag = node.parent().name();
      bool text = node.type() == pugi::node_pcdata || node.type() == pugi::node_cdata;
      if (!text || (tag != "p" && tag != "vcount" && tag != "v" && tag != "h")) return true;
      std::istringstream tokens(node.value());
      for (std::string t; tokens >> t;) {
        size_t digits = t[0] == '-' || t[0] == '+' ? 1 : 0;
        if (digits == t.size() || t.find_first_not_of("0123456789", digits) != std::string::npos)
          fail(node.parent(), "holds '" + t.substr(0, 32) + "', not an index");
      }
      return true;
    }
  } check(src, text.size());
  src.doc.traverse(check);
  // an accessor reads count elements of stride values from offset on, within its array
  for (pugi::xml_node node : check.accessors) {
    const char* source = node.attribute("source").value();
    auto array = check.arrays.find(source[0] == '#' ? source + 1 : source);
    unsigned long long count = node.attribute("count").as_ullong(),
                       stride = std::max(node.attribute("stride").as_ullong(), 1ull),
                       offset = node.attribute("offset").as_ullong();
    if (array != check.arrays.end() &&
        (offset > array->second || count > (array->second - offset) / stride))
      check.fail(node, "reads " + std::to_string(count) + " x " + std::to_string(stride) +
                           " values from " + std::to_string(offset) + " on, beyond the " +
                           std::to_string(array->second) + " of its array");
  }
}

//------------------------------------------------------------------ hulls

// frees qhull's memory however the hull's extraction ends
struct QhullRun {
  qhT qh;
  char* messages = nullptr;  // what qhull printed (errors, warnings)
  size_t length = 0;
  FILE* err = nullptr;

  QhullRun() {
    err = open_memstream(&messages, &length);
    qh_zero(&qh, err);
  }
  ~QhullRun() {
    int curlong = 0, totlong = 0;
    qh_freeqhull(&qh, !qh_ALL);
    qh_memfreeshort(&qh, &curlong, &totlong);
    if (err) std::fclose(err);
    std::free(messages);
  }
  QhullRun(const QhullRun&) = delete;
  QhullRun& operator=(const QhullRun&) = delete;

  // the first line of qhull's messages ("QH6154 qhull precision error: initial simplex is flat")
  std::string first_message() {
    if (!err) return "";
    std::fflush(err);
    std::string s(messages ? messages : "", length);
    size_t start = s.find_first_not_of(" \n");
    if (start == std::string::npos) return "";
    return s.substr(start, s.find('\n', start) - start);
  }
};

double dot(const double* a, const double* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

// two unit vectors u, v with u x v = n (n a unit vector): the plane's counter-clockwise frame
void plane_basis(const double* n, double* u, double* v) {
  // u: n crossed with the axis least aligned with it
  int k = std::abs(n[0]) <= std::abs(n[1]) && std::abs(n[0]) <= std::abs(n[2]) ? 0
          : std::abs(n[1]) <= std::abs(n[2])                                   ? 1
                                                                               : 2;
  double e[3] = {0, 0, 0};
  e[k] = 1;
  u[0] = e[1] * n[2] - e[2] * n[1];
  u[1] = e[2] * n[0] - e[0] * n[2];
  u[2] = e[0] * n[1] - e[1] * n[0];
  double len = std::sqrt(dot(u, u));
  for (int i = 0; i < 3; i++) u[i] /= len;
  v[0] = n[1] * u[2] - n[2] * u[1];
  v[1] = n[2] * u[0] - n[0] * u[2];
  v[2] = n[0] * u[1] - n[1] * u[0];
}

}  // namespace

std::vector<Point3> read_mesh_vertices(const std::string& path, Point3 scale) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error("mesh file '" + path + "' not found");
  }
  check_collada(path);
  Assimp::Importer importer;
  const aiScene* scene = importer.ReadFile(path, aiProcess_JoinIdenticalVertices);
  if (!scene || !scene->mRootNode) {
    throw std::runtime_error("cannot read mesh file '" + path + "': " + importer.GetErrorString());
  }
  // the root's transform: assimp's COLLADA <unit meter> times its up-axis turn; the unit only is
  // kept (a rotation times a uniform scale: the scale is the cube root of the determinant)
  Affine root;
  if (is_collada(path)) {
    Affine a = to_affine(scene->mRootNode->mTransformation);
    const double* R = a.R;
    double det = R[0] * (R[4] * R[8] - R[5] * R[7]) - R[1] * (R[3] * R[8] - R[5] * R[6]) +
                 R[2] * (R[3] * R[7] - R[4] * R[6]);
    double unit = std::cbrt(std::abs(det));
    for (int i = 0; i < 3; i++) root.R[4 * i] = unit;
  }
  std::vector<Point3> vertices;
  collect_vertices(*scene, *scene->mRootNode, root, scale, vertices);
  if (vertices.empty()) throw std::runtime_error("mesh file '" + path + "' holds no vertices");
  return vertices;
}

Hull convex_hull(const std::vector<Point3>& points, int maxhullvert, const std::string& name) {
  if (maxhullvert != -1 && maxhullvert < 4) {
    throw std::invalid_argument(name + ": maxhullvert is " + std::to_string(maxhullvert) +
                                ", expected -1 (no limit) or at least 4");
  }
  if (points.size() < 4) {
    throw std::runtime_error(name + ": a convex hull needs at least 4 points, got " +
                             std::to_string(points.size()));
  }
  std::vector<double> coords;
  coords.reserve(3 * points.size());
  for (size_t i = 0; i < points.size(); i++) {
    for (double x : points[i]) {
      if (!std::isfinite(x)) {
        throw std::invalid_argument(name + ": point " + std::to_string(i) + " is not finite");
      }
      coords.push_back(x);
    }
  }

  // no 'Qt': qhull's default merging ('C-0' in 3-d) leaves coplanar triangles merged into one
  // facet; 'TAn' stops after n points added to the initial simplex (MuJoCo's maxhullvert)
  std::string options = "qhull";
  if (maxhullvert > 0) options += " TA" + std::to_string(maxhullvert - 4);
  QhullRun run;
  qhT* qh = &run.qh;
  int exitcode = qh_new_qhull(qh, 3, static_cast<int>(points.size()), coords.data(), False,
                              options.data(), nullptr, run.err);
  if (exitcode) {
    std::string why = exitcode == qh_ERRsingular
                          ? "the points are coplanar or collinear"
                          : "qhull failed (exit code " + std::to_string(exitcode) + ")";
    throw std::runtime_error(name + ": no convex hull: " + why + " (" + run.first_message() + ")");
  }

  // the hull's vertices, in the order of the input points
  facetT* facet;
  vertexT *vertex, **vertexp;
  std::vector<std::pair<int, vertexT*>> by_point;
  std::vector<char> seen(qh->vertex_id, 0);  // by qhull vertex id
  FORALLfacets {
    if (facet->visible) continue;
    FOREACHvertex_(facet->vertices) {
      if (!seen[vertex->id]) by_point.push_back({qh_pointid(qh, vertex->point), vertex});
      seen[vertex->id] = 1;
    }
  }
  std::sort(by_point.begin(), by_point.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Hull hull;
  std::vector<int> local(qh->vertex_id, -1);  // qhull vertex id -> hull vertex
  for (const auto& [pid, v] : by_point) {
    local[v->id] = hull.nvert();
    hull.point_ids.push_back(pid);
    hull.vertices.push_back(points[pid]);
  }

  // faces: the vertices of each (merged) facet sorted by angle about their centroid in the plane
  // frame (u, v) with u x v = normal, so counter-clockwise about the outward normal
  std::vector<std::vector<int>> neighbours(hull.nvert());
  FORALLfacets {
    if (facet->visible) continue;
    const double* n = facet->normal;
    double u[3], v[3], centre[3] = {0, 0, 0};
    plane_basis(n, u, v);
    std::vector<int> ids;
    FOREACHvertex_(facet->vertices) ids.push_back(local[vertex->id]);
    for (int id : ids) {
      for (int k = 0; k < 3; k++) centre[k] += hull.vertices[id][k] / double(ids.size());
    }
    std::vector<std::pair<double, int>> by_angle;
    for (int id : ids) {
      double d[3];
      for (int k = 0; k < 3; k++) d[k] = hull.vertices[id][k] - centre[k];
      by_angle.push_back({std::atan2(dot(d, v), dot(d, u)), id});
    }
    std::sort(by_angle.begin(), by_angle.end());
    hull.normals.push_back({n[0], n[1], n[2]});
    hull.polyadr.push_back(static_cast<int>(hull.polyvert.size()));
    hull.polynum.push_back(static_cast<int>(by_angle.size()));
    for (size_t i = 0; i < by_angle.size(); i++) {
      int a = by_angle[i].second, b = by_angle[(i + 1) % by_angle.size()].second;
      hull.polyvert.push_back(a);
      neighbours[a].push_back(b);  // the polygon's edges are the hull's edges
      neighbours[b].push_back(a);
    }
  }

  // vertex adjacency: each edge was met once from each of its two faces
  for (int i = 0; i < hull.nvert(); i++) {
    std::vector<int>& nb = neighbours[i];
    std::sort(nb.begin(), nb.end());
    nb.erase(std::unique(nb.begin(), nb.end()), nb.end());
    hull.adjadr.push_back(static_cast<int>(hull.adj.size()));
    hull.adjnum.push_back(static_cast<int>(nb.size()));
    hull.adj.insert(hull.adj.end(), nb.begin(), nb.end());
  }
  return hull;
}

int add_mesh(Model& m, const Hull& hull) {
  int nvert = hull.nvert(), npoly = hull.npoly();
  if (nvert < 4 || hull.adjadr.size() != size_t(nvert) || hull.adjnum.size() != size_t(nvert) ||
      hull.polyadr.size() != size_t(npoly) || hull.polynum.size() != size_t(npoly)) {
    throw std::invalid_argument("add_mesh: inconsistent hull (" + std::to_string(nvert) +
                                " vertices, " + std::to_string(npoly) + " faces)");
  }
  int id = static_cast<int>(m.mesh_vertadr.size());
  int adj0 = static_cast<int>(m.mesh_vertadj.size());
  int polyvert0 = static_cast<int>(m.mesh_polyvert.size());
  m.mesh_vertadr.push_back(static_cast<int>(m.mesh_vert.size() / 3));
  m.mesh_vertnum.push_back(nvert);
  m.mesh_polyadr.push_back(static_cast<int>(m.mesh_polyvertadr.size()));
  m.mesh_polynum.push_back(npoly);
  for (int v = 0; v < nvert; v++) {
    m.mesh_vert.insert(m.mesh_vert.end(), hull.vertices[v].begin(), hull.vertices[v].end());
    m.mesh_vertadjadr.push_back(adj0 + hull.adjadr[v]);
    m.mesh_vertadjnum.push_back(hull.adjnum[v]);
  }
  m.mesh_vertadj.insert(m.mesh_vertadj.end(), hull.adj.begin(), hull.adj.end());
  for (int f = 0; f < npoly; f++) {
    m.mesh_polynormal.insert(m.mesh_polynormal.end(), hull.normals[f].begin(),
                             hull.normals[f].end());
    m.mesh_polyvertadr.push_back(polyvert0 + hull.polyadr[f]);
    m.mesh_polyvertnum.push_back(hull.polynum[f]);
  }
  m.mesh_polyvert.insert(m.mesh_polyvert.end(), hull.polyvert.begin(), hull.polyvert.end());
  // the counts, as finalize sets them
  m.nmesh = static_cast<int>(m.mesh_vertadr.size());
  m.nmeshvert = static_cast<int>(m.mesh_vert.size() / 3);
  m.nmeshadj = static_cast<int>(m.mesh_vertadj.size());
  m.nmeshpoly = static_cast<int>(m.mesh_polyvertadr.size());
  m.nmeshpolyvert = static_cast<int>(m.mesh_polyvert.size());
  return id;
}

}  // namespace phx
