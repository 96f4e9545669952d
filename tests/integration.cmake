# SPDX-License-Identifier: Apache-2.0
# Integration tests: the real sbx-helper, run by the invoking (unprivileged)
# user, attacked from inside the sandbox. Each file is one ctest test.
find_program(SBX_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED)
set(SBX_TEST_ENV
  "SBX_HELPER=$<TARGET_FILE:sbx-helper>"
  "SBX_PROBE=$<TARGET_FILE:sbx-probe>"
  "SBX_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  "SBX_SERVE_DRIVER=$<TARGET_FILE:test_serve>"
  "SBX_PYTHON_PROTO=${PROJECT_BINARY_DIR}/python"
  "PYTHONDONTWRITEBYTECODE=1"
  "SBX_BUILD_DIR=${PROJECT_BINARY_DIR}")
if(SBX_WITH_SERVER)
  list(APPEND SBX_TEST_ENV "SBX_SBXD=$<TARGET_FILE:sbxd>" "SBX_CLI=$<TARGET_FILE:sbxctl>"
       # one long-lived libsbxclient fleet handle, driven over a pipe (sbxd.fleet)
       "SBX_CLIENT_FLEET=$<TARGET_FILE:test_client_fleet>")
endif()
if(SBX_SANITIZE)
  list(APPEND SBX_TEST_ENV "SBX_SANITIZE=1")
endif()

file(GLOB SBX_PY_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_*.py)
foreach(t ${SBX_PY_TESTS})
  get_filename_component(name ${t} NAME_WE)
  string(REPLACE "test_" "" name ${name})
  # test_sbxd_*.py exercise the server: ctest names sbxd.<what>.
  set(prefix helper)
  if(name MATCHES "^sbxd_")
    if(NOT SBX_WITH_SERVER)
      continue()
    endif()
    string(REPLACE "sbxd_" "" name ${name})
    set(prefix sbxd)
  endif()
  add_test(NAME ${prefix}.${name} COMMAND ${SBX_PYTHON} ${t} -v)
  set_tests_properties(${prefix}.${name} PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 600)
  # These assert that nothing of this user's is left (processes, cgroups,
  # files): another test running beside them would look like a leak.
  if(prefix STREQUAL "sbxd" OR name STREQUAL "cleanup")
    set_tests_properties(${prefix}.${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()

add_executable(test_serve integration/test_serve.c)
target_link_libraries(test_serve PRIVATE sbx_common sbx_check)
add_test(NAME helper.serve COMMAND test_serve)
set_tests_properties(helper.serve PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 300)

# The server's tests once more with sbxd under valgrind (leaks and memory
# errors fail them through sbxd's exit status).
if(SBX_WITH_SERVER)
  find_program(SBX_VALGRIND valgrind)
  if(SBX_VALGRIND AND NOT SBX_SANITIZE)
    foreach(t calls lifecycle preauth shares)
      add_test(NAME sbxd.valgrind.${t}
               COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sbxd_${t}.py -v)
      set_tests_properties(sbxd.valgrind.${t} PROPERTIES
        ENVIRONMENT "${SBX_TEST_ENV};SBX_SBXD_VALGRIND=1" TIMEOUT 900 RUN_SERIAL TRUE)
    endforeach()
  endif()
endif()
