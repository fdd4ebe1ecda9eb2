# Turns nvcc's `-Xptxas=-v` output (the *.ptxas files cmake/ptxas_capture.sh leaves under DIR)
# into one line per kernel and architecture:
#   sm_90  registers  spill_stores spill_loads  stack  occupancy  kernel
# and fails when a kernel spills or uses stack beyond its budget (BUDGETS). With FAST_COMPILE on
# (PHX_CUDA_FAST_COMPILE) the figures are those of unoptimised device code: the report says so
# and the budgets, which hold for the optimised build, are not checked.
#
# A kernel's figures include the functions it calls that ptxas compiled as functions of their
# own (the stages kept out of line, and any the compiler chose not to inline): ptxas lists them
# after the kernel, each with its spills, until the next kernel. The spills are the kernel's
# and theirs; the stack is ptxas' cumulative stack size, the kernel's frame and the deepest
# chain of its callees' frames. Under a kernel that spills, a comment line names the functions
# that spill most, with their bytes (stores plus loads; `kernel` for the kernel's own body), and
# so does the error of a kernel over its budget.
cmake_policy(SET CMP0054 NEW)  # quoted strings in if() are strings
file(GLOB_RECURSE inputs ${DIR}/*.ptxas)
list(SORT inputs)
set(lines "")
foreach(f IN LISTS inputs)
  file(STRINGS ${f} part)
  list(APPEND lines ${part} "end of ${f}")
endforeach()
# Theoretical occupancy (resident warps of an SM's 64) at the launch's 128 threads per block
# (cuda/launch.cuh) without shared memory. sm_80 and sm_90 both hold 65536 registers, 2048
# threads and 32 blocks per SM and give each warp registers in units of 256, so the resident
# warps follow from the registers alone, the same on both for the same count.
function(occupancy regs result)
  math(EXPR per_warp "(${regs} * 32 + 255) / 256 * 256")
  math(EXPR blocks "65536 / (${per_warp} * 4)")
  if(blocks GREATER 16)  # 2048 threads / 128
    set(blocks 16)
  endif()
  math(EXPR warps "${blocks} * 4")
  set(${result} "${warps}/64" PARENT_SCOPE)
endfunction()

# the budgets (BUDGETS, cmake/gpu_budgets.txt): kernel -> "spill_bytes stack_bytes", and the
# default for kernels not listed
file(STRINGS ${BUDGETS} budget_lines REGEX "^[^#]")
set(budget_names "")
foreach(b IN LISTS budget_lines)
  string(REGEX MATCH "^([^ ]+) +([0-9]+) +([0-9]+)" _ "${b}")
  list(APPEND budget_names "${CMAKE_MATCH_1}")
  set("budget_${CMAKE_MATCH_1}" "${CMAKE_MATCH_2};${CMAKE_MATCH_3}")
endforeach()
set(over "")

set(out "")
if(FAST_COMPILE)
  string(APPEND out "# FAST-COMPILE BUILD (PHX_CUDA_FAST_COMPILE=ON): device code compiled with "
                    "--Ofast-compile=max;\n# these are not the release figures and the budgets "
                    "were not checked\n")
endif()
string(APPEND out "# ptxas resource usage per kernel (from nvcc -Xptxas=-v); occupancy: theoretical, the\n")
string(APPEND out "# warps resident per SM at 128 threads per block (sm_80 and sm_90 alike)\n")
string(APPEND out "# arch  regs  spill_st  spill_ld  stack_bytes  occupancy  kernel\n")
# the kernel whose entry and callees are being read, written out at the next kernel or file
macro(finish_kernel)
  if(NOT kernel STREQUAL "" AND NOT regs STREQUAL "")
    execute_process(COMMAND c++filt ${kernel} OUTPUT_VARIABLE kernel OUTPUT_STRIP_TRAILING_WHITESPACE)
    # phx::cuda::env_kernel<phx::StepKernel<float>, float>(...) -> StepKernel<float>, and
    # env_kernel<phx::StepStage<phx::RolloutKernel<float> >, float>(...) ->
    # StepStage<RolloutKernel<float>>
    string(REGEX REPLACE ".*env_kernel<phx::([A-Za-z]+<.+>), (float|double)>\\(.*" "\\1" kernel
                         "${kernel}")
    if(kernel MATCHES "^[A-Za-z]+<")
      string(REPLACE "phx::" "" kernel "${kernel}")
      string(REPLACE " " "" kernel "${kernel}")
    endif()
    occupancy(${regs} warps)
    string(APPEND out "${arch}  ${regs}  ${spill_st}  ${spill_ld}  ${stack}  ${warps}  ${kernel}\n")
    spilling_functions(where)
    if(NOT where STREQUAL "")
      string(APPEND out "#   spills in ${where}\n")
    endif()
    set(budget "${budget_default}")
    list(FIND budget_names "${kernel}" listed)
    if(listed GREATER -1)
      set(budget "${budget_${kernel}}")
    endif()
    list(GET budget 0 max_spill)
    list(GET budget 1 max_stack)
    math(EXPR spill "${spill_st} + ${spill_ld}")
    if(spill GREATER max_spill OR stack GREATER max_stack)
      string(APPEND over "  ${arch} ${kernel}: ${spill} spill bytes (budget ${max_spill}), "
                         "${stack} stack bytes (budget ${max_stack})\n")
      if(NOT where STREQUAL "")
        string(APPEND over "    spills in ${where}\n")
      endif()
    endif()
  endif()
  set(kernel "")
  set(regs "")
  set(spills "")
endmacro()
# the kernel's largest spills as "name (bytes), ...": the first kMost of `spills` (entries
# "bytes;mangled name", the kernel's own first), named without namespace, template arguments or
# parameters
set(kMost 4)
function(spilling_functions result)
  set(entries "")
  set(own TRUE)
  foreach(e IN LISTS spills)
    string(REPLACE ":" ";" e "${e}")
    list(GET e 0 bytes)
    list(GET e 1 name)
    if(own)
      set(name kernel)
      set(own FALSE)
    endif()
    if(bytes GREATER 0)
      math(EXPR key "1000000000 + ${bytes}")  # fixed width, so that text order is numeric
      list(APPEND entries "${key}:${name}")
    endif()
  endforeach()
  list(SORT entries ORDER DESCENDING)
  set(text "")
  list(LENGTH entries n)
  if(n GREATER kMost)
    set(n ${kMost})
  endif()
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      list(GET entries ${i} e)
      string(REPLACE ":" ";" e "${e}")
      list(GET e 0 key)
      list(GET e 1 name)
      math(EXPR bytes "${key} - 1000000000")
      if(NOT name STREQUAL "kernel")
        execute_process(COMMAND c++filt ${name} OUTPUT_VARIABLE name
                        OUTPUT_STRIP_TRAILING_WHITESPACE)
        string(REGEX REPLACE "\\(.*" "" name "${name}")  # the parameters
        set(inner "")
        while(NOT inner STREQUAL name)  # template arguments, innermost first
          set(inner "${name}")
          string(REGEX REPLACE "<[^<>]*>" "" name "${name}")
        endwhile()
        string(REGEX REPLACE ".* " "" name "${name}")  # the return type
        string(REPLACE "phx::" "" name "${name}")
      endif()
      if(NOT text STREQUAL "")
        string(APPEND text ", ")
      endif()
      string(APPEND text "${name} (${bytes})")
    endforeach()
  endif()
  set(${result} "${text}" PARENT_SCOPE)
endfunction()
set(kernel "")
set(regs "")
set(spills "")
foreach(line IN LISTS lines)
  if(line MATCHES "Compiling entry function '([^']+)' for '([^']+)'")
    set(next_kernel ${CMAKE_MATCH_1})
    set(next_arch ${CMAKE_MATCH_2})
    finish_kernel()  # which sets CMAKE_MATCH_* of its own
    set(kernel ${next_kernel})
    set(arch ${next_arch})
    set(spill_st 0)
    set(spill_ld 0)
  elseif(line MATCHES "^end of ")
    finish_kernel()
  elseif(line MATCHES "Function properties for ([^ ]+)")
    set(function ${CMAKE_MATCH_1})
  elseif(NOT kernel STREQUAL "" AND
         line MATCHES "[0-9]+ bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
    # the kernel's own frame line, then one per function it calls
    math(EXPR spill_st "${spill_st} + ${CMAKE_MATCH_1}")
    math(EXPR spill_ld "${spill_ld} + ${CMAKE_MATCH_2}")
    math(EXPR bytes "${CMAKE_MATCH_1} + ${CMAKE_MATCH_2}")
    list(APPEND spills "${bytes}:${function}")
  elseif(NOT kernel STREQUAL "" AND
         line MATCHES "Used ([0-9]+) registers.* ([0-9]+) bytes cumulative stack size")
    set(regs ${CMAKE_MATCH_1})
    set(stack ${CMAKE_MATCH_2})
  endif()
endforeach()
file(WRITE ${OUT} "${out}")
if(NOT over STREQUAL "" AND NOT FAST_COMPILE)
  message(FATAL_ERROR "GPU kernels over their resource budgets (cmake/gpu_budgets.txt; the "
                      "full report: ${OUT}):\n${over}")
endif()
