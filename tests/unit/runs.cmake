# SPDX-License-Identifier: Apache-2.0
# The run manager (server/runs/).
add_executable(test_runs_state test_runs_state.c)
target_link_libraries(test_runs_state PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_state COMMAND test_runs_state)

add_executable(test_runs_registry test_runs_registry.c)
target_link_libraries(test_runs_registry PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_registry COMMAND test_runs_registry)

add_executable(test_runs_util test_runs_util.c)
target_link_libraries(test_runs_util PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_util COMMAND test_runs_util)

add_executable(test_runs_lease test_runs_lease.c)
target_link_libraries(test_runs_lease PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_lease COMMAND test_runs_lease)

add_executable(test_runs_capacity test_runs_capacity.c)
target_link_libraries(test_runs_capacity PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_capacity COMMAND test_runs_capacity)

add_executable(test_runs_idem test_runs_idem.c)
target_link_libraries(test_runs_idem PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_idem COMMAND test_runs_idem)

add_executable(test_runs_closer test_runs_closer.c)
target_link_libraries(test_runs_closer PRIVATE sbx_runs sbx_check)
add_test(NAME unit.runs_closer COMMAND test_runs_closer)

# The connect watch's kernel filter (sbx-helper's) against sbxd's reading
# of what it passes, on the same packets.
add_executable(test_deny_packet test_deny_packet.c)
target_link_libraries(test_deny_packet PRIVATE sbx_runs sbx_helper_parts sbx_check)
add_test(NAME unit.deny_packet COMMAND test_deny_packet)
