# SPDX-License-Identifier: Apache-2.0
# sbxd's metrics (server/metrics/, library sbx_metrics): the table, its
# atomic series and their exposition.
add_executable(test_metrics_exposition test_metrics_exposition.c)
target_link_libraries(test_metrics_exposition PRIVATE sbx_metrics sbx_check Threads::Threads)
add_test(NAME unit.metrics_exposition COMMAND test_metrics_exposition)
