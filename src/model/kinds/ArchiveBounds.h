#pragma once
// Bounds on a TorchScript archive (a zip file) before LibTorch loads it: model.path may name a
// file someone else wrote (docs/reliability.md "Hostile files: the threat model").
#include <string>

namespace mb::model {

// Reads the zip's central directory only and throws ConfigError (exit 2) naming `path` and the
// record when one declares bytes the file does not hold (offset + size past the end), a stored
// record whose sizes differ, a compression method other than stored/deflate, a deflated record
// expanding more than deflate can (1032:1), or records expanding in all to more than 64 times
// the file plus 64 MiB (a deflate bomb). torch.jit.save writes stored records.
void checkArchiveBounds(const std::string& path);

}  // namespace mb::model
