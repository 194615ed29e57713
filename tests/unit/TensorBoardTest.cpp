// Note [TensorBoard event files]: the record framing and its CRC-32C. The reader that checks
// the whole format (protobuf and python3-crc32c) is tests/train/test_tensorboard.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "train/watch/Metrics.h"
#include "train/watch/TensorBoard.h"

namespace mb::train {
namespace {

namespace fs = std::filesystem;

std::uint64_t littleEndian(const std::string& bytes, std::size_t at, int size) {
  std::uint64_t value = 0;
  for (int i = size - 1; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  return value;
}

TEST(TensorBoard, Crc32cMatchesTheKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283U);  // the CRC catalogue's check value
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAU);  // RFC 3720, B.4
  const std::uint32_t crc = crc32c("123456789", 9);
  EXPECT_EQ(maskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8U);
}

TEST(TensorBoard, RecordsAreFramedAndFilesComeInOrder) {
  const fs::path dir = fs::temp_directory_path() / ("mb-tb-unit-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string first;
  {
    TensorBoardWriter writer(dir.string(), 0, "run: {}\n");
    EXPECT_EQ(writer.path(), "");  // nothing before the first record
    JsonRecord record;
    record.add("event", "train").add("step", std::int64_t{1}).add("loss", 0.5);
    writer.write(record);
    first = writer.path();
  }
  std::ifstream in(first, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0;
  int records = 0;
  while (at + 12 <= bytes.size()) {
    const std::uint64_t length = littleEndian(bytes, at, 8);
    EXPECT_EQ(littleEndian(bytes, at + 8, 4), maskedCrc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 16 + length, bytes.size());
    EXPECT_EQ(littleEndian(bytes, at + 12 + length, 4),
              maskedCrc32c(bytes.data() + at + 12, length));
    at += 16 + length;
    ++records;
  }
  EXPECT_EQ(at, bytes.size());
  EXPECT_EQ(records, 3);  // the file version, the config, the record
  // A second writer (a resume within the same second) names a later file.
  TensorBoardWriter again(dir.string(), 1, "run: {}\n");
  JsonRecord record;
  record.add("event", "train").add("step", std::int64_t{2}).add("loss", 0.4);
  again.write(record);
  EXPECT_LT(fs::path(first).filename().string(), fs::path(again.path()).filename().string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mb::train
