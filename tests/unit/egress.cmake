# SPDX-License-Identifier: Apache-2.0
# The egress proxy's pure parts (server/egress/, library sbx_egress_parse).
foreach(t addr bucket head)
  add_executable(test_egress_${t} test_egress_${t}.c)
  target_link_libraries(test_egress_${t} PRIVATE sbx_egress_parse sbx_check)
  add_test(NAME unit.egress.${t} COMMAND test_egress_${t})
endforeach()

# The proxy itself against real sockets and a real local TCP server.
add_executable(test_egress_proxy test_egress_proxy.c)
target_link_libraries(test_egress_proxy PRIVATE sbx_egress sbx_check)
add_test(NAME unit.egress.proxy COMMAND test_egress_proxy)
set_tests_properties(unit.egress.proxy PROPERTIES TIMEOUT 60)
