# SPDX-License-Identifier: Apache-2.0
# The egress proxy's pure parts (server/egress/, library sbx_egress_parse).
foreach(t addr bucket head)
  add_executable(test_egress_${t} test_egress_${t}.c)
  target_link_libraries(test_egress_${t} PRIVATE sbx_egress_parse sbx_check)
  add_test(NAME unit.egress.${t} COMMAND test_egress_${t})
endforeach()
