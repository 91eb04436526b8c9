# attn_features.cmake — the summary configuration ends with: one line per
# feature, on or off, and why (what it runs on when on; what is missing, the
# Debian package that brings it, or the option that turned it off).
#
#   attn_feature(NAME ON|OFF TEXT)   records a line (in the order of the calls)
#   attn_feature_summary()           prints them, once, at the end of the
#                                    top-level CMakeLists.txt
#
# scripts/install-deps.sh installs every run-time library (a newcomer's build
# has every feature on); --all adds what only the tests, fuzzers and
# benchmarks use.  TEXT must not hold a semicolon (CMake's list separator).

function(attn_feature name enabled text)
  if(enabled)
    set(state "on ")
  else()
    set(state "off")
  endif()
  set_property(GLOBAL APPEND PROPERTY ATTN_FEATURE_NAMES "${name}")
  set_property(GLOBAL PROPERTY "ATTN_FEATURE_LINE_${name}" "${state}  ${text}")
endfunction()

function(attn_feature_summary)
  get_property(names GLOBAL PROPERTY ATTN_FEATURE_NAMES)
  message(STATUS "attn: features (scripts/install-deps.sh installs every run-time library; --all adds the tests' tools):")
  foreach(name ${names})
    get_property(line GLOBAL PROPERTY "ATTN_FEATURE_LINE_${name}")
    string(LENGTH "${name}" n)
    set(pad "")
    if(n LESS 22)
      math(EXPR n "22 - ${n}")
      string(REPEAT " " ${n} pad)
    endif()
    message(STATUS "  ${name}${pad} ${line}")
  endforeach()
endfunction()
