// TorchScript archive bounds (ArchiveBounds.h), from the zip format (APPNOTE 6.3: end of central
// directory, zip64 end record and locator, central directory headers, zip64 extra field).
#include "model/kinds/ArchiveBounds.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include "common/Error.h"

namespace mb::model {
namespace {

const char* kHint =
    "model.path must be an archive torch.jit.save wrote; re-save it from the original model";

std::uint64_t le(const std::vector<unsigned char>& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | b[at + static_cast<std::size_t>(i)];
  return v;
}

std::vector<unsigned char> readAt(std::ifstream& in, std::uint64_t offset, std::uint64_t size) {
  std::vector<unsigned char> out(static_cast<std::size_t>(size));
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) out.clear();
  return out;
}

}  // namespace

void checkArchiveBounds(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return;  // the loader says why it cannot read it
  const std::uint64_t fileSize = static_cast<std::uint64_t>(in.tellg());
  auto refuse = [&](const std::string& what) {
    throw ConfigError(
        "model.path = " + path + ": " + what + ": not an archive torch.jit.save wrote, or damaged",
        kHint);
  };
  if (fileSize < 22) return;  // not a zip: LibTorch's own message is clearer
  const std::uint64_t tailSize = std::min<std::uint64_t>(fileSize, 22 + 65535);
  std::vector<unsigned char> tail = readAt(in, fileSize - tailSize, tailSize);
  if (tail.empty()) return;
  std::size_t eocd = std::string::npos;
  for (std::size_t i = tail.size() - 22 + 1; i-- > 0;)
    if (le(tail, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) return;  // not a zip
  std::uint64_t entries = le(tail, eocd + 10, 2);
  std::uint64_t cdSize = le(tail, eocd + 12, 4);
  std::uint64_t cdOffset = le(tail, eocd + 16, 4);
  if (entries == 0xFFFF || cdSize == 0xFFFFFFFF || cdOffset == 0xFFFFFFFF) {
    // zip64: the locator (20 bytes) sits just before the end record.
    if (eocd < 20 || le(tail, eocd - 20, 4) != 0x07064b50)
      refuse("a zip64 archive without its locator");
    std::uint64_t at = le(tail, eocd - 20 + 8, 8);
    if (at > fileSize || fileSize - at < 56) refuse("its zip64 end record lies outside the file");
    std::vector<unsigned char> end = readAt(in, at, 56);
    if (end.empty() || le(end, 0, 4) != 0x06064b50) refuse("its zip64 end record is missing");
    entries = le(end, 32, 8);
    cdSize = le(end, 40, 8);
    cdOffset = le(end, 48, 8);
  }
  if (cdOffset > fileSize || cdSize > fileSize - cdOffset)
    refuse("its central directory (" + std::to_string(cdSize) + " bytes at " +
           std::to_string(cdOffset) + ") lies outside the file of " + std::to_string(fileSize) +
           " bytes");
  std::vector<unsigned char> cd = readAt(in, cdOffset, cdSize);
  if (cd.size() != cdSize) refuse("its central directory cannot be read");
  const std::uint64_t budget = 64 * fileSize + (std::uint64_t{64} << 20);
  std::uint64_t total = 0, pos = 0;
  for (std::uint64_t e = 0; e < entries; ++e) {
    if (pos + 46 > cd.size() || le(cd, pos, 4) != 0x02014b50)
      refuse("its central directory ends after " + std::to_string(e) + " of " +
             std::to_string(entries) + " records");
    const std::uint64_t method = le(cd, pos + 10, 2);
    std::uint64_t packed = le(cd, pos + 20, 4), size = le(cd, pos + 24, 4);
    const std::uint64_t nameLen = le(cd, pos + 28, 2), extraLen = le(cd, pos + 30, 2),
                        commentLen = le(cd, pos + 32, 2);
    std::uint64_t offset = le(cd, pos + 42, 4);
    if (pos + 46 + nameLen + extraLen + commentLen > cd.size())
      refuse("a central directory record runs past the directory");
    const std::string name(cd.begin() + static_cast<std::ptrdiff_t>(pos + 46),
                           cd.begin() + static_cast<std::ptrdiff_t>(pos + 46 + nameLen));
    // zip64 extra field: the 8-byte values of the fields that read 0xFFFFFFFF, in this order.
    for (std::uint64_t x = pos + 46 + nameLen; x + 4 <= pos + 46 + nameLen + extraLen;) {
      const std::uint64_t id = le(cd, x, 2), len = le(cd, x + 2, 2);
      if (x + 4 + len > pos + 46 + nameLen + extraLen) break;
      if (id == 0x0001) {
        std::uint64_t at = x + 4;
        for (std::uint64_t* field : {&size, &packed, &offset})
          if (*field == 0xFFFFFFFF && at + 8 <= x + 4 + len) {
            *field = le(cd, at, 8);
            at += 8;
          }
      }
      x += 4 + len;
    }
    const std::string record = "record '" + name + "' ";
    if (offset > fileSize || packed > fileSize - offset)
      refuse(record + "declares " + std::to_string(packed) + " bytes at offset " +
             std::to_string(offset) + ", more than the file of " + std::to_string(fileSize) +
             " bytes holds");
    if (method == 0 && size != packed)
      refuse(record + "is stored with " + std::to_string(packed) + " bytes but declares " +
             std::to_string(size));
    if (method == 8 && size > packed * 1032 + 1024)
      refuse(record + "declares " + std::to_string(size) + " bytes from " + std::to_string(packed) +
             " deflated ones, more than deflate can expand");
    if (method != 0 && method != 8)
      refuse(record + "uses zip compression method " + std::to_string(method));
    total += size;
    if (total > budget)
      refuse("its records expand to more than " + std::to_string(budget) +
             " bytes (64 times the file plus 64 MiB): a decompression bomb");
    pos += 46 + nameLen + extraLen + commentLen;
  }
}

}  // namespace mb::model
