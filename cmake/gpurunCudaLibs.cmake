# gpurunCudaLibs.cmake: cuDNN and NCCL ship next to the CUDA toolkit on these machines (not as
# CMake packages); this finds them and defines the imported targets gpurun_cudnn and gpurun_nccl.
# Used by the build (kernels/CMakeLists.txt) and by the installed package (gpurunConfig.cmake),
# whose CUDA libraries link them. Needs find_package(CUDAToolkit) first.
if(NOT TARGET gpurun_cudnn)
  find_path(GPURUN_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GPURUN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT GPURUN_CUDNN_INCLUDE_DIR OR NOT GPURUN_CUDNN_LIBRARY)
    message(FATAL_ERROR "gpurun: cuDNN (cudnn.h, libcudnn) was not found next to the CUDA toolkit; "
      "set GPURUN_CUDNN_INCLUDE_DIR/GPURUN_CUDNN_LIBRARY or build with -DGPURUN_ENABLE_CUDA=OFF")
  endif()
  add_library(gpurun_cudnn UNKNOWN IMPORTED GLOBAL)
  set_target_properties(gpurun_cudnn PROPERTIES IMPORTED_LOCATION ${GPURUN_CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GPURUN_CUDNN_INCLUDE_DIR})
endif()
if(NOT TARGET gpurun_nccl)
  find_path(GPURUN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GPURUN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT GPURUN_NCCL_INCLUDE_DIR OR NOT GPURUN_NCCL_LIBRARY)
    message(FATAL_ERROR "gpurun: NCCL (nccl.h, libnccl) was not found next to the CUDA toolkit; "
      "set GPURUN_NCCL_INCLUDE_DIR/GPURUN_NCCL_LIBRARY or build with -DGPURUN_ENABLE_CUDA=OFF")
  endif()
  add_library(gpurun_nccl UNKNOWN IMPORTED GLOBAL)
  set_target_properties(gpurun_nccl PROPERTIES IMPORTED_LOCATION ${GPURUN_NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GPURUN_NCCL_INCLUDE_DIR})
endif()
