// main() of the multi-rank test binary. Every rank runs every selected test; rank 0 prints
// the normal GoogleTest output and other ranks print only their failures, tagged with the rank.
#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include "common/Log.h"
#include "dist/Watchdog.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb::test {
namespace {

std::unique_ptr<dist::Runtime> gRuntime;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

dist::Runtime& runtime() {
  return *gRuntime;
}

std::shared_ptr<dist::Communicator> dataCommunicator() {
  static std::shared_ptr<dist::Communicator> comm = [] {
    c10::Device where = device();
    if (where.is_cuda())
      return runtime().makeDataCommunicator(BackendKind::kMpi, "cuda", where.index());
    return runtime().makeDataCommunicator(BackendKind::kAuto, "cpu", 0);
  }();
  return comm;
}

}  // namespace mb::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mb::test::gRuntime = std::make_unique<mb::dist::Runtime>(&argc, &argv);
  // A test that fails on one rank must not leave the others waiting forever.
  mb::dist::Watchdog::instance().setTimeout(120);
  int rank = mb::test::gRuntime->rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mb::test::FailurePrinter(rank));
  }
  int status = RUN_ALL_TESTS();
  // The job fails if any rank failed.
  auto flag = at::full({1}, status, at::kInt);
  mb::test::gRuntime->control().allReduce(flag, mb::dist::ReduceOp::kMax, "test status");
  status = flag.item<int>();
  mb::test::gRuntime.reset();
  return status;
}
