# Writes ${OUT}: the commit the build is of, its build type and whether it
# has the CUDA backend, for --version. Run at every build (base/CMakeLists.txt),
# so the commit is never the one of the last configure; the file is rewritten
# only when it changes, so nothing recompiles otherwise.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
if(failed OR commit STREQUAL "")
  set(commit "unknown")  # a tree without .git (an archive)
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(commit "${commit}+changes")
  endif()
endif()
if(BUILD_TYPE STREQUAL "")
  set(BUILD_TYPE "none")
endif()
set(text "// Written by cmake/version_info.cmake at each build.\n#define RECKON_COMMIT \"${commit}\"\n#define RECKON_BUILD_TYPE \"${BUILD_TYPE}\"\n#define RECKON_BUILT_WITH_CUDA ${CUDA}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
