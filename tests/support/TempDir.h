#pragma once
// A fresh temporary directory for one test, removed with everything in it afterwards.
// (One definition for every test file: two different mb::test::TempDir classes in one binary
// would break the one-definition rule.)
#include <ftw.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace mb::test {

// Removes a directory tree, ignoring errors. Not std::filesystem::remove_all: PyTorch 2.11's
// libtorch.so exports its own copy of that symbol, the dynamic linker binds the tests' calls to
// it, and it jumps to a null pointer (seen on the GPU machine, 2026-11-28).
inline void removeTree(const std::filesystem::path& root) {
  auto removeOne = [](const char* path, const struct stat*, int, struct FTW*) {
    std::remove(path);
    return 0;
  };
  ::nftw(root.c_str(), removeOne, 16, FTW_DEPTH | FTW_PHYS);
}

class TempDir {
 public:
  TempDir() {
    auto base = std::filesystem::temp_directory_path();
    for (int i = 0;; ++i) {
      path_ = base / ("mbtest-" + std::to_string(::getpid()) + "-" + std::to_string(i));
      if (std::filesystem::create_directory(path_)) break;
    }
  }
  ~TempDir() { removeTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace mb::test
