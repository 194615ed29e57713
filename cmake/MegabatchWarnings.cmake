# Warning flags for megabatch's own targets. Third-party headers come in as SYSTEM includes
# through imported targets, so their warnings do not show.
function(megabatch_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(MEGABATCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  megabatch_sanitize(${target})  # cmake/MegabatchSanitizers.cmake
endfunction()
