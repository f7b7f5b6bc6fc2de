# gpurunCudaLibs.cmake: cuDNN and NCCL ship next to the CUDA toolkit on these machines (not as
# CMake packages); this finds them and defines the imported targets gpurun_cudnn and gpurun_nccl.
# Used by the build (kernels/CMakeLists.txt) and by the installed package (gpurunConfig.cmake),
# whose CUDA libraries link them. Needs find_package(CUDAToolkit) first.
function(gpurun_import_cuda_library target what header library)
  if(TARGET ${target})
    return()
  endif()
  string(TOUPPER ${library} _up)
  find_path(GPURUN_${_up}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GPURUN_${_up}_LIBRARY ${library} HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT GPURUN_${_up}_INCLUDE_DIR OR NOT GPURUN_${_up}_LIBRARY)
    message(FATAL_ERROR "gpurun: ${what} (${header}, lib${library}) was not found next to the CUDA "
      "toolkit; set GPURUN_${_up}_INCLUDE_DIR/GPURUN_${_up}_LIBRARY or build with "
      "-DGPURUN_ENABLE_CUDA=OFF")
  endif()
  add_library(${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION ${GPURUN_${_up}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GPURUN_${_up}_INCLUDE_DIR})
endfunction()

gpurun_import_cuda_library(gpurun_cudnn cuDNN cudnn.h cudnn)
gpurun_import_cuda_library(gpurun_nccl NCCL nccl.h nccl)
