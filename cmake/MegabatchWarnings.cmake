# Warning flags for megabatch's own targets. Third-party headers come in as SYSTEM includes
# through imported targets, so their warnings do not show.
function(megabatch_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(MEGABATCH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(MEGABATCH_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${MEGABATCH_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${MEGABATCH_SANITIZE})
  endif()
endfunction()
