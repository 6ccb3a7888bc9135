# SPDX-License-Identifier: MIT
#
# Generate a man7 page: copy TEMPLATE to OUTFILE, replacing @RUNTIME_PARAMETERS@ with
# the output of "tollfree-info -c --man --component C" for each component
# in COMPONENTS (comma separated, or "*"), and @VERSION@ with VERSION.
#
# tollfree-info prints a ".SH RUNTIME PARAMETERS" heading and an
# introduction before the first variable (".TP"); the heading is kept once
# and each component's variables get a ".SS" subsection when there are
# several.  Defaults come from the configuration table through the
# library itself, never from this file or the templates.

cmake_minimum_required(VERSION 3.25)

foreach(v INFO TEMPLATE OUTFILE COMPONENTS VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "gen-man7.cmake: ${v} is not set")
  endif()
endforeach()

# COMPONENTS "*" means every component that tollfree-info -c lists, in its
# order, except those in EXCLUDE: variables of a new component then reach
# the overview page without anyone editing this build.
if(COMPONENTS STREQUAL "*")
  execute_process(COMMAND ${INFO} -c OUTPUT_VARIABLE all RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${INFO} -c failed (${rc})")
  endif()
  string(REGEX MATCHALL "component: [a-z0-9_]+" comps "${all}")
  list(TRANSFORM comps REPLACE "^component: " "")
  list(REMOVE_DUPLICATES comps)
  if(DEFINED EXCLUDE)
    string(REPLACE "," ";" excl "${EXCLUDE}")
    list(REMOVE_ITEM comps ${excl})
  endif()
else()
  string(REPLACE "," ";" comps "${COMPONENTS}")
endif()
list(LENGTH comps ncomps)
set(params "")
set(header "")
foreach(c ${comps})
  execute_process(COMMAND ${INFO} -c --man --component ${c}
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${INFO} -c --man --component ${c} failed (${rc})")
  endif()
  string(FIND "${out}" "\n.TP\n" pos)
  if(pos LESS 0)
    message(FATAL_ERROR "no variable of component ${c} in the output")
  endif()
  math(EXPR pos "${pos} + 1")
  string(SUBSTRING "${out}" 0 ${pos} head)
  string(SUBSTRING "${out}" ${pos} -1 body)
  if(header STREQUAL "")
    set(header "${head}")
  endif()
  if(ncomps GREATER 1)
    string(APPEND params ".SS \"Component ${c}\"\n")
  endif()
  string(APPEND params "${body}")
endforeach()

file(READ ${TEMPLATE} text)
string(FIND "${text}" "@RUNTIME_PARAMETERS@" mark)
if(mark LESS 0)
  message(FATAL_ERROR "${TEMPLATE}: no @RUNTIME_PARAMETERS@ marker")
endif()
# The marker stands on a line of its own; drop its newline with it.
string(REPLACE "@RUNTIME_PARAMETERS@\n" "${header}${params}" text "${text}")
string(REPLACE "@VERSION@" "${VERSION}" text "${text}")
file(WRITE ${OUTFILE}.tmp "${text}")
file(RENAME ${OUTFILE}.tmp ${OUTFILE})
