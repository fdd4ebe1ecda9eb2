# MuJoCo's compiled models into Phalanx (host/mujoco_model.cpp, phx::from_mujoco, and
# phalanx.from_mujoco in bindings/mujoco.cpp). Optional: built when MuJoCo's headers and library
# are found, in PHX_MUJOCO_DIR (a directory with include/mujoco/mujoco.h and libmujoco.so*) or
# else in the `mujoco` Python package of Python_EXECUTABLE (the wheel ships both). Sets
# PHX_HAVE_MUJOCO (ON/OFF) for the directories below.
#
# The conversion only reads mjModel's fields: the Python extension calls no MuJoCo function and
# is linked --as-needed, so it does not depend on libmujoco at run time (phalanx.from_mujoco
# checks that the imported mujoco has the version of the headers). The C++ tests link libmujoco
# (to compile models) with a build rpath to its directory.

set(PHX_MUJOCO_DIR "" CACHE PATH
    "MuJoCo directory (include/mujoco/mujoco.h, libmujoco.so*); empty: the mujoco Python package")
set(PHX_HAVE_MUJOCO OFF)

set(_phx_mujoco_dir "${PHX_MUJOCO_DIR}")
if(NOT _phx_mujoco_dir)
  if(NOT Python_EXECUTABLE)
    find_package(Python COMPONENTS Interpreter QUIET)
  endif()
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c "import os, mujoco; print(os.path.dirname(mujoco.__file__))"
      OUTPUT_VARIABLE _phx_mujoco_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
      RESULT_VARIABLE _phx_mujoco_result)
    if(NOT _phx_mujoco_result EQUAL 0)
      set(_phx_mujoco_dir "")
    endif()
  endif()
endif()

set(_phx_mujoco_lib "")
if(_phx_mujoco_dir AND EXISTS "${_phx_mujoco_dir}/include/mujoco/mujoco.h")
  file(GLOB _phx_mujoco_libs "${_phx_mujoco_dir}/libmujoco.so*"
       "${_phx_mujoco_dir}/lib/libmujoco.so*")
  if(_phx_mujoco_libs)
    list(SORT _phx_mujoco_libs)
    list(GET _phx_mujoco_libs -1 _phx_mujoco_lib)  # the fully versioned name
  endif()
endif()

if(_phx_mujoco_lib)
  set(PHX_HAVE_MUJOCO ON)
  get_filename_component(_phx_mujoco_libdir "${_phx_mujoco_lib}" DIRECTORY)
  message(STATUS "phalanx: MuJoCo found in ${_phx_mujoco_dir}; building from_mujoco")
  add_library(phx_mujoco SHARED IMPORTED)
  set_target_properties(phx_mujoco PROPERTIES
    IMPORTED_LOCATION "${_phx_mujoco_lib}"
    IMPORTED_NO_SONAME OFF)
  # SYSTEM: MuJoCo's headers are not held to -Wall -Wextra -Werror
  target_include_directories(phx_mujoco SYSTEM INTERFACE "${_phx_mujoco_dir}/include")

  target_sources(phalanx PRIVATE ${PROJECT_SOURCE_DIR}/host/mujoco_model.cpp)
  target_compile_definitions(phalanx PUBLIC PHX_HAVE_MUJOCO=1)
  target_link_libraries(phalanx PUBLIC phx_mujoco)

  if(TARGET _phalanx)
    target_sources(_phalanx PRIVATE ${PROJECT_SOURCE_DIR}/bindings/mujoco.cpp)
    # no run-time dependency on libmujoco (nothing of it is called; the mjModel comes from the
    # mujoco package the caller imported)
    target_link_options(_phalanx PRIVATE -Wl,--as-needed)
  endif()
else()
  message(STATUS "phalanx: MuJoCo not found (set PHX_MUJOCO_DIR or install the mujoco Python "
                 "package); building without from_mujoco")
endif()
