# Helpers shared by every folder's CMakeLists.txt.

# kvtier_warnings(<target>): the house warning set; every target we own uses it.
function(kvtier_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

# kvtier_library(<name> SOURCES ... DEPS ...): one static library per folder, includes
# rooted at the repository root.
function(kvtier_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  kvtier_warnings(${name})
endfunction()

# Tests labelled "sanitized" are also built and run under ASAN+UBSAN by scripts/test.sh
# (target kvtier_sanitized_tests in the build-asan tree).
add_custom_target(kvtier_sanitized_tests)

# kvtier_test(<name> SOURCES ... DEPS ... [LABELS unit|integration|sanitized ...]
# [TIMEOUT s]): one test executable per test file, registered with CTest under its labels.
function(kvtier_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  kvtier_warnings(${name})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if("sanitized" IN_LIST ARG_LABELS)
    add_dependencies(kvtier_sanitized_tests ${name})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "KVTIER_SOURCE_DIR=${PROJECT_SOURCE_DIR};KVTIER_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()

# kvtier_benchmark(<name> SOURCES ... DEPS ...): a Google Benchmark binary (not a test).
function(kvtier_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT KVTIER_BUILD_BENCHMARKS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  kvtier_warnings(${name})
endfunction()

# kvtier_glob_library(<name> DEPS ... [EXCLUDE file.cc ...]): a library from every .cc file
# of the current folder (not recursive), so parallel work on one folder never edits the
# same CMakeLists.txt. Creates nothing while the folder has no sources.
function(kvtier_glob_library name)
  cmake_parse_arguments(ARG "" "" "DEPS;EXCLUDE" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  foreach(ex ${ARG_EXCLUDE})
    list(REMOVE_ITEM srcs ${CMAKE_CURRENT_SOURCE_DIR}/${ex})
  endforeach()
  if(srcs)
    kvtier_library(${name} SOURCES ${srcs} DEPS ${ARG_DEPS})
  endif()
endfunction()

# kvtier_glob_tests(DEPS ... LABELS ... [SANITIZED_MATCH regex] [TIMEOUT s]): one test per
# *_test.cc file of the current folder. Files whose name matches SANITIZED_MATCH also get
# the "sanitized" label.
function(kvtier_glob_tests)
  cmake_parse_arguments(ARG "" "SANITIZED_MATCH;TIMEOUT" "DEPS;LABELS" ${ARGN})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    set(labels ${ARG_LABELS})
    if(ARG_SANITIZED_MATCH AND name MATCHES "${ARG_SANITIZED_MATCH}")
      list(APPEND labels sanitized)
    endif()
    set(deps)
    foreach(dep ${ARG_DEPS})
      if(TARGET ${dep})
        list(APPEND deps ${dep})
      endif()
    endforeach()
    kvtier_test(${name} SOURCES ${src} DEPS ${deps} LABELS ${labels} TIMEOUT ${ARG_TIMEOUT})
  endforeach()
endfunction()
