# SPDX-License-Identifier: MIT
#
# The documentation test (ctest label "docs").  Fails when:
#  - an exported tf_ symbol of LIB has no page SRC/man3/<symbol>.3;
#  - a ".so" link page points at a page that does not exist, or at one
#    whose NAME section does not name the symbol;
#  - a man3 page names a function in NAME that the library does not export
#    (a renamed or removed function), or lacks one of the sections NAME,
#    SYNOPSIS, DESCRIPTION, RETURN VALUE, ERRORS, THREAD SAFETY, SEE ALSO;
#  - a generated man7 page (GEN/man7) is missing, still holds a template
#    marker, or lacks NAME, DESCRIPTION, RUNTIME PARAMETERS or SEE ALSO;
#  - a TOLLFREE_* variable of "tollfree-info -c" (INFO) is missing from the
#    RUNTIME PARAMETERS of every generated man7 page;
#  - a page mentions a TOLLFREE_ name that is not a variable (renamed);
#  - a page refers to a tf_*(3) or tollfree*(1|7) page that does not exist;
#  - groff -man -Tutf8 -ww prints anything while formatting a page.
# Without nm the test skips; without groff only the render check is
# skipped, with a printed reason.

cmake_minimum_required(VERSION 3.25)

set(errors "")
macro(fail msg)
  string(APPEND errors "  ${msg}\n")
endmacro()

find_program(NM NAMES nm)
if(NOT NM)
  message("SKIP: nm (binutils) not found: cannot list exported symbols")
  return()
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
                OUTPUT_VARIABLE nm_out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D --defined-only ${LIB} failed")
endif()
string(REGEX MATCHALL "[0-9a-f]+ [TW] tf_[a-z0-9_]+" syms "${nm_out}")
list(TRANSFORM syms REPLACE "^[0-9a-f]+ [TW] " "")
list(REMOVE_DUPLICATES syms)
list(SORT syms)
list(LENGTH syms nsyms)
if(nsyms EQUAL 0)
  message(FATAL_ERROR "no tf_ symbol exported by ${LIB}")
endif()

# Text of section @sec (".SH sec" up to the next ".SH") of @text.
function(section text sec out)
  string(REGEX MATCH "\n\\.SH \"?${sec}\"?\n" m "${text}")
  if(NOT m)
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  string(FIND "${text}" "${m}" pos)
  string(LENGTH "${m}" len)
  math(EXPR pos "${pos} + ${len}")
  string(SUBSTRING "${text}" ${pos} -1 rest)
  string(FIND "${rest}" "\n.SH " end)
  if(end GREATER -1)
    string(SUBSTRING "${rest}" 0 ${end} rest)
  endif()
  set(${out} "${rest}" PARENT_SCOPE)
endfunction()

