#include "data/pipeline/MappedFile.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::data {
namespace {

// Live mappings, for the SIGBUS handler (async-signal-safe: fixed slots of atomics).
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
};
std::array<Slot, 256> gSlots;
struct sigaction gPrevious {};

void onBusError(int signal, siginfo_t* info, void* context) {
  auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const auto& slot : gSlots) {
    if (address >= slot.begin.load() && address < slot.end.load()) {
      static const char kMessage[] =
          "megabatch: error: a memory-mapped data file (data.host_mmap) was truncated or rewritten "
          "while this run used it\n  hint: write data files under a new name and rename them into "
          "place, or set data.host_mmap=false\n";
      ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
      (void)ignored;
      ::_exit(static_cast<int>(ExitCode::kData));
    }
  }
  // Not ours: hand over to whatever was installed before (default: terminate with a core).
  ::sigaction(SIGBUS, &gPrevious, nullptr);
  if (gPrevious.sa_flags & SA_SIGINFO) {
    if (gPrevious.sa_sigaction != nullptr) gPrevious.sa_sigaction(signal, info, context);
  } else if (gPrevious.sa_handler != SIG_DFL && gPrevious.sa_handler != SIG_IGN) {
    gPrevious.sa_handler(signal);
  }
}

void installHandlerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = onBusError;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &gPrevious);
  });
}

void track(std::uintptr_t begin, std::uintptr_t end) {
  for (auto& slot : gSlots) {
    std::uintptr_t expected = 0;
    if (slot.begin.compare_exchange_strong(expected, begin)) {
      slot.end.store(end);
      return;
    }
  }
}

void untrack(std::uintptr_t begin) {
  for (auto& slot : gSlots) {
    if (slot.begin.load() == begin) {
      slot.end.store(0);
      slot.begin.store(0);
      return;
    }
  }
}

}  // namespace

std::optional<std::uint64_t> mappableOffset(hid_t file, const std::string& dataset,
                                            at::ScalarType type) {
  if (type == at::kBFloat16 || type == at::kBool) return std::nullopt;
  h5::Handle handle = h5::openDataset(file, dataset, ExitCode::kData);
  // Through an external link (data.allow_external) the bytes are in another file than the
  // one mapped: read them instead.
  if (h5::fileNameOf(handle.get()) != h5::fileNameOf(file)) return std::nullopt;
  h5::Handle plist(H5Dget_create_plist(handle.get()), H5Pclose);
  if (H5Pget_layout(plist.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(plist.get()) != 0)
    return std::nullopt;
  h5::Handle fileType(H5Dget_type(handle.get()), H5Tclose);
  if (H5Tequal(fileType.get(), h5::memoryType(type)) <= 0) return std::nullopt;
  haddr_t offset = H5Dget_offset(handle.get());
  H5Eclear2(H5E_DEFAULT);
  if (offset == HADDR_UNDEF) return std::nullopt;
  // HDF5 places raw data at any byte offset (after a 3-byte dataset, say). A tensor mapped
  // there would hold misaligned elements, which LibTorch's kernels may not load: read it.
  if (offset % c10::elementSize(type) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(offset);
}

Mapping mapRows(const std::string& path, std::uint64_t offset,
                const std::vector<std::int64_t>& shape, at::ScalarType type) {
  std::int64_t elements = 1;
  for (auto d : shape)
    elements *= d;
  auto bytes = static_cast<std::size_t>(elements) * c10::elementSize(type);
  if (bytes == 0) return {at::empty(shape, at::TensorOptions().dtype(type)), false};
  installHandlerOnce();
  auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::uint64_t start = offset / page * page;
  std::size_t length = bytes + static_cast<std::size_t>(offset - start);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open for mapping: " + std::strerror(errno));
  void* base =
      ::mmap(nullptr, length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(start));
  int mapError = errno;
  ::close(fd);
  if (base == MAP_FAILED)
    throw DataError(
        path + ": cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(mapError),
        "set data.host_mmap=false to read the data into memory instead");
  Mapping mapping;
  mapping.locked = ::mlock(base, length) == 0;
  auto begin = reinterpret_cast<std::uintptr_t>(base);
  track(begin, begin + length);
  char* data = static_cast<char*>(base) + (offset - start);
  mapping.tensor = at::from_blob(
      data, shape,
      [base, length](void*) {
        untrack(reinterpret_cast<std::uintptr_t>(base));
        ::munmap(base, length);
      },
      at::TensorOptions().dtype(type));
  return mapping;
}

}  // namespace mb::data
