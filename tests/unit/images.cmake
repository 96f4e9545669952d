# SPDX-License-Identifier: Apache-2.0
# The image store and its import pipeline (server/images/). The unpack test
# makes its hostile archives with libarchive's writer.
add_executable(test_images_unpack test_images_unpack.c)
target_link_libraries(test_images_unpack PRIVATE sbx_images_import sbx_check)
add_test(NAME unit.images.unpack COMMAND test_images_unpack unpack)
add_test(NAME unit.images.treehash COMMAND test_images_unpack treehash)

add_executable(test_images_store test_images_store.c)
target_link_libraries(test_images_store PRIVATE sbx_images sbx_check)
add_test(NAME unit.images.store COMMAND test_images_store)

add_executable(test_images_source test_images_source.c)
target_link_libraries(test_images_source PRIVATE sbx_images_import sbx_check)
add_test(NAME unit.images.source COMMAND test_images_source)

# Review findings (each case failed before its fix).
add_executable(test_images_import_bounds test_images_import_bounds.c)
target_link_libraries(test_images_import_bounds PRIVATE sbx_images_import sbx_check)
add_test(NAME unit.images.import_bounds COMMAND test_images_import_bounds)
