# gpurunVersionGen.cmake: writes version_info.cc with the project's version and `git describe` of
# the source tree. Run at every build (cmake -P, from common/CMakeLists.txt), so the commit a
# binary names is the one it was built from, not the one the tree was configured at;
# configure_file leaves the output untouched when nothing changed, so nothing relinks then.
#   cmake -DSOURCE_DIR=... -DTEMPLATE=... -DOUTPUT=... -DGPURUN_VERSION=... -P gpurunVersionGen.cmake
set(GPURUN_GIT_DESCRIBE "")
find_program(_git git)
if(_git AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${_git}" -C "${SOURCE_DIR}" describe --always --dirty
    OUTPUT_VARIABLE GPURUN_GIT_DESCRIBE OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _rc ERROR_QUIET)
  if(NOT _rc EQUAL 0)
    set(GPURUN_GIT_DESCRIBE "")
  endif()
endif()
configure_file("${TEMPLATE}" "${OUTPUT}" @ONLY)
