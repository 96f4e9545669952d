# sbxd's configuration and the RPC layer (server/, server/rpc/).
add_executable(test_config test_config.c)
target_link_libraries(test_config PRIVATE sbxd_base sbx_check)
add_test(NAME unit.config COMMAND test_config)
