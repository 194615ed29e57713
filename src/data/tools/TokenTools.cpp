// megabatch data arith / data text: token corpora in the `tokens` layout.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "data/tools/Random.h"
#include "data/tools/ToolOutput.h"
#include "data/tools/Tools.h"

namespace mb::data {
namespace {

constexpr std::int64_t kArithVocab = 128;  // ASCII

h5::WriteOptions tokenWriteOptions(const WriteSettings& write) {
  if (write.compression != "none" && write.compression != "gzip")
    throw ConfigError("--compression " + write.compression + ": expected none or gzip");
  h5::WriteOptions options;
  options.gzipLevel = write.compression == "gzip" ? 4 : 0;
  options.chunkRows = write.chunkRows;
  return options;
}

struct Problem {
  char op;
  std::int64_t a, b;
  bool operator<(const Problem& other) const {
    return std::tie(op, a, b) < std::tie(other.op, other.a, other.b);
  }
};

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  return a / b;
}  // a >= 0, b >= 1

std::string answer(const Problem& p) {
  switch (p.op) {
    case '+':
      return std::to_string(p.a + p.b);
    case '-':
      return std::to_string(p.a - p.b);
    case '*':
      return std::to_string(p.a * p.b);
    default:
      return std::to_string(floorDiv(p.a, p.b));
  }
}

std::string prompt(const Problem& p) {
  return std::to_string(p.a) + p.op + std::to_string(p.b) + "=";
}

Problem draw(const ArithOptions& o, std::int64_t limit, Rng& rng) {
  Problem p;
  p.op = o.ops[static_cast<std::size_t>(rng.below(static_cast<std::int64_t>(o.ops.size())))];
  p.a = rng.below(limit);
  p.b = p.op == '/' ? 1 + rng.below(limit - 1) : rng.below(limit);
  return p;
}

at::Tensor bytesTensor(const std::string& bytes) {
  at::Tensor out = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), out.data_ptr<std::uint8_t>());
  return out;
}

void validate(const ArithOptions& o) {
  if (o.out.empty()) throw ConfigError("megabatch data arith needs --out FILE.h5");
  if (o.digits < 1 || o.digits > 9)
    throw ConfigError("--digits " + std::to_string(o.digits) + ": expected 1..9");
  if (o.ops.empty() || o.ops.find_first_not_of("+-*/") != std::string::npos)
    throw ConfigError("--ops '" + o.ops + "': expected a combination of + - * /",
                      "e.g. --ops +- or --ops '+-*/'");
  if (o.problems < 1 || o.heldout < 0)
    throw ConfigError("--problems must be >= 1 and --heldout >= 0");
}

}  // namespace

std::string writeArith(const ArithOptions& o) {
  validate(o);
  std::int64_t limit = 1;
  for (std::int64_t d = 0; d < o.digits; ++d)
    limit *= 10;
  std::set<char> ops(o.ops.begin(), o.ops.end());
  double possible = 0;
  for (char op : ops)
    possible += static_cast<double>(limit) * static_cast<double>(op == '/' ? limit - 1 : limit);
  if (static_cast<double>(o.heldout) > possible / 2)
    throw ConfigError("--heldout " + std::to_string(o.heldout) + " is more than half of the " +
                          std::to_string(static_cast<std::int64_t>(possible)) +
                          " distinct problems",
                      "use fewer held-out problems or more --digits");

  Rng rng(o.seed);
  std::set<Problem> heldout;
  std::vector<Problem> heldoutList;
  while (static_cast<std::int64_t>(heldout.size()) < o.heldout) {
    Problem p = draw(o, limit, rng);
    if (heldout.insert(p).second) heldoutList.push_back(p);
  }
  std::string corpus;
  WorkProgress::Options shown;
  shown.label = "data arith";
  shown.unit = "problems";
  shown.total = o.problems;
  shown.tag = "data";
  WorkProgress progress(shown);
  for (std::int64_t i = 0; i < o.problems; ++i) {
    Problem p = draw(o, limit, rng);
    while (heldout.count(p))
      p = draw(o, limit, rng);
    corpus += prompt(p) + answer(p) + "\n";
    if ((i & 4095) == 4095 || i + 1 == o.problems) progress.update(i + 1);
  }
  progress.finish();

  h5::WriteOptions options = tokenWriteOptions(o.write);
  auto code = ExitCode::kFailure;
  h5::Handle file = h5::createFile(o.out, false, code);
  h5::writeTensor(file.get(), "tokens", bytesTensor(corpus), options, code);
  {
    h5::Handle tokens = h5::openDataset(file.get(), "tokens", code);
    h5::writeAttribute(tokens.get(), "vocab_size", kArithVocab, code);
  }
  std::vector<std::string> prompts, answers, opRows;
  for (const auto& p : heldoutList) {
    prompts.push_back(prompt(p));
    answers.push_back(answer(p));
    opRows.push_back(std::string(1, p.op));
  }
  h5::Handle group = h5::createGroup(file.get(), "heldout", code);
  h5::writeTensor(group.get(), "prompts", textRows(prompts), {}, code);
  h5::writeTensor(group.get(), "answers", textRows(answers), {}, code);
  h5::writeTensor(group.get(), "ops", textRows(opRows).reshape({-1}), {}, code);
  h5::writeAttribute(file.get(), "layout", std::string("tokens"), code);
  h5::writeAttribute(file.get(), "generator", std::string("megabatch data arith"), code);
  h5::writeAttribute(file.get(), "digits", o.digits, code);
  h5::writeAttribute(file.get(), "ops", o.ops, code);
  h5::writeAttribute(file.get(), "problems", o.problems, code);
  h5::writeAttribute(file.get(), "heldout", o.heldout, code);
  h5::writeAttribute(file.get(), "seed", static_cast<std::int64_t>(o.seed), code);
  h5::writeAttribute(
      file.get(), "format",
      std::string(
          "ASCII lines 'a<op>b=c\\n' in /tokens (vocab_size 128); held-out problems, never in "
          "/tokens: /heldout/prompts, /heldout/answers (NUL-padded rows), /heldout/ops"),
      code);
  file.close(code, o.out);
  return std::to_string(o.problems) + " problems (" + std::to_string(corpus.size()) +
         " tokens, ops " + o.ops + ", up to " + std::to_string(o.digits) + " digits) and " +
         std::to_string(o.heldout) + " held-out problems; e.g. " +
         prompt(heldoutList.empty() ? draw(o, limit, rng) : heldoutList.front()) + "?";
}

