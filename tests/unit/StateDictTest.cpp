// State-dict I/O: round trip by name, checksums, and the errors for missing, unexpected,
// mis-shaped, and inconsistent tied entries. Models on test::device() (Note [Test device]).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void save(const Model& model, const std::string& path) {
  h5::Handle file = h5::createFile(path, true, ExitCode::kCheckpoint);
  h5::Handle group = h5::createGroup(file.get(), "model", ExitCode::kCheckpoint);
  writeStateDict(model, group.get());
}

// Loads `path`'s /model into `model`; returns the CheckpointError message ("" if none).
std::string loadError(Model& model, const std::string& path) {
  h5::Handle file = h5::openFile(path, false, ExitCode::kCheckpoint);
  h5::Handle group = h5::openGroup(file.get(), "model", ExitCode::kCheckpoint);
  try {
    loadStateDict(model, group.get());
  } catch (const CheckpointError& error) {
    EXPECT_EQ(error.code(), ExitCode::kCheckpoint);
    return error.message() + " | " + error.hint();
  }
  return {};
}

bool sameParameterValues(const Model& a, const Model& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) return false;
  for (const auto& item : pa) {
    if (!at::equal(item.value(), pb[item.key()])) return false;
  }
  return true;
}

std::shared_ptr<Model> gpt(std::uint64_t seed, std::int64_t width = 16) {
  return test::deviceModel(test::gptConfig(width, 2, 2), test::tokenInfo(8, 30), seed);
}

TEST(StateDict, RoundTripsEveryKindByName) {
  test::TempDir dir;
  auto lstmInfo = test::seriesInfo({{"m1", 6, 3}, {"h1", 4, 2}});
  auto mlpConfig = test::lstmConfig();
  mlpConfig.kind = "mlp";
  std::vector<std::pair<std::shared_ptr<Model>, std::shared_ptr<Model>>> pairs{
      {gpt(1), gpt(2)},
      {test::deviceModel(test::lstmConfig(), lstmInfo, 1),
       test::deviceModel(test::lstmConfig(), lstmInfo, 2)},
      {test::deviceModel(mlpConfig, lstmInfo, 1), test::deviceModel(mlpConfig, lstmInfo, 2)}};
  for (auto& [source, target] : pairs) {
    std::string path = dir.file(source->kind() + ".h5");
    save(*source, path);
    ASSERT_FALSE(sameParameterValues(*source, *target)) << source->kind();
    EXPECT_EQ(loadError(*target, path), "") << source->kind();
    EXPECT_TRUE(sameParameterValues(*source, *target)) << source->kind();

    h5::Handle file = h5::openFile(path, false, ExitCode::kCheckpoint);
    h5::Handle group = h5::openGroup(file.get(), "model", ExitCode::kCheckpoint);
    std::vector<std::string> names;
    for (const auto& entry : stateDict(*source))
      names.push_back(entry.first);
    auto stored = h5::listGroup(group.get());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(stored, names);  // listGroup is in name order
    for (const auto& name : stored) {
      auto info = h5::describe(h5::openDataset(group.get(), name, ExitCode::kCheckpoint).get());
      EXPECT_TRUE(info.fletcher32) << name;
      EXPECT_EQ(info.typeName(), "float32") << name;
    }
  }
}

TEST(StateDict, GptStoresTheTiedHeadUnderBothNames) {
  auto model = gpt(3);
  auto entries = stateDict(*model);
  ASSERT_EQ(entries.back().first, "lm_head.weight");
  EXPECT_TRUE(entries.back().second.is_same(model->named_parameters()["transformer.wte.weight"]));
}

TEST(StateDict, NamesMissingAndUnexpectedEntries) {
  test::TempDir dir;
  auto source = gpt(1);
  std::string path = dir.file("ckpt.h5");
  save(*source, path);
  {
    h5::Handle file = h5::openFile(path, true, ExitCode::kCheckpoint);
    H5Ldelete(file.get(), "model/transformer.h.1.mlp.c_fc.bias", H5P_DEFAULT);
    h5::Handle group = h5::openGroup(file.get(), "model", ExitCode::kCheckpoint);
    h5::writeTensor(group.get(), "transformer.h.2.ln_1.weight", at::ones({16}), {},
                    ExitCode::kCheckpoint);
  }
  auto target = gpt(2);
  auto before = target->named_parameters()["transformer.wte.weight"].clone();
  std::string message = loadError(*target, path);
  EXPECT_TRUE(contains(message, "ckpt.h5")) << message;
  EXPECT_TRUE(contains(message, "/model")) << message;
  EXPECT_TRUE(contains(message, "missing 1 (transformer.h.1.mlp.c_fc.bias)")) << message;
  EXPECT_TRUE(contains(message, "unexpected 1 (transformer.h.2.ln_1.weight)")) << message;
  // Nothing was loaded.
  EXPECT_TRUE(at::equal(before, target->named_parameters()["transformer.wte.weight"]));
}

TEST(StateDict, NamesShapeMismatches) {
  test::TempDir dir;
  std::string path = dir.file("wide.h5");
  save(*gpt(1, 32), path);
  auto narrow = gpt(2, 16);
  std::string message = loadError(*narrow, path);
  EXPECT_TRUE(contains(message, "has shape [")) << message;
  EXPECT_TRUE(contains(message, "model expects [")) << message;
  EXPECT_TRUE(contains(message, "model.*")) << message;
}

TEST(StateDict, TiedAliasMayBeAbsentButMustAgree) {
  test::TempDir dir;
  auto source = gpt(1);
  std::string path = dir.file("tied.h5");
  save(*source, path);
  {
    h5::Handle file = h5::openFile(path, true, ExitCode::kCheckpoint);
    H5Ldelete(file.get(), "model/lm_head.weight", H5P_DEFAULT);
  }
  auto target = gpt(2);
  EXPECT_EQ(loadError(*target, path), "");
  EXPECT_TRUE(sameParameterValues(*source, *target));
  {
    h5::Handle file = h5::openFile(path, true, ExitCode::kCheckpoint);
    h5::Handle group = h5::openGroup(file.get(), "model", ExitCode::kCheckpoint);
    h5::writeTensor(group.get(), "lm_head.weight", at::zeros({30, 16}), {}, ExitCode::kCheckpoint);
  }
  std::string message = loadError(*gpt(3), path);
  EXPECT_TRUE(
      contains(message, "tied weights 'lm_head.weight' and 'transformer.wte.weight' differ"))
      << message;
}

TEST(StateDict, LoadsIntoAnotherModelKindFailsClearly) {
  test::TempDir dir;
  std::string path = dir.file("lstm.h5");
  auto info = test::seriesInfo({{"m1", 6, 3}});
  save(*test::deviceModel(test::lstmConfig(), info, 1), path);
  auto other = test::deviceModel(test::lstmConfig(), test::seriesInfo({{"m5", 6, 3}}), 1);
  std::string message = loadError(*other, path);
  EXPECT_TRUE(contains(message, "missing 8 (encoders.m5.")) << message;
  EXPECT_TRUE(contains(message, "data.streams")) << message;
}

}  // namespace
}  // namespace mb::model
