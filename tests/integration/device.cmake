# Device selection (device: auto | cpu | cuda) through the `rig` binary, on any
# machine: see device.sh.
add_test(NAME cli.device
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/device.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${CMAKE_CURRENT_BINARY_DIR}/work/device
          $<TARGET_FILE:rig>)
set_tests_properties(cli.device PROPERTIES LABELS integration TIMEOUT 300)
