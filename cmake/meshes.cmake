# Mesh files and their convex hulls: assimp reads STL, OBJ and DAE files, qhull's reentrant
# library (qhull_r) computes the hulls. Both are Debian packages (scripts/setup.sh); included by
# CMakeLists.txt once the phalanx target exists.
find_package(Qhull REQUIRED CONFIG)
find_package(assimp REQUIRED CONFIG)

target_sources(phalanx PRIVATE ${PROJECT_SOURCE_DIR}/host/mesh.cpp)
target_link_libraries(phalanx PRIVATE Qhull::qhull_r assimp::assimp)
