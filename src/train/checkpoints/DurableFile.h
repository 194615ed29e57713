#pragma once
// Note [Atomic checkpoint writes]
// A checkpoint is written to NAME.tmp, fsynced, renamed to NAME, and the directory fsynced;
// only then is `latest` replaced the same way. A crash or full disk at any point leaves the
// previous checkpoint and the previous `latest` intact. Nothing executes code from the file.
#include <cstddef>
#include <string>

namespace mb::train {

// Writes `count` bytes to a new file at `path` and fsyncs it; on failure removes it and throws
// CheckpointError with errno's text and writeHint()'s advice.
void writeBytesDurably(const std::string& path, const char* bytes, std::size_t count);
// Moves `tmp` over `path` and makes the rename durable (fsync the file, rename, fsync the folder).
void commitFile(const std::string& tmp, const std::string& path);
// Writes `text` to `path` atomically (tmp, fsync, rename, fsync the folder).
void writeFileAtomically(const std::string& path, const std::string& text);
// What to do about a failed write of `path` (errno `error`, 0 if unknown).
std::string writeHint(const std::string& path, int error);

}  // namespace mb::train
