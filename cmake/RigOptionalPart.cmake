# Optional parts of the build (the CUDA back end, the MPI and NCCL
# communicators), each a cache setting AUTO, ON or OFF:
#
#   rig_optional_part(VAR DOC)  declares VAR (default AUTO; CMake's other
#       true and false words mean ON and OFF) and reads it into a normal
#       variable VAR: AUTO, ON or OFF.
#   rig_resolve_optional_part(VAR FOUND MISSING)  sets the normal variable
#       VAR to what the build does: ON where VAR is not OFF and FOUND is
#       true, OFF where VAR is AUTO or OFF; VAR=ON without FOUND stops the
#       configure with MISSING, the reason.
#
# The cache keeps what was asked, never what was found, so AUTO looks again at
# every configure. The normal variable hides the cache entry from then on, in
# this folder and below (if(RIG_WITH_CUDA), #cmakedefine01 RIG_WITH_CUDA).

function(rig_optional_part var doc)
  set(${var} AUTO CACHE STRING "Build ${doc}: AUTO (where found), ON (required) or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  set(asked "$CACHE{${var}}")
  string(TOUPPER "${asked}" upper)
  if(upper STREQUAL "AUTO")
    set(mode AUTO)
  elseif(upper MATCHES "^(ON|YES|Y|TRUE|1)$")
    set(mode ON)
  elseif(upper MATCHES "^(OFF|NO|N|FALSE|0)$")
    set(mode OFF)
  else()
    message(FATAL_ERROR "${var}=${asked}: expected AUTO, ON or OFF")
  endif()
  set(${var} ${mode} PARENT_SCOPE)
endfunction()

function(rig_resolve_optional_part var found missing)
  if(${var} STREQUAL "OFF")
    set(result OFF)
  elseif(found)
    set(result ON)
  elseif(${var} STREQUAL "ON")
    message(FATAL_ERROR "${var}=ON, but ${missing}. Configure with -D${var}=AUTO to build "
                        "without it where it is missing, or -D${var}=OFF.")
  else()
    set(result OFF)
  endif()
  set(${var} ${result} PARENT_SCOPE)
endfunction()
