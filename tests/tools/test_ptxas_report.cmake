# Checks cmake/ptxas_report.cmake on ptxas output written here: a kernel's spills are its own
# plus those of the functions listed after it up to the next kernel or the end of its file, its
# stack is the cumulative stack size, its occupancy follows from its registers, a comment under a
# kernel that spills names the functions that spill most, largest first, and a kernel over its
# budget fails the report, with those names, while one at its budget passes.
#
#     cmake -DREPORT=cmake/ptxas_report.cmake -DDIR=/tmp/scratch -P test_ptxas_report.cmake
set(step "_ZN3phx4cuda10env_kernelINS_10StepKernelIfEEfEEvT_iPT0_PiNS_11ScratchSizeENS0_9PlacementE")
set(mass "_ZN3phx4cuda10env_kernelINS_16MassMatrixKernelIfEEfEEvT_iPT0_PiNS_11ScratchSizeENS0_9PlacementE")
set(info "ptxas info    :")
file(REMOVE_RECURSE ${DIR})
# a.ptxas: the step kernel and two functions it calls, then the mass-matrix kernel, which calls
# none; b.ptxas: the mass-matrix kernel again after a file whose last kernel has a callee
file(WRITE ${DIR}/a.ptxas
"${info} 988 bytes gmem
${info} Compiling entry function '${step}' for 'sm_80'
${info} Function properties for ${step}
    1200 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
${info} Used 255 registers, used 0 barriers, 1500 bytes cumulative stack size, 1604 bytes cmem[0]
${info} Compile time = 10.0 ms
${info} Function properties for _ZN3phx7collideIfEEiRKNS_9GeomShapeIT_EE
    300 bytes stack frame, 40 bytes spill stores, 56 bytes spill loads
${info} Function properties for __internal_trig_reduction_slowpathd
    0 bytes stack frame, 0 bytes spill stores, 4 bytes spill loads
${info} Compiling entry function '${mass}' for 'sm_80'
${info} Function properties for ${mass}
    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
${info} Used 96 registers, used 0 barriers, 32 bytes cumulative stack size, 1604 bytes cmem[0]
")
file(WRITE ${DIR}/b.ptxas
"${info} Compiling entry function '${mass}' for 'sm_90'
${info} Function properties for ${mass}
    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
${info} Used 128 registers, used 0 barriers, 40 bytes cumulative stack size, 1604 bytes cmem[0]
")

function(report budget_lines result_var out_var)
  file(WRITE ${DIR}/budgets.txt "default 0 4096\n${budget_lines}")
  execute_process(COMMAND ${CMAKE_COMMAND} -DDIR=${DIR} -DOUT=${DIR}/report.txt
                          -DBUDGETS=${DIR}/budgets.txt -DFAST_COMPILE=OFF -P ${REPORT}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  set(${result_var} ${rc} PARENT_SCOPE)
  set(${out_var} "${err}" PARENT_SCOPE)
endfunction()

# spills 8 + 12 + 40 + 56 + 4 = 120 bytes, stack 1500: at the budget, the report passes
report("StepKernel<float> 120 1500\n" rc err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "at its budget, the report failed: ${err}")
endif()
file(STRINGS ${DIR}/report.txt lines REGEX "^sm_")
set(expected
    "sm_80  255  48  72  1500  8/64  StepKernel<float>"
    "sm_80  96  0  0  32  20/64  MassMatrixKernel<float>"
    "sm_90  128  0  0  40  16/64  MassMatrixKernel<float>")
if(NOT lines STREQUAL expected)
  message(FATAL_ERROR "report lines\n  ${lines}\nexpected\n  ${expected}")
endif()
set(where "collide (96), kernel (20), __internal_trig_reduction_slowpathd (4)")
file(STRINGS ${DIR}/report.txt lines REGEX "^#   spills in ")
if(NOT lines STREQUAL "#   spills in ${where}")
  message(FATAL_ERROR "the report's spilling functions\n  ${lines}\nexpected\n  ${where}")
endif()
# one byte of spills or of stack over: the report fails and names the kernel
foreach(budget "StepKernel<float> 119 1500" "StepKernel<float> 120 1499")
  report("${budget}\n" rc err)
  string(FIND "${err}" "spills in ${where}" named)
  if(rc EQUAL 0 OR NOT err MATCHES "sm_80 StepKernel<float>: 120 spill bytes" OR named EQUAL -1)
    message(FATAL_ERROR "over the budget '${budget}', the report gave ${rc}: ${err}")
  endif()
endforeach()
file(REMOVE_RECURSE ${DIR})
