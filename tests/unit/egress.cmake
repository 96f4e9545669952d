# SPDX-License-Identifier: Apache-2.0
# The egress proxy's pure parts (server/egress/, library sbx_egress_parse).
foreach(t addr bucket head)
  add_executable(test_egress_${t} test_egress_${t}.c)
  target_link_libraries(test_egress_${t} PRIVATE sbx_egress_parse sbx_check)
  add_test(NAME unit.egress.${t} COMMAND test_egress_${t})
endforeach()

# What the three proxy tests below share: servers, sockets, runs, Status.
add_library(sbx_egress_harness STATIC egress_harness.c)
target_include_directories(sbx_egress_harness PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
# The harness and the tests read the audit lines the proxy writes, and
# Status and the manifest as the run manager puts the records on the wire
# (runs/runs_egress.c).
target_link_libraries(sbx_egress_harness PUBLIC sbx_egress sbx_audit sbx_runs)

# The proxy itself against real sockets and a real local TCP server.
add_executable(test_egress_proxy test_egress_proxy.c)
target_link_libraries(test_egress_proxy PRIVATE sbx_egress_harness sbx_check)
add_test(NAME unit.egress.proxy COMMAND test_egress_proxy)
set_tests_properties(unit.egress.proxy PROPERTIES TIMEOUT 60)

# What a run's traffic costs the proxy stays bounded: each case an attack
# that must fail (see the file).
add_executable(test_egress_bounded test_egress_bounded.c)
target_link_libraries(test_egress_bounded PRIVATE sbx_egress_harness sbx_check)
foreach(c oob pipes early share hostwide audit lookups)
  add_test(NAME unit.egress.bounded_${c} COMMAND test_egress_bounded ${c})
  set_tests_properties(unit.egress.bounded_${c} PROPERTIES TIMEOUT 60)
endforeach()

# The proxy's fair shares between identities and its descriptor budget.
add_executable(test_egress_share test_egress_share.c)
target_link_libraries(test_egress_share PRIVATE sbx_egress_harness sbx_check)
foreach(c perminute bytes lines fds)
  add_test(NAME unit.egress.share_${c} COMMAND test_egress_share ${c})
  set_tests_properties(unit.egress.share_${c} PROPERTIES TIMEOUT 60)
endforeach()
