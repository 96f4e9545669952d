# SPDX-License-Identifier: Apache-2.0
# common/: the policy codec, the tree walkers, the path rule, the clock and
# the helper protocol's checks.
foreach(t policy tree common_path common_clock common_text common_rpc_status
    common_hostname common_proc_cgroup common_subids common_ctlmsg common_spawn_prog
    common_sha256_pipe)
  add_executable(test_${t} test_${t}.c)
  target_link_libraries(test_${t} PRIVATE sbx_common sbx_check)
endforeach()
add_test(NAME unit.policy COMMAND test_policy)
add_test(NAME unit.tree COMMAND test_tree)
add_test(NAME unit.common.path COMMAND test_common_path)
add_test(NAME unit.common.clock COMMAND test_common_clock)
add_test(NAME unit.common.spawn_prog COMMAND test_common_spawn_prog)
add_test(NAME unit.common.text COMMAND test_common_text)
add_test(NAME unit.common.hostname COMMAND test_common_hostname)
add_test(NAME unit.common.rpc_status COMMAND test_common_rpc_status)
add_test(NAME unit.common.proc_cgroup COMMAND test_common_proc_cgroup)
add_test(NAME unit.common.subids COMMAND test_common_subids)
add_test(NAME unit.common.ctlmsg COMMAND test_common_ctlmsg)
add_test(NAME unit.common.sha256_pipe COMMAND test_common_sha256_pipe)
