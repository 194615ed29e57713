#include "common/Check.h"

#include <cstdlib>
#include <sstream>

#include <hdf5.h>

#include "common/Log.h"

namespace mb::detail {

static std::string describe(const char* library, const char* expression, const char* file, int line,
                            const std::string& libraryMessage) {
  std::ostringstream text;
  text << library << " call failed on rank " << log::rank() << ": " << expression << " at " << file
       << ":" << line;
  if (!libraryMessage.empty()) text << ": " << libraryMessage;
  return text.str();
}

void throwCheckFailure(ExitCode code, const char* library, const char* expression, const char* file,
                       int line, const std::string& libraryMessage) {
  throw makeError(code, describe(library, expression, file, line, libraryMessage));
}

void abortCheckFailure(const char* library, const char* expression, const char* file, int line,
                       const std::string& libraryMessage) {
  log::get("app").critical("{}", describe(library, expression, file, line, libraryMessage));
  log::flush();
  std::abort();
}

static herr_t collectHdf5Frame(unsigned depth, const H5E_error2_t* frame, void* data) {
  auto* text = static_cast<std::string*>(data);
  // The innermost frames name the real cause (e.g. "can't open file", "wrong B-tree signature").
  if (!text->empty()) *text += "; ";
  *text += frame->desc ? frame->desc : "?";
  if (frame->func_name) *text += std::string(" (") + frame->func_name + ")";
  return depth < 6 ? 0 : 1;
}

std::string hdf5ErrorStack() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collectHdf5Frame, &text);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

}  // namespace mb::detail
