# gpurunCudaSources.cmake: gpurun_cuda_sources(TARGET FILE.cu...) adds CUDA sources to a target.
# With nvcc they are CUDA; in the stand-in build (GPURUN_CUDA_STANDIN) the same files are compiled
# as C++ against tests/standin's headers, which run the kernels on the CPU.
function(gpurun_cuda_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(GPURUN_CUDA_STANDIN)
    set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX)  # CMake adds -x c++
  endif()
  gpurun_sanitize_sources(${ARGN})
endfunction()

# gpurun_sanitize(TARGET...) and gpurun_sanitize_sources(FILE...): GPURUN_SANITIZE's flags
# (GPURUN_SANITIZE_FLAGS, set by the top-level CMakeLists.txt) on the GPU path's targets and
# sources only; nothing without GPURUN_SANITIZE.
function(gpurun_sanitize)
  if(GPURUN_SANITIZE)
    foreach(t ${ARGN})
      target_compile_options(${t} PRIVATE ${GPURUN_SANITIZE_FLAGS})
    endforeach()
  endif()
endfunction()
function(gpurun_sanitize_sources)
  if(GPURUN_SANITIZE)
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS ${GPURUN_SANITIZE_FLAGS})
  endif()
endfunction()