std::string writeTextTokens(const std::string& in, const std::string& out,
                            const WriteSettings& write) {
  if (in.empty() || out.empty())
    throw ConfigError("megabatch data text needs --in FILE.txt and --out FILE.h5");
  // A regular file only: its size is known before anything is allocated, and the tokens take
  // exactly that (a device such as /dev/zero or a FIFO would be read without end).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(in, ec))
    throw ConfigError(
        in + ": " +
            (std::filesystem::exists(in, ec) ? "not a regular file (a directory, device or FIFO)"
                                             : "cannot read"),
        "give the path of a text file");
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(in, ec));
  std::ifstream input(in, std::ios::binary);
  if (!input || ec) throw ConfigError(in + ": cannot read", "check the path");
  if (size < 2)
    throw DataError(in + ": the file has " + std::to_string(size) + " bytes; need at least 2");
  const h5::WriteOptions options = tokenWriteOptions(write);
  auto code = ExitCode::kFailure;
  h5::Handle file = h5::createFile(out, false, code);
  {
    // Streamed (Note [Work progress]): a slab at a time into /tokens, so the text never sits
    // whole in memory and the progress follows the bytes.
    const hsize_t dims[1] = {static_cast<hsize_t>(size)};
    h5::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    if (options.gzipLevel > 0 || options.chunkRows > 0) {
      const hsize_t chunk[1] = {std::min<hsize_t>(
          dims[0], options.chunkRows > 0 ? static_cast<hsize_t>(options.chunkRows) : 1 << 20)};
      H5Pset_chunk(dcpl.get(), 1, chunk);
      if (options.gzipLevel > 0)
        H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzipLevel));
    }
    h5::Handle tokens(H5Dcreate2(file.get(), "tokens", H5T_NATIVE_UINT8, space.get(), H5P_DEFAULT,
                                 dcpl.get(), H5P_DEFAULT),
                      H5Dclose);
    if (!tokens.valid()) throw RuntimeError(out + ": cannot create dataset /tokens");
    WorkProgress::Options shown;
    shown.label = "data text";
    shown.counting = WorkProgress::Unit::kBytes;
    shown.total = size;
    shown.tag = "data";
    shown.startLine = "data text: " + in + " (" + str::humanBytes(static_cast<double>(size)) +
                      ") to byte tokens in " + out;
    WorkProgress progress(shown);
    constexpr std::int64_t kSlab = 4 << 20;
    std::vector<char> buffer(static_cast<std::size_t>(std::min(size, kSlab)));
    for (std::int64_t offset = 0; offset < size; offset += kSlab) {
      const std::int64_t n = std::min(kSlab, size - offset);
      input.read(buffer.data(), n);
      if (input.gcount() != n)
        throw DataError(in + ": read " + std::to_string(offset + input.gcount()) + " of its " +
                        std::to_string(size) + " bytes (did it change while being read?)");
      const hsize_t start[1] = {static_cast<hsize_t>(offset)}, count[1] = {static_cast<hsize_t>(n)};
      h5::Handle memory(H5Screate_simple(1, count, nullptr), H5Sclose);
      H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
      if (H5Dwrite(tokens.get(), H5T_NATIVE_UINT8, memory.get(), space.get(), H5P_DEFAULT,
                   buffer.data()) < 0)
        throw RuntimeError(out + ": cannot write /tokens bytes [" + std::to_string(offset) + ", " +
                               std::to_string(offset + n) + ")",
                           "check the free space of its file system");
      progress.update(offset + n);
    }
    progress.finish();
    h5::writeAttribute(tokens.get(), "vocab_size", std::int64_t{256}, code);
    tokens.close(code, out + " dataset /tokens");
  }
  h5::writeAttribute(file.get(), "layout", std::string("tokens"), code);
  h5::writeAttribute(file.get(), "generator", std::string("megabatch data text"), code);
  h5::writeAttribute(file.get(), "source", in, code);
  file.close(code, out);
  return std::to_string(size) + " byte tokens from " + in + " (vocab_size 256)";
}

}  // namespace mb::data
