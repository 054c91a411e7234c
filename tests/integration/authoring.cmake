# Plugin authoring: tools/new-plugin scaffolds of every kind build out of tree
# against an installed rig, pass their own unit tests, and run in experiments.
add_test(NAME integration.out_of_tree_plugin
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/out_of_tree/run.sh ${PROJECT_SOURCE_DIR}
          ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/out_of_tree_work)
set_tests_properties(integration.out_of_tree_plugin PROPERTIES
  LABELS integration
  TIMEOUT 1200
  PROCESSORS 2)
