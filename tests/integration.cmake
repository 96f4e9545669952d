# SPDX-License-Identifier: Apache-2.0
# Integration tests: the real sbx-helper, run by the invoking (unprivileged)
# user, attacked from inside the sandbox. Each file is one ctest test.
find_program(SBX_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED)
set(SBX_TEST_ENV
  "SBX_HELPER=$<TARGET_FILE:sbx-helper>"
  "SBX_PROBE=$<TARGET_FILE:sbx-probe>"
  "SBX_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  "SBX_SERVE_DRIVER=$<TARGET_FILE:test_serve>"
  "SBX_NO_PACKET=$<TARGET_FILE:sbx-no-packet>"
  "SBX_PYTHON_PROTO=${PROJECT_BINARY_DIR}/python"
  "PYTHONDONTWRITEBYTECODE=1"
  "SBX_BUILD_DIR=${PROJECT_BINARY_DIR}")
if(SBX_WITH_SERVER)
  list(APPEND SBX_TEST_ENV "SBX_SBXD=$<TARGET_FILE:sbxd>" "SBX_CLI=$<TARGET_FILE:sbxctl>"
       # one long-lived libsbxclient fleet handle, driven over a pipe (sbxd.fleet)
       "SBX_CLIENT_FLEET=$<TARGET_FILE:test_client_fleet>")
endif()
if(SBX_SANITIZE)
  # SBX_SANITIZER says which (address or thread) for the few tests whose
  # property the sanitizer itself changes.
  list(APPEND SBX_TEST_ENV "SBX_SANITIZE=1" "SBX_SANITIZER=${sbx_sanitize}")
endif()

# The tests that run alone (see RUN_SERIAL below), and why:
# - a scan of this user's processes, mounts, /tmp or run cgroups (any that
#   are left, not only the test's own): cleanup (helper), sbxd_calls,
#   sbxd_lifecycle (stale_run_cgroups(), /proc/self/mountinfo);
# - an attack that fills or measures something the user or the machine
#   shares (connections, descriptors, fs.file-max, per-uid kernel counters,
#   CPU quotas and shares, RSS under a storm), where a neighbour would
#   change what is measured: sbxd_conns, sbxd_storm, sbxd_shortage,
#   sbxd_metrics_hostile, sbxd_egress_fair_share, sbxd_egress_bounded,
#   sbxd_host_uids, sbxd_kernel_pools, sbxd_limits, sbxd_exec_options (the
#   pipe sizes a caller gets under the user's fs.pipe-user-pages-soft).
# The valgrind runs of sbxd_calls and sbxd_lifecycle below, too.
set(SBX_SERIAL_TESTS cleanup sbxd_calls sbxd_lifecycle sbxd_kernel_pools sbxd_limits
  sbxd_conns sbxd_storm sbxd_shortage sbxd_metrics_hostile sbxd_egress_fair_share
  sbxd_egress_bounded sbxd_host_uids sbxd_exec_options)

file(GLOB SBX_PY_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_*.py)
foreach(t ${SBX_PY_TESTS})
  get_filename_component(name ${t} NAME_WE)
  string(REPLACE "test_" "" name ${name})
  set(file_name ${name})
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
  # Alone (RUN_SERIAL): the tests whose assertions see the whole user, so
  # that another test beside them would look like a leak or a cost of
  # theirs. Every other test scopes its leak checks to markers and a state
  # directory of its own (processes_with("sleep 4242.5"), the Server's
  # mkdtemp dir) and runs beside other tests (packaging/test.sh: ctest -j3,
  # -j2 under a sanitizer): it asserts as much as alone, and a leak of its is still seen by the next test that
  # runs alone and scans the whole user.
  if(file_name IN_LIST SBX_SERIAL_TESTS)
    set_tests_properties(${prefix}.${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()

# sbxd.egress_deny runs a sbxd under it: no packet socket anywhere below.
add_executable(sbx-no-packet integration/no_packet.c)
target_link_libraries(sbx-no-packet PRIVATE PkgConfig::SECCOMP)

add_executable(test_serve integration/test_serve.c)
target_link_libraries(test_serve PRIVATE sbx_common sbx_check)
# Preloaded into a helper by test_serve's dropped-claim check: its first
# claim's memfd fails.
add_library(sbx_test_claim_fail MODULE integration/claim_fail_shim.c)
target_link_libraries(sbx_test_claim_fail PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME helper.serve COMMAND test_serve)
set_tests_properties(helper.serve PROPERTIES ENVIRONMENT
  "${SBX_TEST_ENV};SBX_CLAIM_FAIL_SHIM=$<TARGET_FILE:sbx_test_claim_fail>" TIMEOUT 300)

# The server's tests once more with sbxd under valgrind (leaks and memory
# errors fail them through sbxd's exit status). Alone only where the test
# itself must be (SBX_SERIAL_TESTS): preauth's and shares' checks are their
# own server's, so they run beside another test as their plain runs do.
if(SBX_WITH_SERVER)
  find_program(SBX_VALGRIND valgrind)
  if(SBX_VALGRIND AND NOT SBX_SANITIZE)
    foreach(t calls lifecycle preauth shares)
      add_test(NAME sbxd.valgrind.${t}
               COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sbxd_${t}.py -v)
      set_tests_properties(sbxd.valgrind.${t} PROPERTIES
        ENVIRONMENT "${SBX_TEST_ENV};SBX_SBXD_VALGRIND=1" TIMEOUT 900)
      if(sbxd_${t} IN_LIST SBX_SERIAL_TESTS)
        set_tests_properties(sbxd.valgrind.${t} PROPERTIES RUN_SERIAL TRUE)
      endif()
    endforeach()
  endif()
endif()
