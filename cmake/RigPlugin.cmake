# rig_add_plugin(<name> <kind> SOURCES <src>... [SCHEMA <schema.yaml>] [OUTPUT_DIRECTORY <dir>] [NO_INSTALL])
#
# Builds one rig plugin: a shared object named rig-<kind>-<name>.so whose
# descriptor carries the JSON Schema (written as YAML) embedded from SCHEMA
# (default: schema.yaml next to the calling CMakeLists.txt).
# <kind> is one of: model data_layer optimizer lr_policy communicator.
# The target is called rig-<kind>-<name>; it links rig::rig.
set(_RIG_PLUGIN_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

function(rig_add_plugin name kind)
  cmake_parse_arguments(ARG "NO_INSTALL" "SCHEMA;OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  set(_kinds model data_layer optimizer lr_policy communicator)
  if(NOT kind IN_LIST _kinds)
    message(FATAL_ERROR "rig_add_plugin(${name} ${kind}): kind must be one of: ${_kinds}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "rig_add_plugin(${name} ${kind}): SOURCES is required")
  endif()
  if(NOT ARG_SCHEMA)
    set(ARG_SCHEMA ${CMAKE_CURRENT_SOURCE_DIR}/schema.yaml)
  endif()
  get_filename_component(_schema ${ARG_SCHEMA} ABSOLUTE)
  if(NOT EXISTS ${_schema})
    message(FATAL_ERROR "rig_add_plugin(${name} ${kind}): schema file ${_schema} not found")
  endif()

  # Embed the schema text; a changed schema makes the next build re-configure
  # (file(READ) alone would keep the old text until CMake runs again).
  file(READ ${_schema} RIG_PLUGIN_SCHEMA_TEXT)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_schema})
  set(_target rig-${kind}-${name})
  set(_schema_cpp ${CMAKE_CURRENT_BINARY_DIR}/${_target}-schema.cpp)
  configure_file(${_RIG_PLUGIN_CMAKE_DIR}/rig-plugin-schema.cpp.in ${_schema_cpp} @ONLY)

  add_library(${_target} MODULE ${ARG_SOURCES} ${_schema_cpp})
  # Lets a project depend on all of its plugins at once (rig's unit tests load them).
  set_property(GLOBAL APPEND PROPERTY RIG_PLUGIN_TARGETS ${_target})
  target_link_libraries(${_target} PRIVATE rig::rig)
  # The SDK headers are C++20, whatever the including project's default is.
  target_compile_features(${_target} PRIVATE cxx_std_20)
  set_target_properties(${_target} PROPERTIES PREFIX "" OUTPUT_NAME ${_target}
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${_target} PRIVATE -Wall -Wextra -Werror)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${_target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  elseif(DEFINED RIG_BUILD_PLUGIN_DIR)
    set_target_properties(${_target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${RIG_BUILD_PLUGIN_DIR})
  endif()
  if(NOT ARG_NO_INSTALL)
    if(DEFINED RIG_PLUGIN_INSTALL_DIR)
      install(TARGETS ${_target} LIBRARY DESTINATION ${RIG_PLUGIN_INSTALL_DIR})
    else()
      install(TARGETS ${_target} LIBRARY DESTINATION lib/rig/plugins)
    endif()
  endif()
endfunction()
