# common/: the policy codec and the tree walkers.
add_executable(test_policy test_policy.c)
target_link_libraries(test_policy PRIVATE sbx_common)
add_test(NAME unit.policy COMMAND test_policy)

add_executable(test_tree test_tree.c)
target_link_libraries(test_tree PRIVATE sbx_common)
add_test(NAME unit.tree COMMAND test_tree)
