#pragma once
// Note [Checkpoints are untrusted input]
// People download checkpoints, share run folders and resume from files other jobs wrote, so a
// checkpoint is read as a file anyone may have edited (docs/reliability.md "Hostile files: the
// threat model"). Before a byte of a tensor is read, the whole tree below /model, /optimizer and
// /extra is walked without following a link or reading a value, and every dataset must be what
// megabatch writes:
//   - a hard link (no external link, no soft link, no user-defined link), to a group or dataset;
//   - its bytes inside the file: no external storage, no virtual dataset (VDS);
//   - a number type (float16/32/64, integers) and a shape whose bytes fit in int64;
//   - the shape the reader expects: the model's parameter or buffer where the model is known
//     (eval, predict, export, sample), else the checkpoint's manifest (/meta manifest, written
//     since this rule; absent in older files), and in every case no more bytes than the file
//     holds: checkpoints are not compressed, so a tensor larger than its file is a lie;
//   - chunked with the Fletcher-32 filter and no other filter (scalars: compact, inside the
//     checksummed object header), every chunk present (none left to the fill value).
// A file that breaks a rule is refused with exit 4 and "not written by megabatch, or
// rewritten", naming the tensor, what it declares and what was expected. Nothing is allocated
// from a declared shape before it passed, so RSS stays bounded by the file's size.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <hdf5.h>

#include "common/Error.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::model {
class Model;
}

namespace mb::train {

// The shape and stored dtype ("float32") a reader expects, by path in the file
// ("model/fc.weight"); `source` says who expects it ("the gru model").
struct ExpectedTensors {
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::string>> tensors;
  std::string source;
};

// One dataset that passed the checks, in the order the groups list them.
struct CheckedTensor {
  std::string path;  // "model/fc.weight"
  std::vector<std::int64_t> dims;
  std::string dtype;  // "float32"
  std::int64_t bytes = 0;
};

// A checkpoint breaking Note [Checkpoints are untrusted input]: exit 4.
class HostileCheckpointError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Checks /meta and /trainer (hard-linked groups) and every dataset below /model, /optimizer and
// /extra; reads no dataset. `checkManifest` = false while the writer builds the manifest.
std::vector<CheckedTensor> verifyCheckpointTree(hid_t file, const std::string& path,
                                                const ExpectedTensors* expected,
                                                bool checkManifest = true);
// True when /meta carries a manifest (checkpoints written since Note [Checkpoints are untrusted
// input]).
bool hasManifest(hid_t file);
// The manifest text of a checked tree: one "path<TAB>dtype<TAB>[d0, d1]<TAB>bytes" line per tensor.
std::string manifestText(const std::vector<CheckedTensor>& tensors);
// "[32, 4]".
std::string shapeText(const std::vector<std::int64_t>& dims);
// The dtype a tensor of `type` is stored as ("float32" for bfloat16).
std::string storedTypeName(at::ScalarType type);

// readCheckpointFile (Checkpoint.h) with the shapes the caller's model gives (nullptr: the
// manifest and the file size only).
CheckpointContent readCheckpointFile(const std::string& path, const ExpectedTensors* expected);
// Only /meta and /trainer (no tensor is read): enough to rebuild the model first.
CheckpointContent readCheckpointHeader(const std::string& path);
// The model's parameters and buffers as a checkpoint stores them ("model/<name>"), for
// readCheckpointFile (CheckpointModel.cpp).
ExpectedTensors expectedTensors(model::Model& module);

}  // namespace mb::train
