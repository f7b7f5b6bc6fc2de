# gpurunOneDnn.cmake: oneDNN (Debian's libdnnl-dev) as the imported target gpurun_dnnl, when it is
# installed. Found by header and library rather than through dnnl-config.cmake: Debian's config
# also demands OpenCL's development files, which a CPU build does not use. Used by the build
# (kernels/CMakeLists.txt) and by the installed package (gpurunConfig.cmake).
if(NOT TARGET gpurun_dnnl)
  find_path(GPURUN_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(GPURUN_DNNL_LIBRARY dnnl)
  if(GPURUN_DNNL_INCLUDE_DIR AND GPURUN_DNNL_LIBRARY)
    add_library(gpurun_dnnl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(gpurun_dnnl PROPERTIES IMPORTED_LOCATION ${GPURUN_DNNL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${GPURUN_DNNL_INCLUDE_DIR})
  endif()
endif()
