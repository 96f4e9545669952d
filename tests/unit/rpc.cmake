# SPDX-License-Identifier: Apache-2.0
# sbxd's configuration and the RPC layer (server/config/, server/rpc/).
add_executable(test_config test_config.c)
target_link_libraries(test_config PRIVATE sbx_config sbx_check)
add_test(NAME unit.config COMMAND test_config)
add_executable(test_config_files test_config_files.c)
target_link_libraries(test_config_files PRIVATE sbx_config sbx_check)
add_test(NAME unit.config_files COMMAND test_config_files)

# The listener URL rules live in sbx_config (config and rpc/ both follow them).
add_executable(test_rpc_url test_rpc_url.c)
target_link_libraries(test_rpc_url PRIVATE sbx_config sbx_check)
add_test(NAME unit.rpc_url COMMAND test_rpc_url)

# One program per module of the RPC library.
foreach(module alloc auth conn_guard dedupe envelope pool ratelimit reply strings)
  add_executable(test_rpc_${module} test_rpc_${module}.c)
  target_link_libraries(test_rpc_${module} PRIVATE sbx_rpc sbx_check)
  add_test(NAME unit.rpc_${module} COMMAND test_rpc_${module})
endforeach()
# test_rpc_auth reads the audit lines an authentication writes.
target_link_libraries(test_rpc_auth PRIVATE sbx_audit)
