# SPDX-License-Identifier: Apache-2.0
# helper/: the pieces of sbx-helper a test can drive directly.
add_executable(test_helper_overlay test_helper_overlay.c)
target_link_libraries(test_helper_overlay PRIVATE sbx_helper_parts sbx_check)
add_test(NAME unit.helper.overlay COMMAND test_helper_overlay)

add_executable(test_helper_userns_diag test_helper_userns_diag.c)
target_link_libraries(test_helper_userns_diag PRIVATE sbx_helper_parts sbx_check)
add_test(NAME unit.helper.userns_diag COMMAND test_helper_userns_diag)

# What passes the filter, read as sbxd reads it: deny_packet.c is pure,
# compiled in here so that a build without the server has this test too
# (unit.deny_packet, the filter against it packet by packet, links sbxd's
# run manager and is built with the server).
add_executable(test_helper_netns test_helper_netns.c
  ${PROJECT_SOURCE_DIR}/server/runs/deny_packet.c)
target_include_directories(test_helper_netns PRIVATE ${PROJECT_SOURCE_DIR}/server/runs)
target_link_libraries(test_helper_netns PRIVATE sbx_helper_parts sbx_check)
add_test(NAME unit.helper.netns COMMAND test_helper_netns)

add_executable(test_helper_cgroup_join test_helper_cgroup_join.c)
target_link_libraries(test_helper_cgroup_join PRIVATE sbx_helper_parts sbx_check Threads::Threads)
add_test(NAME unit.helper.cgroup_join COMMAND test_helper_cgroup_join)
set_tests_properties(unit.helper.cgroup_join PROPERTIES SKIP_RETURN_CODE 77)

# The filter's binary tree decides as libseccomp's default list of the
# same rules (helper/syscall_filter.c): both run by an interpreter of
# the test's own.
add_executable(test_helper_syscall_filter test_helper_syscall_filter.c)
target_link_libraries(test_helper_syscall_filter PRIVATE sbx_helper_parts sbx_check)
add_test(NAME unit.helper.syscall_filter COMMAND test_helper_syscall_filter)

# What libidn2 needs, read from its file (helper/elf_needed.c, for
# idna_dl.c): the real one, and prefixes and damaged copies of it.
add_executable(test_helper_elf_needed test_helper_elf_needed.c)
target_include_directories(test_helper_elf_needed PRIVATE ${PROJECT_BINARY_DIR}/helper)
target_link_libraries(test_helper_elf_needed PRIVATE sbx_helper_parts sbx_check)
add_test(NAME unit.helper.elf_needed COMMAND test_helper_elf_needed)

# The stacks the helper's children share its memory on (helper/stack.c),
# and the helper's probe interval (sbx_helper_stack_probes) against their
# guard: compiled as the helper is.
add_executable(test_helper_stack test_helper_stack.c)
target_link_libraries(test_helper_stack PRIVATE sbx_helper_parts sbx_check)
sbx_helper_stack_probes(test_helper_stack)
add_test(NAME unit.helper.stack COMMAND test_helper_stack)