# Classify every man3 page: a link (".so man3/<main>.3") or a main page.
file(GLOB pages3 ${SRC}/man3/*.3)
set(main3 "")
foreach(p ${pages3})
  get_filename_component(n ${p} NAME_WE)
  file(READ ${p} t)
  if(t MATCHES "^(\\.\\\\\"[^\n]*\n)*\\.so man3/([a-z0-9_]+)\\.3\n$")
    set(target ${CMAKE_MATCH_2})
    set(link_${n} ${target})
    if(NOT EXISTS ${SRC}/man3/${target}.3)
      fail("man3/${n}.3 links to man3/${target}.3, which does not exist")
    endif()
  else()
    list(APPEND main3 ${n})
  endif()
endforeach()

# Main pages: sections, and the names they document.
foreach(n ${main3})
  file(READ ${SRC}/man3/${n}.3 t)
  foreach(sec NAME SYNOPSIS DESCRIPTION "RETURN VALUE" ERRORS
              "THREAD SAFETY" "SEE ALSO")
    if(NOT t MATCHES "\n\\.SH \"?${sec}\"?\n")
      fail("man3/${n}.3 has no ${sec} section")
    endif()
  endforeach()
  section("${t}" NAME name)
  string(REGEX REPLACE "\\\\-.*" "" name "${name}")
  string(REGEX MATCHALL "[a-zA-Z0-9_]+" names "${name}")
  set(names_${n} ${names})
  if(NOT n IN_LIST names)
    fail("man3/${n}.3 does not name ${n} in its NAME section")
  endif()
  foreach(f ${names})
    if(NOT f IN_LIST syms)
      fail("man3/${n}.3 documents ${f}, which the library does not export")
    elseif(NOT EXISTS ${SRC}/man3/${f}.3)
      fail("man3/${n}.3 documents ${f} but man3/${f}.3 does not exist")
    endif()
  endforeach()
endforeach()

# Every exported symbol: a page, and a main page that names it.
set(missing 0)
foreach(s ${syms})
  if(NOT EXISTS ${SRC}/man3/${s}.3)
    fail("${s} is exported but has no man page man3/${s}.3")
    math(EXPR missing "${missing} + 1")
    continue()
  endif()
  if(DEFINED link_${s})
    set(m ${link_${s}})
  else()
    set(m ${s})
  endif()
  if(DEFINED names_${m} AND NOT s IN_LIST names_${m})
    fail("man3/${s}.3 leads to man3/${m}.3, whose NAME does not list ${s}")
  endif()
endforeach()

# Generated man7 pages.
set(pages7 "")
foreach(n tollfree tollfree-soft tollfree-verbs)
  set(p ${GEN}/man7/${n}.7)
  if(NOT EXISTS ${p})
    fail("man7/${n}.7 was not generated (build the 'man' target)")
    continue()
  endif()
  list(APPEND pages7 ${p})
  file(READ ${p} t)
  if(t MATCHES "@[A-Z_]+@")
    fail("man7/${n}.7 still holds a template marker")
  endif()
  foreach(sec NAME DESCRIPTION "RUNTIME PARAMETERS" "SEE ALSO")
    if(NOT t MATCHES "\n\\.SH \"?${sec}\"?\n")
      fail("man7/${n}.7 has no ${sec} section")
    endif()
  endforeach()
endforeach()

# Every configuration variable is documented, with its default, in the
# RUNTIME PARAMETERS section of a generated man7 page.
execute_process(COMMAND ${INFO} -c OUTPUT_VARIABLE cfg RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  fail("${INFO} -c failed (${rc})")
endif()
string(REGEX MATCHALL "(^|\n)TOLLFREE_[A-Z0-9_]+" vars "${cfg}")
list(TRANSFORM vars STRIP)
set(params7 "")
foreach(p ${pages7})
  file(READ ${p} t)
  section("${t}" "RUNTIME PARAMETERS" rp)
  string(REPLACE "\\-" "-" rp "${rp}")
  string(APPEND params7 "${rp}")
endforeach()
list(LENGTH vars nvars)
foreach(v ${vars})
  if(NOT params7 MATCHES "\n\\.B ${v}\n")
    fail("${v} is not documented in the RUNTIME PARAMETERS of a man7 page")
  endif()
endforeach()

# And every TOLLFREE_ name a page mentions is a variable, or one of the
# version macros or the build option; a renamed variable cannot linger.
set(non_vars TOLLFREE_VERSION TOLLFREE_VERSION_MAJOR TOLLFREE_VERSION_MINOR
             TOLLFREE_VERSION_PATCH TOLLFREE_CHECK_VERSION TOLLFREE_VERBS)
file(GLOB sources ${SRC}/man1/*.1 ${SRC}/man3/*.3 ${SRC}/man7/*.7.in)
foreach(p ${sources})
  file(READ ${p} t)
  # Whole tokens; prefixes such as TOLLFREE_POOL_* name a family.
  string(REGEX MATCHALL "TOLLFREE_[A-Z0-9_*]*" names "${t}")
  list(REMOVE_DUPLICATES names)
  foreach(v ${names})
    if(v MATCHES "[_*]$")
      continue()
    endif()
    if(NOT v IN_LIST vars AND NOT v IN_LIST non_vars)
      get_filename_component(pn ${p} NAME)
      fail("${pn} mentions ${v}, which is no configuration variable")
    endif()
  endforeach()
endforeach()

# Cross references: every "tf_x(3)", "tollfree...(1|7)" a page names
# (".BR name (N)" or "\fBname\fR(N)") must be a page of this tree.
file(GLOB pages1 ${SRC}/man1/*.1)
set(nrefs 0)
foreach(p ${pages1} ${pages3} ${pages7})
  file(READ ${p} t)
  string(REPLACE "\\-" "-" t "${t}")
  string(REGEX MATCHALL "(\n\\.BR |\\\\fB)(tf_[a-z0-9_]+|tollfree[a-z-]*)(\\\\fR)?( )?\\(([137])\\)"
         refs "${t}")
  foreach(r ${refs})
    string(REGEX REPLACE ".*(tf_[a-z0-9_]+|tollfree[a-z-]*).*\\(([137])\\)"
           "\\1;\\2" r "${r}")
    list(GET r 0 rn)
    list(GET r 1 rs)
    math(EXPR nrefs "${nrefs} + 1")
    if(rs STREQUAL "7")
      set(target ${GEN}/man7/${rn}.7)
    else()
      set(target ${SRC}/man${rs}/${rn}.${rs})
    endif()
    if(NOT EXISTS ${target})
      get_filename_component(pn ${p} NAME)
      fail("${pn} refers to ${rn}(${rs}), which is not a page of this tree")
    endif()
  endforeach()
endforeach()

# Render every page; link pages through their ".so", from SRC so that the
# relative path resolves.
find_program(GROFF NAMES groff)
if(NOT GROFF)
  message("note: groff not found (Debian package groff-base): "
          "the render check is skipped")
else()
  set(render ${pages1} ${pages3} ${pages7})
  foreach(p ${render})
    execute_process(COMMAND ${GROFF} -man -Tutf8 -ww -z ${p}
                    WORKING_DIRECTORY ${SRC}
                    OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT "${o}${e}" STREQUAL "")
      string(STRIP "${e}" e)
      fail("groff warns about ${p}: ${e}")
    endif()
  endforeach()
  list(LENGTH render nrender)
  message("rendered ${nrender} pages with groff -man -Tutf8 -ww")
endif()

list(LENGTH main3 nmain)
message("${nsyms} exported tf_ symbols, ${nmain} man3 pages plus links, "
        "${missing} symbols without a page, ${nrefs} cross references, "
        "${nvars} configuration variables")
if(NOT errors STREQUAL "")
  message(FATAL_ERROR "man page check failed:\n${errors}")
endif()
