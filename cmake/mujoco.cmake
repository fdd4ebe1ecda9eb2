# MuJoCo: its compiler loads MJCF (host/mjcf.cpp: mj_loadXML, then phx::from_mujoco) and its
# compiled models convert into Phalanx (host/mujoco_model.cpp, phalanx.from_mujoco in
# bindings/mujoco.cpp). Optional: used when MuJoCo's headers and library are found, in
# PHX_MUJOCO_DIR (a directory with include/mujoco/mujoco.h and libmujoco.so*) or else in the
# `mujoco` Python package of Python_EXECUTABLE (the wheel ships both). Without it Phalanx builds
# and load_mjcf throws. Sets PHX_HAVE_MUJOCO (ON/OFF) for the directories below.
#
# libphalanx, the C++ tests and the Python extension link libmujoco. The extension finds it at
# run time through its rpath: $ORIGIN/../mujoco (installed, site-packages/phalanx/_phalanx*.so
# beside site-packages/mujoco/libmujoco.so.*), then the directory it was built against (the
# build tree). phalanx.from_mujoco checks that the imported mujoco has the version of the
# headers.

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
  message(STATUS "phalanx: MuJoCo found in ${_phx_mujoco_dir}; building the MJCF loader and from_mujoco")
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
    # libmujoco of the installed mujoco package, else the one built against
    set_target_properties(_phalanx PROPERTIES
      BUILD_RPATH "\$ORIGIN/../mujoco;${_phx_mujoco_libdir}"
      INSTALL_RPATH "\$ORIGIN/../mujoco;${_phx_mujoco_libdir}")
  endif()
else()
  message(STATUS "phalanx: MuJoCo not found (set PHX_MUJOCO_DIR or install the mujoco Python "
                 "package); building without the MJCF loader and from_mujoco")
endif()
