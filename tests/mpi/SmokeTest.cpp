// A 2-rank (and 1, 4) smoke test of the runtime: ranks are distinct, the world agrees on
// its size, and an error on one rank reaches every rank through dist::agreed.
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "dist/Agreement.h"
#include "tests/mpi/MpiTestMain.h"

namespace mb {
namespace {

TEST(Smoke, RanksAreDistinctAndComplete) {
  auto& comm = test::runtime().control();
  at::Tensor mine = at::full({1}, comm.rank(), at::kLong);
  at::Tensor all = comm.allGather(mine);
  ASSERT_EQ(all.size(0), comm.size());
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(all[r].item<int64_t>(), r);
  EXPECT_EQ(comm.size(), test::runtime().size());
}

TEST(Smoke, OneRanksErrorReachesEveryRank) {
  auto& comm = test::runtime().control();
  int failing = comm.size() - 1;
  try {
    dist::agreed(comm, "a test phase", [&] {
      if (comm.rank() == failing) throw DataError("/tmp/x.h5: dataset /targets is missing");
    });
    FAIL() << "agreed() must throw on every rank";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ExitCode::kData);
    EXPECT_TRUE(error.agreed());
    EXPECT_NE(std::string(error.what()).find("dataset /targets is missing"), std::string::npos);
    if (comm.size() > 1) {
      EXPECT_NE(std::string(error.what()).find("rank " + std::to_string(failing)),
                std::string::npos);
    }
  }
}

TEST(Smoke, AgreementPassesWhenAllRanksSucceed) {
  auto& comm = test::runtime().control();
  int calls = 0;
  EXPECT_NO_THROW(dist::agreed(comm, "a good phase", [&] { ++calls; }));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mb
