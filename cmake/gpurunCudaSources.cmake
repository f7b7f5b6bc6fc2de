# gpurunCudaSources.cmake: gpurun_cuda_sources(TARGET FILE.cu...) adds CUDA sources to a target.
# With nvcc they are CUDA; in the stand-in build (GPURUN_CUDA_STANDIN) the same files are compiled
# as C++ against tests/standin's headers, which run the kernels on the CPU.
function(gpurun_cuda_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(GPURUN_CUDA_STANDIN)
    set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX)  # CMake adds -x c++
  endif()
endfunction()
