#pragma once
// Objects an HDF5 file stores outside itself (Hdf5External.cpp).
//
// An HDF5 file can make its reader read other files: external links (a link naming another
// file's object), external storage (a dataset whose bytes live in raw files), and virtual
// datasets (a dataset mapping other files' datasets). Checkpoints never may (exit 4); data
// files may when the config opts in (data.allow_external), and the log then names what is read
// from where. DESIGN.md and docs/reliability.md "Hostile files: the threat model".
#include <string>

#include <hdf5.h>

#include "common/Error.h"

namespace mb::h5 {

// The process-wide opt-in for data files (data.allow_external); default false.
void setAllowExternal(bool allow);
bool allowExternal();
// What the link `name` below `loc` points at when it leaves the file or the object tree:
// "an external link to other.h5:/x", "a soft link to /x"; "" for a hard link. Never follows
// the link (H5Lget_info, not H5Oopen).
std::string describeLink(hid_t loc, const std::string& name);
// Throws `code` when a component of `path` (checked from the root down, before it is
// traversed) is an external link, unless `code` is kData and data.allow_external is set (the
// link is then logged). A soft link's target is checked the same way; in a checkpoint
// (kCheckpoint) any soft link is refused (Note [Soft links lead on]).
void checkLinks(hid_t loc, const std::string& path, ExitCode code);
// What an open dataset reads outside its file: "external storage in raw.bin (bytes 0..767)",
// "a virtual dataset (VDS) mapping a.h5:/x, ..."; "" when its bytes are all in the file.
std::string describeOutsideStorage(hid_t dataset);
// Throws `code` naming `what` when describeOutsideStorage is not empty, unless `code` is
// kData and data.allow_external is set (then logs what is read from where, once per dataset).
void checkStorage(hid_t dataset, const std::string& what, ExitCode code);

}  // namespace mb::h5
