# Runs a fuzz replay with its temporary directory under DIR and its working directory DIR/work,
# and checks that it removed what it made and nothing else: DIR/work and its marker file are
# there afterwards, and nothing besides.
#
#     cmake -DREPLAY=replay_fuzz_mesh -DINPUTS="a;b" -DDIR=/tmp/scratch -P replay_cleanup.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR}/work)
file(WRITE ${DIR}/work/marker "kept\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${DIR} ${REPLAY} ${INPUTS}
                WORKING_DIRECTORY ${DIR}/work RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${REPLAY} exited with ${rc}")
endif()
file(GLOB left RELATIVE ${DIR} ${DIR}/*)
if(NOT left STREQUAL "work" OR NOT EXISTS ${DIR}/work/marker)
  message(FATAL_ERROR "after ${REPLAY}, ${DIR} holds '${left}' (expected: work, with its marker)")
endif()
file(REMOVE_RECURSE ${DIR})
